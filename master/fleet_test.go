package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// watcher records what WatchAssignments told a node.
type watcher struct {
	sets   chan []*NodeAssignment
	cancel context.CancelFunc
	done   chan error
}

func watch(t *testing.T, m *Master, node, session string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{sets: make(chan []*NodeAssignment, 100), cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- m.WatchAssignments(ctx, node, session, func(l []*NodeAssignment, _ uint64) error {
			w.sets <- l
			return nil
		})
	}()
	t.Cleanup(cancel)
	return w
}

// until waits for a set that satisfies ok.
func (w *watcher) until(t *testing.T, what string, ok func([]*NodeAssignment) bool) []*NodeAssignment {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-w.sets:
			if ok(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("the node was never told %s", what)
		}
	}
}

// none reports whether no set arrives within a short while.
func (w *watcher) latest() []*NodeAssignment {
	var l []*NodeAssignment
	for {
		select {
		case l = <-w.sets:
		case <-time.After(50 * time.Millisecond):
			return l
		}
	}
}

func has(shard string, term int64) func([]*NodeAssignment) bool {
	return func(l []*NodeAssignment) bool {
		for _, a := range l {
			if a.GetShard() == shard && a.GetTerm() == term && a.GetAdoptAllocation() == "" {
				return true
			}
		}
		return false
	}
}

func empty(l []*NodeAssignment) bool { return len(l) == 0 }

func register(t *testing.T, m *Master, name string) {
	t.Helper()
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: name, Addr: "http://" + name, Store: "s3://b/p", Fencing: true, Session: name + "-1"}); err != nil {
		t.Fatal(err)
	}
}

func assign(t *testing.T, m *Master, shard, node string, auto, early bool) ShardInfo {
	t.Helper()
	si, err := m.AssignShard(context.Background(), AssignRequest{Shard: shard, Node: node, AutoRestore: auto, TakeoverAtSuspected: early})
	if err != nil {
		t.Fatal(err)
	}
	return si
}

func row(t *testing.T, m *Master, shard string) *masterv1.ShardAssignment {
	t.Helper()
	si, err := m.ShardInfo(shard)
	if err != nil {
		t.Fatal(err)
	}
	return si.Assignment
}

func report(t *testing.T, m *Master, node string, a *masterv1.ShardAssignment, alloc string, kind masterv1.ShardReport, mod func(*ShardReport)) {
	t.Helper()
	r := ShardReport{Node: node, Session: node + "-1", Shard: a.GetShard(), Term: a.GetTerm(), Allocation: alloc, Kind: kind}
	if mod != nil {
		mod(&r)
	}
	if err := m.ReportShard(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// keepAlive pings the nodes named while the clock moves.
func keepAlive(t *testing.T, m *Master, clk *FakeClock, d time.Duration, nodes ...string) {
	t.Helper()
	for d > 0 {
		clk.Advance(time.Second)
		d -= time.Second
		for _, n := range nodes {
			ping(t, m, NodeClientID(n))
		}
		m.CheckLiveness(context.Background())
	}
}

// A node that goes Offline loses its auto-restore shards to a live node at
// term+1 with a new allocation, recorded durably before any node is told;
// the node does not get them back when it returns.
func TestOfflineNodeShardsMoveAtAHigherTerm(t *testing.T) {
	j := &memJournal{}
	m, clk := newTestMaster(t, liveCfg(true), Options{Journal: j})
	for _, n := range []string{"a", "b", "c"} {
		register(t, m, n)
	}
	s1 := assign(t, m, "s1", "a", true, false)
	assign(t, m, "s2", "a", false, false)
	wa, wb := watch(t, m, "a", "a-1"), watch(t, m, "b", "b-1")
	wa.until(t, "s1 and s2", func(l []*NodeAssignment) bool { return len(l) == 2 })
	a1 := row(t, m, "s1")
	report(t, m, "a", a1, a1.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	if si, _ := m.ShardInfo("s1"); si.State != ShardOpen || s1.Assignment.GetTerm() != 1 {
		t.Fatalf("s1 after the open report: %+v", si)
	}
	m.CheckLiveness(context.Background())
	keepAlive(t, m, clk, 30*time.Second, "b", "c")
	got := row(t, m, "s1")
	if got.GetTerm() != 2 || got.GetNode() == "a" || got.GetNode() == "" || got.GetAllocation() == a1.GetAllocation() {
		t.Fatalf("s1 after a went offline: %+v", got)
	}
	if s2 := row(t, m, "s2"); s2.GetNode() != "" || s2.GetReason() == "" {
		t.Fatalf("s2 (auto_restore off) after a went offline: %+v, want unassigned with a reason", s2)
	}
	// Every assignment a node was told was in the log first.
	if got.GetNode() == "b" {
		wb.until(t, "s1 at term 2", has("s1", 2))
	}
	logged := false
	for _, op := range j.ops {
		if op.Kind == OpAssignShard && op.Shard.GetShard() == "s1" && op.Shard.GetTerm() == 2 {
			logged = true
		}
	}
	if !logged {
		t.Fatal("takeover not logged")
	}
	// a's watch ends with an empty set: it closes what it held.
	wa.until(t, "that it holds nothing", empty)
	// a comes back: a new incarnation, and neither shard is its again.
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "a", Addr: "http://a", Store: "s3://b/p", Fencing: true, Session: "a-2"}); err != nil {
		t.Fatal(err)
	}
	keepAlive(t, m, clk, 3*time.Second, "a", "b", "c")
	if r := row(t, m, "s1"); r.GetNode() == "a" || r.GetTerm() != 2 {
		t.Fatalf("s1 after a returned: %+v", r)
	}
}

// Durable before telling anyone: while the log has not acknowledged a
// takeover, no node is told of it.
func TestTakeoverToldOnlyOnceDurable(t *testing.T) {
	j := &holdJournal{}
	m, clk := newTestMaster(t, liveCfg(true), Options{Journal: j})
	register(t, m, "a")
	register(t, m, "b")
	assign(t, m, "s1", "a", true, false)
	wb := watch(t, m, "b", "b-1")
	wb.until(t, "its empty set", empty)
	j.hold(true)
	// a goes offline; the takeover is recorded, the log holds it back.
	m.CheckLiveness(context.Background())
	passes := make(chan struct{}, 64)
	for range 30 {
		clk.Advance(time.Second)
		ping(t, m, NodeClientID("b"))
		go func() { m.CheckLiveness(context.Background()); passes <- struct{}{} }() // an offboarding waits for the log
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for row(t, m, "s1").GetTerm() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("no takeover recorded")
		}
		time.Sleep(time.Millisecond)
	}
	if si, _ := m.ShardInfo("s1"); si.Durable {
		t.Fatal("the takeover shows durable before the log acknowledged it")
	}
	if l := wb.latest(); l != nil && has("s1", 2)(l) {
		t.Fatal("b was told of the takeover before the log acknowledged it")
	}
	j.hold(false)
	wb.until(t, "s1 at term 2 once durable", has("s1", 2))
	for range 30 {
		<-passes
	}
}

// holdJournal acknowledges at once, or, while held, only when released.
type holdJournal struct {
	mu      sync.Mutex
	held    bool
	waiting []chan struct{}
}

func (j *holdJournal) hold(on bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.held = on
	if !on {
		for _, c := range j.waiting {
			close(c)
		}
		j.waiting = nil
	}
}

func (j *holdJournal) Record(*Op) Ticket {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := make(chan struct{})
	if j.held {
		j.waiting = append(j.waiting, c)
	} else {
		close(c)
	}
	return chanTicket(c)
}

func (j *holdJournal) Sync() Ticket      { return j.Record(nil) }
func (j *holdJournal) Placement() Ticket { return j.Record(nil) }

// Per-shard choice: a shard that asked for it moves when its owner is only
// Suspected; one that did not waits for Offline. A Suspected node that
// pings again is Active with its other shards untouched.
func TestTakeoverAtSuspectedIsPerShard(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	register(t, m, "a")
	register(t, m, "b")
	assign(t, m, "early", "a", true, true)
	assign(t, m, "late", "a", true, false)
	m.CheckLiveness(context.Background())
	keepAlive(t, m, clk, 10*time.Second, "b")
	if s := state(m, NodeClientID("a")); s != ClientSuspected {
		t.Fatalf("a: %v", s)
	}
	if r := row(t, m, "early"); r.GetNode() != "b" || r.GetTerm() != 2 {
		t.Fatalf("early after a went suspected: %+v", r)
	}
	if r := row(t, m, "late"); r.GetNode() != "a" || r.GetTerm() != 1 {
		t.Fatalf("late after a went suspected: %+v", r)
	}
	if st := ping(t, m, NodeClientID("a")); st != PingOK {
		t.Fatalf("a's ping: %v", st)
	}
	if s := state(m, NodeClientID("a")); s != ClientActive {
		t.Fatalf("a after its ping: %v", s)
	}
	keepAlive(t, m, clk, 30*time.Second, "a", "b")
	if r := row(t, m, "late"); r.GetNode() != "a" || r.GetTerm() != 1 {
		t.Fatalf("late after a recovered: %+v", r)
	}
}

// auto_restore only for shards that can be fenced; the reason says why.
func TestAutoRestoreOnlyForFencedShards(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{})
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "u", Addr: "http://u", Store: "x", Fencing: false, Session: "u-1"}); err != nil {
		t.Fatal(err)
	}
	_, err := m.AssignShard(context.Background(), AssignRequest{Shard: "s", Node: "u", AutoRestore: true, Settings: &sidecarv1.ShardSettings{FencingDisabled: true}})
	wantErr(t, err, ErrInvalidArgument)
	_, err = m.AssignShard(context.Background(), AssignRequest{Shard: "s", Node: "u", AutoRestore: true, Settings: &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_OBSERVE}})
	wantErr(t, err, ErrInvalidArgument)
	if !errorsContains(err, "observe mode") {
		t.Fatalf("observe-mode auto_restore refused for: %v", err)
	}
	_, err = m.AssignShard(context.Background(), AssignRequest{Shard: "s", Node: "u", AutoRestore: true})
	wantErr(t, err, ErrNodeNotEligible)
	if !errorsContains(err, "precondition probe") {
		t.Fatalf("reason: %v", err)
	}
	if _, err := m.AssignShard(context.Background(), AssignRequest{Shard: "s", Node: "u", Settings: &sidecarv1.ShardSettings{FencingDisabled: true}}); err != nil {
		t.Fatalf("an unfenced shard without auto_restore: %v", err)
	}
}

// Settings the owner would refuse at open are refused at assign, with what
// is wrong, and the table is left as it was.
func TestAssignRefusesSettingsTheOwnerWouldRefuse(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{})
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "u", Addr: "http://u", Store: "x", Fencing: true, Session: "u-1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		settings *sidecarv1.ShardSettings
		want     string
	}{
		{&sidecarv1.ShardSettings{AckOrder: 3}, "ack order 3"},
		{&sidecarv1.ShardSettings{Mode: 9}, "fencing mode 9"},
		{&sidecarv1.ShardSettings{LeaseIntervalMs: -1}, "lease_interval_ms"},
		{&sidecarv1.ShardSettings{MaxPipeline: 1 << 30}, "max_pipeline"},
	} {
		_, err := m.AssignShard(context.Background(), AssignRequest{Shard: "s", Node: "u", Settings: c.settings})
		wantErr(t, err, ErrInvalidArgument)
		if !errorsContains(err, c.want) || !errorsContains(err, `shard "s"`) || errorsContains(err, "tenant") {
			t.Errorf("settings %v refused for %v, want it to name the shard and %q", c.settings, err, c.want)
		}
	}
	if rows := m.Shards(); len(rows) != 0 {
		t.Fatalf("refused assigns left rows: %v", rows)
	}
	if _, err := m.AssignShard(context.Background(), AssignRequest{Shard: "s", Node: "u", Settings: &sidecarv1.ShardSettings{
		AckOrder: sidecarv1.AckOrder_ACK_ORDER_SEQUENCED, Mode: sidecarv1.FencingMode_FENCING_MODE_CREATE_ONLY}}); err != nil {
		t.Fatalf("valid settings: %v", err)
	}
}

func errorsContains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// A stale grant (the store holds a higher term) raises the term above it,
// durably, and the node is told again.
func TestStaleGrantRaisesTheTerm(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{})
	register(t, m, "a")
	a := assign(t, m, "s", "a", true, false).Assignment
	w := watch(t, m, "a", "a-1")
	report(t, m, "a", a, a.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_FAILED, func(r *ShardReport) { r.Reason, r.SuccessorTerm = "fenced", 7 })
	w.until(t, "s at term 8", has("s", 8))
	b := row(t, m, "s")
	report(t, m, "a", b, b.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_FAILED, func(r *ShardReport) { r.Reason = "term_already_open" })
	w.until(t, "s at term 9", has("s", 9))
	// A report of an older term changes nothing.
	report(t, m, "a", a, a.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_FAILED, func(r *ShardReport) { r.Reason, r.SuccessorTerm = "fenced", 20 })
	if r := row(t, m, "s"); r.GetTerm() != 9 {
		t.Fatalf("after a stale report: %+v", r)
	}
}

// A drain moves a shard with the source-performed handoff: same term, the
// source hands off, the target is told to adopt with the context, and
// owns the shard once it reports open; a failed adoption is cancelled and
// the source takes the shard back.
func TestDrainHandsOffWithinTheTerm(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{})
	register(t, m, "a")
	register(t, m, "b")
	a := assign(t, m, "s", "a", true, false).Assignment
	wa, wb := watch(t, m, "a", "a-1"), watch(t, m, "b", "b-1")
	moving, waiting, err := m.DrainNode(context.Background(), "a", false)
	if err != nil || moving != 1 || waiting != 0 {
		t.Fatalf("drain: %d %d %v", moving, waiting, err)
	}
	src := wa.until(t, "to hand s off", func(l []*NodeAssignment) bool { return len(l) == 1 && l[0].GetHandoffNode() == "b" })[0]
	if src.GetTerm() != a.GetTerm() {
		t.Fatalf("handoff changes the term: %+v", src)
	}
	report(t, m, "a", a, a.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, func(r *ShardReport) { r.HandoffContext = []byte("ctx") })
	tgt := wb.until(t, "to adopt s", func(l []*NodeAssignment) bool { return len(l) == 1 && string(l[0].GetAdoptContext()) == "ctx" })[0]
	report(t, m, "b", a, tgt.GetAdoptAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	wa.until(t, "it no longer holds s", empty)
	if r := row(t, m, "s"); r.GetNode() != "b" || r.GetTerm() != a.GetTerm() || r.GetAllocation() != tgt.GetAdoptAllocation() || r.GetHandoffNode() != "" {
		t.Fatalf("after the handoff: %+v", r)
	}
	// The drained node takes no new shard.
	if _, err := m.AssignShard(context.Background(), AssignRequest{Shard: "x", Node: "a"}); !errors.Is(err, ErrNodeNotEligible) {
		t.Fatalf("assign to a draining node: %v", err)
	}
	// Undrain, drain b back to a, and fail the adoption: cancelled.
	if _, _, err := m.DrainNode(context.Background(), "a", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.DrainNode(context.Background(), "b", false); err != nil {
		t.Fatal(err)
	}
	b := row(t, m, "s")
	report(t, m, "b", b, b.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, func(r *ShardReport) { r.HandoffContext = []byte("ctx2") })
	report(t, m, "a", b, b.GetHandoffAllocation(), masterv1.ShardReport_SHARD_REPORT_FAILED, func(r *ShardReport) { r.Err = "disk full" })
	wb.until(t, "to keep s, handoff cancelled", func(l []*NodeAssignment) bool { return len(l) == 1 && l[0].GetHandoffNode() == "" })
	if r := row(t, m, "s"); r.GetNode() != "b" || r.GetHandoffNode() != "" {
		t.Fatalf("after a failed adoption: %+v", r)
	}
}

// The table survives the master: replaying its log, or restoring a
// complete snapshot, gives the same rows.
func TestFleetDurableThroughLogAndSnapshot(t *testing.T) {
	j := &memJournal{}
	m, _ := newTestMaster(t, liveCfg(true), Options{Journal: j})
	register(t, m, "a")
	register(t, m, "b")
	for i := range 4 {
		assign(t, m, fmt.Sprint("s", i), "", true, i%2 == 0)
	}
	if _, _, err := m.DrainNode(context.Background(), "b", false); err != nil {
		t.Fatal(err)
	}
	if err := m.UnassignShard(context.Background(), "s3"); err != nil {
		t.Fatal(err)
	}
	want := m.Shards()
	check := func(what string, got *Master) {
		t.Helper()
		rows := got.Shards()
		if len(rows) != len(want) {
			t.Fatalf("%s: %d rows, want %d", what, len(rows), len(want))
		}
		for i := range rows {
			a, b := rows[i].Assignment, want[i].Assignment
			if a.String() != b.String() {
				t.Fatalf("%s: row %d %v, want %v", what, i, a, b)
			}
		}
		checkIndex(t, what, got, "a", "b")
		nodes := got.Nodes()
		if len(nodes) != 2 || !nodes[1].Draining {
			t.Fatalf("%s: nodes %+v", what, nodes)
		}
		if n := got.RestoreLiveness(); n != 2 {
			t.Fatalf("%s: restored %d node clients", what, n)
		}
	}
	replayed, _ := newTestMaster(t, liveCfg(true), Options{})
	for _, op := range j.ops {
		b, err := EncodeEntry(op)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := DecodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := replayed.ReplayStandby(context.Background(), dec); err != nil {
			t.Fatal(err)
		}
	}
	check("replayed log", replayed)
	files := writeSnapshot(t, m, SnapshotV2)
	restored, _ := newTestMaster(t, liveCfg(true), Options{})
	if _, err := restored.RestoreSnapshot(context.Background(), files); err != nil {
		t.Fatal(err)
	}
	check("restored snapshot", restored)
}

// A log entry of a fleet kind is checked like any other.
func TestFleetEntriesAreChecked(t *testing.T) {
	for _, op := range []*Op{
		{Kind: OpNode},
		{Kind: OpNode, Node: &masterv1.NodeRecord{Name: "bad|name"}},
		{Kind: OpAssignShard, Shard: &masterv1.ShardAssignment{Shard: "s"}},
		{Kind: OpAssignShard, Shard: &masterv1.ShardAssignment{Shard: "-s", Term: 1, Allocation: "a"}},
		{Kind: OpMountSegment, Segment: &masterv1.StandbySegment{Id: 1, Size: 1, ClientId: "c"}, Node: &masterv1.NodeRecord{Name: "n"}},
	} {
		if _, err := EncodeEntry(op); !errors.Is(err, ErrEntryMalformed) {
			t.Errorf("%v %v: %v", op.Kind, op, err)
		}
	}
}

// A node's store URL is kept, shown and logged without credentials,
// whatever the node sent: `master nodes --json` and the log in the store
// used to carry secret_key= as the node sent it.
func TestRegisterNodeRedactsTheStoreURL(t *testing.T) {
	j := &memJournal{}
	m, _ := newTestMaster(t, liveCfg(true), Options{Journal: j})
	const secret = "SEKRIT9"
	store := "s3://AK:" + secret + "@bucket/p?region=eu-west-1&secret_key=" + secret + "&pass=" + secret
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "n", Addr: "http://n", Store: store, Fencing: true, Session: "n-1"}); err != nil {
		t.Fatal(err)
	}
	nodes := m.Nodes()
	if len(nodes) != 1 || strings.Contains(nodes[0].Store, secret) || !strings.Contains(nodes[0].Store, "bucket/p") || !strings.Contains(nodes[0].Store, "region=eu-west-1") {
		t.Fatalf("nodes: %+v", nodes)
	}
	for _, op := range j.ops {
		if b, _ := proto.Marshal(op.Node); strings.Contains(string(b), secret) {
			t.Fatalf("the log records the store URL with its credentials: %v", op.Node)
		}
	}
}

// Two processes with one --node name: the second is refused while the
// first signals (it used to be taken for a restart, and the two took the
// name from each other about ten times a second), and a restarted
// process is let in once the old one has been silent for the hold.
func TestNodeNameHeldByLiveProcess(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	reg := func(session, addr string) (NodeRegistered, error) {
		return m.RegisterNode(context.Background(), NodeRegistration{Name: "a", Addr: addr, Store: "s3://b/p", Fencing: true, Session: session})
	}
	first, err := reg("a-1", "http://a")
	if err != nil {
		t.Fatal(err)
	}
	hold := nodeHold(liveCfg(true).Liveness)
	if hold != 3*time.Second {
		t.Fatalf("hold %v with a 10 s active TTL, want three 1 s ping intervals", hold)
	}
	for i := range 5 {
		_, err := reg("a-2", "http://intruder")
		if !errors.Is(err, ErrNodeHeld) || connect.CodeOf(connectError(err)) != connect.CodeAlreadyExists || Reason(err) != "NODE_HELD" {
			t.Fatalf("round %d: a second process for a live name: %v (code %v)", i, err, connect.CodeOf(connectError(err)))
		}
		if !strings.Contains(err.Error(), `"http://a"`) || !strings.Contains(err.Error(), "--node") {
			t.Fatalf("the refusal names neither the holder nor the flag: %v", err)
		}
		clk.Advance(hold - time.Millisecond)
		ping(t, m, NodeClientID("a"))
	}
	if inc := m.live.Record(NodeClientID("a")).Incarnation(); inc != first.Incarnation {
		t.Fatalf("the refusals changed the incarnation: %d, was %d", inc, first.Incarnation)
	}
	if n := m.fleet.nodes["a"]; n.session != "a-1" || n.rec.GetAddr() != "http://a" {
		t.Fatalf("the refused process took the node: session %q addr %q", n.session, n.rec.GetAddr())
	}
	// The same process registering again keeps its name.
	if _, err := reg("a-1", "http://a"); err != nil {
		t.Fatal(err)
	}
	// The first process dies; after the hold its successor gets in as a
	// new incarnation and publishes its address.
	clk.Advance(hold)
	second, err := reg("a-2", "http://a2")
	if err != nil {
		t.Fatalf("a restarted process after %v of silence: %v", hold, err)
	}
	if second.Incarnation == first.Incarnation || m.fleet.nodes["a"].rec.GetAddr() != "http://a2" {
		t.Fatalf("restart: incarnation %d (was %d), addr %q", second.Incarnation, first.Incarnation, m.fleet.nodes["a"].rec.GetAddr())
	}
	// The old process resumes: now it is the one refused.
	if _, err := reg("a-1", "http://a"); !errors.Is(err, ErrNodeHeld) {
		t.Fatalf("the old process after its successor registered: %v", err)
	}
}

// A slow log does not hold the liveness monitor: a pass whose takeover
// the log has not acknowledged returns after one monitor interval (it
// used to wait for the log, and the next pass took the wait for a stall
// of the master and stretched every window by it), the takeover is
// published once durable, and the next pass does not make it again.
func TestMonitorDoesNotWaitOutASlowLog(t *testing.T) {
	j := &holdJournal{}
	cfg := liveCfg(false)
	cfg.Liveness.MonitorInterval = 50 * time.Millisecond
	m, clk := newTestMaster(t, cfg, Options{Journal: j})
	register(t, m, "a")
	register(t, m, "b")
	assign(t, m, "s1", "a", true, true)
	wb := watch(t, m, "b", "b-1")
	wb.until(t, "its empty set", empty)
	j.hold(true)
	defer j.hold(false)
	clk.Advance(11 * time.Second)
	ping(t, m, NodeClientID("b"))
	pass := func() LivenessPass {
		t.Helper()
		done := make(chan LivenessPass, 1)
		go func() { done <- m.CheckLiveness(context.Background()) }()
		select {
		case p := <-done:
			return p
		case <-time.After(10 * time.Second):
			t.Fatal("a monitor pass waited for the held log")
			return LivenessPass{}
		}
	}
	if p := pass(); len(p.Suspected) != 1 {
		t.Fatalf("pass: %+v, want a suspected", p)
	}
	if n := testutil.ToFloat64(m.metrics.livenessLogWaits); n != 1 {
		t.Fatalf("log waits counted: %v, want 1", n)
	}
	if r := row(t, m, "s1"); r.GetTerm() != 2 || r.GetNode() != "b" {
		t.Fatalf("s1 after the pass: %+v, want recorded at term 2 on b", r)
	}
	for range 3 {
		pass()
	}
	if r := row(t, m, "s1"); r.GetTerm() != 2 {
		t.Fatalf("s1 after more passes: term %d, want still 2", r.GetTerm())
	}
	if l := wb.latest(); l != nil && has("s1", 2)(l) {
		t.Fatal("b was told of the takeover before the log acknowledged it")
	}
	j.hold(false)
	wb.until(t, "s1 at term 2 once durable", has("s1", 2))
}
