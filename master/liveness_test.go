package master

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// The client liveness regression list of the seed (Active -> Suspected ->
// Offline, ServingEligibility, ClientOffboardingJob, compatibility), on a
// fake clock. Every test drives the monitor with CheckLiveness after
// moving the clock, as the monitor goroutine would.

// liveCfg is a liveness config with 10 s / 20 s TTLs and a 1 s monitor.
func liveCfg(sync bool) Config {
	return Config{
		Liveness:    LivenessConfig{ActiveTTL: 10 * time.Second, SuspicionTTL: 20 * time.Second, MonitorInterval: time.Second},
		Offboarding: OffboardingConfig{Sync: sync, RetryBase: time.Millisecond, RetryMax: 4 * time.Millisecond},
	}
}

// advance advances the clock by d in monitor-interval steps, running a pass
// after each, as a monitor that never stalls does.
func advance(m *Master, clk *FakeClock, d time.Duration) {
	step := m.live.cfg.MonitorInterval
	for d > 0 {
		s := min(step, d)
		clk.Advance(s)
		d -= s
		m.CheckLiveness(context.Background())
	}
}

func state(m *Master, client string) ClientState { return m.live.ClientState(client) }

func ping(t *testing.T, m *Master, client string) PingStatus {
	t.Helper()
	st, err := m.Ping(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestActiveSuspectedOfflineOnTheTTLs(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	mount(t, m, "c1", 1, 1000)
	m.CheckLiveness(context.Background())
	advance(m, clk, 9*time.Second)
	if s := state(m, "c1"); s != ClientActive {
		t.Fatalf("9 s after the mount: %v, want active", s)
	}
	advance(m, clk, time.Second)
	if s := state(m, "c1"); s != ClientSuspected {
		t.Fatalf("10 s after the mount: %v, want suspected", s)
	}
	advance(m, clk, 19*time.Second)
	if s := state(m, "c1"); s != ClientSuspected {
		t.Fatalf("19 s into the suspicion window: %v, want suspected", s)
	}
	advance(m, clk, time.Second)
	// Offline, offboarded at once (synchronous), and forgotten.
	if s := state(m, "c1"); s != 0 {
		t.Fatalf("after both TTLs: %v, want offboarded (unknown)", s)
	}
	if st := m.Stats(); st.Segments != 0 {
		t.Fatalf("segments after offboarding: %d", st.Segments)
	}
}

// The suspicion window starts when the master commits Active -> Suspected:
// a monitor that judges late never shortens it.
func TestSuspicionWindowStartsAtTheCommittedTransition(t *testing.T) {
	cfg := liveCfg(true)
	cfg.Liveness.StallAfter = time.Hour // a late pass here, not a stall
	m, clk := newTestMaster(t, cfg, Options{})
	mount(t, m, "c1", 1, 1000)
	m.CheckLiveness(context.Background())
	clk.Advance(25 * time.Second) // the active TTL ran out 15 s ago
	p := m.CheckLiveness(context.Background())
	if len(p.Suspected) != 1 || state(m, "c1") != ClientSuspected {
		t.Fatalf("late pass: %+v, state %v", p, state(m, "c1"))
	}
	clk.Advance(19 * time.Second) // 44 s: 34 s past the active TTL, 19 s since the commit
	m.CheckLiveness(context.Background())
	if s := state(m, "c1"); s != ClientSuspected {
		t.Fatalf("19 s after the committed transition: %v, want suspected (the window is 20 s from the commit)", s)
	}
	clk.Advance(time.Second)
	m.CheckLiveness(context.Background())
	if s := state(m, "c1"); s != 0 {
		t.Fatalf("20 s after the commit: %v, want offboarded", s)
	}
}

// A monitor that did not observe (the master paused, starved, or its
// process stopped) does not judge anyone on that time: after the stall
// every client has the window it had left when the monitor last looked.
func TestStalledMonitorDoesNotMassOffline(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	for i := range 5 {
		mount(t, m, fmt.Sprintf("c%d", i), uint64(i+1), 1000)
	}
	advance(m, clk, 3*time.Second)
	clk.Advance(10 * time.Minute) // far past both TTLs
	p := m.CheckLiveness(context.Background())
	if !p.Stalled || len(p.Suspected)+len(p.Offline) != 0 {
		t.Fatalf("pass after a 10 min stall: %+v, want a stall and no transition", p)
	}
	if p.Unobserved < 10*time.Minute-time.Second {
		t.Fatalf("unobserved %v", p.Unobserved)
	}
	// The clients' pings reach the resumed master within their window.
	advance(m, clk, 5*time.Second)
	for i := range 5 {
		c := fmt.Sprintf("c%d", i)
		if s := state(m, c); s != ClientActive {
			t.Fatalf("%s: %v, want active (7 s left after the stall)", c, s)
		}
		if st := ping(t, m, c); st != PingOK {
			t.Fatalf("%s ping: %v", c, st)
		}
	}
	// A client that stays silent still goes suspected, on its remaining
	// window only: 3 s of its 10 s were used before the stall.
	advance(m, clk, 9*time.Second)
	if s := state(m, "c0"); s != ClientActive {
		t.Fatalf("9 s after the pings: %v", s)
	}
	advance(m, clk, time.Second)
	if s := state(m, "c0"); s != ClientSuspected {
		t.Fatalf("10 s after the pings: %v, want suspected", s)
	}
	// A stall during the suspicion window extends it too.
	advance(m, clk, 5*time.Second)
	clk.Advance(time.Hour)
	m.CheckLiveness(context.Background())
	if s := state(m, "c0"); s != ClientSuspected {
		t.Fatalf("after a stall in the suspicion window: %v, want suspected", s)
	}
	advance(m, clk, 16*time.Second)
	if s := state(m, "c0"); s != 0 {
		t.Fatalf("after the remaining 15 s of suspicion: %v, want offboarded", s)
	}
}

// Ping recovers a Suspected client with nothing cleaned up: its segments,
// objects and placement are as they were.
func TestSuspectedRecoversOnPingWithNothingCleaned(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c2", 2, 1000)
	put(t, m, "c1", "t", "k", 10, PutOptions{Replicas: 2})
	m.CheckLiveness(context.Background())
	advance(m, clk, 8*time.Second)
	ping(t, m, "c2")
	advance(m, clk, 2*time.Second)
	if state(m, "c1") != ClientSuspected || state(m, "c2") != ClientActive {
		t.Fatalf("states %v %v", state(m, "c1"), state(m, "c2"))
	}
	ctx := context.Background()
	// Suspected: no new replica, no descriptor; retained.
	reps, err := m.GetReplicaList(ctx, "t", "k")
	if err != nil || len(reps) != 1 || reps[0].SegmentID != 2 {
		t.Fatalf("descriptors while c1 is suspected: %+v %v", reps, err)
	}
	for i := range 3 {
		r, err := m.PutStart(ctx, PutRequest{Client: "c2", Tenant: "t", Key: fmt.Sprint("s", i), Size: 10})
		if err != nil || r[0].SegmentID != 2 {
			t.Fatalf("put while c1 is suspected: %+v %v", r, err)
		}
	}
	if st := ping(t, m, "c1"); st != PingOK {
		t.Fatalf("ping of a suspected client: %v, want OK", st)
	}
	if s := state(m, "c1"); s != ClientActive {
		t.Fatalf("after the ping: %v", s)
	}
	reps, err = m.GetReplicaList(ctx, "t", "k")
	if err != nil || len(reps) != 2 {
		t.Fatalf("descriptors after recovery: %+v %v", reps, err)
	}
	if st := m.Stats(); st.Segments != 2 || st.Objects != 4 {
		t.Fatalf("stats after recovery: %+v", st)
	}
	if inc := m.live.Record("c1").Incarnation(); inc != 1 {
		t.Fatalf("recovery started incarnation %d; it continues the first", inc)
	}
}

// Only Ping and successful mounts are liveness signals: puts, reads and
// ends of a client do not keep it alive.
func TestOnlyPingAndMountAreSignals(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c2", 2, 1000)
	m.CheckLiveness(context.Background())
	ctx := context.Background()
	for i := range 10 {
		advance(m, clk, time.Second)
		ping(t, m, "c2")
		put(t, m, "c1", "t", fmt.Sprint(i), 10, PutOptions{})
		_, _ = m.GetReplicaList(ctx, "t", fmt.Sprint(i))
	}
	if s := state(m, "c1"); s != ClientSuspected {
		t.Fatalf("a client that only put and read: %v, want suspected", s)
	}
	// A mount is a signal.
	mount(t, m, "c1", 3, 1000)
	if s := state(m, "c1"); s != ClientActive {
		t.Fatalf("after a mount: %v", s)
	}
}

// Work started before the suspicion converges: PutEnd and PutRevoke of a
// Suspected client's puts are accepted.
func TestCompletionCallbacksAcceptedWhileSuspected(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c2", 2, 1000)
	ctx := context.Background()
	for _, k := range []string{"end", "revoke"} {
		if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: k, Size: 10, PutOptions: PutOptions{Replicas: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	m.CheckLiveness(context.Background())
	advance(m, clk, 10*time.Second)
	if state(m, "c1") != ClientSuspected {
		t.Fatal("c1 not suspected")
	}
	if err := m.PutEnd(ctx, "c1", "t", "end"); err != nil {
		t.Fatalf("PutEnd while suspected: %v", err)
	}
	if err := m.PutRevoke(ctx, "c1", "t", "revoke"); err != nil {
		t.Fatalf("PutRevoke while suspected: %v", err)
	}
}

// Ping answers NEED_REMOUNT to an unknown client and to an Offline one;
// Offline is a remount barrier until the offboarding completed, and the
// remount after it starts a new incarnation without the old resources.
func TestOfflineIsARemountBarrier(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	cleanup := func(context.Context, *ClientOffboardingJob) error {
		if fail.Load() {
			return errors.New("external metadata store unavailable")
		}
		return nil
	}
	j := &memJournal{}
	m, clk := newTestMaster(t, liveCfg(true), Options{ExternalCleanup: cleanup, Journal: j})
	if st := ping(t, m, "nobody"); st != PingNeedRemount {
		t.Fatalf("unknown client: %v", st)
	}
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c2", 2, 1000)
	put(t, m, "c2", "t", "on-c1", 10, PutOptions{Replicas: 2})
	m.CheckLiveness(context.Background())
	for range 30 {
		advance(m, clk, time.Second)
		ping(t, m, "c2")
	}
	if s := state(m, "c1"); s != ClientOffline {
		t.Fatalf("after both TTLs with a failing cleanup: %v, want offline", s)
	}
	old := m.live.Record("c1")
	if st := ping(t, m, "c1"); st != PingNeedRemount {
		t.Fatalf("offline client ping: %v", st)
	}
	// The segments and replicas are gone (the first steps succeeded), the
	// object lives on c2.
	if reps, err := m.GetReplicaList(context.Background(), "t", "on-c1"); err != nil || len(reps) != 1 || reps[0].SegmentID != 2 {
		t.Fatalf("object after c1's segment was unmounted: %+v %v", reps, err)
	}
	err := m.MountSegment(context.Background(), "c1", SegmentSpec{ID: 5, Size: 100, Endpoint: "c1:9"})
	wantErr(t, err, ErrClientOffline)
	_, err = m.ReMountSegment(context.Background(), "c1", []SegmentSpec{{ID: 2, Size: 1000, Endpoint: "x"}})
	if !errors.Is(err, ErrClientOffline) && !errors.Is(err, ErrWrongClient) {
		t.Fatalf("remount of an offline client: %v", err)
	}
	if n := m.OffboardingPending(); n != 1 {
		t.Fatalf("pending jobs %d", n)
	}
	m.offboarding.mu.Lock()
	job := m.offboarding.queue[0]
	m.offboarding.mu.Unlock()
	if job.Record != old {
		t.Fatalf("the pending job retires incarnation %d, want %d", job.Record.Incarnation(), old.Incarnation())
	}
	unmounts := 0
	for _, op := range j.ops {
		if op.Kind == OpUnmountSegment && op.Client == "c1" {
			unmounts++
		}
	}
	if unmounts != 1 {
		t.Fatalf("logged unmounts of c1: %d", unmounts)
	}
	// The next passes retry; once the cleanup succeeds the record goes.
	advance(m, clk, time.Second)
	if n, lastErr := job.Attempts(); n < 2 || lastErr == nil {
		t.Fatalf("attempts %d, %v", n, lastErr)
	}
	fail.Store(false)
	advance(m, clk, time.Second)
	if !job.Done() || state(m, "c1") != 0 {
		t.Fatalf("job done %v, state %v", job.Done(), state(m, "c1"))
	}
	mount(t, m, "c1", 5, 1000)
	r := m.live.Record("c1")
	if r == old || r.Incarnation() <= old.Incarnation() || r.State() != ClientActive {
		t.Fatalf("remount after offboarding: incarnation %d (old %d), %v", r.Incarnation(), old.Incarnation(), r.State())
	}
}

// A resource keeps the incarnation that created it: a later incarnation of
// the same client id never makes it serve again.
func TestLaterIncarnationDoesNotReviveOldResources(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	mount(t, m, "c1", 1, 1000)
	m.topo.RLock()
	seg := m.segments[1]
	m.topo.RUnlock()
	m.CheckLiveness(context.Background())
	advance(m, clk, 30*time.Second)
	mount(t, m, "c1", 2, 1000)
	if m.eligibility.CanServe(seg) || m.eligibility.ShouldRetain(seg) {
		t.Fatal("the old incarnation's segment serves or is retained under the new incarnation")
	}
	if seg.Owner().State() != ClientOffline {
		t.Fatalf("old owner %v", seg.Owner().State())
	}
}

// The asynchronous executor runs the same steps as the synchronous path:
// the same end state, one batch for many clients, retries with backoff,
// queue metrics, and a drain when it stops.
func TestAsyncOffboardingSameSemantics(t *testing.T) {
	end := func(sync bool) (Stats, []ClientLiveness, *Master) {
		m, clk := newTestMaster(t, liveCfg(sync), Options{Journal: &memJournal{}})
		for i := range 8 {
			mount(t, m, fmt.Sprintf("c%d", i), uint64(i+1), 1000)
		}
		put(t, m, "c7", "t", "k", 10, PutOptions{Replicas: 8})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		m.CheckLiveness(ctx)
		for range 31 {
			advance(m, clk, time.Second)
			ping(t, m, "c7")
		}
		if !sync {
			// Started once the seven jobs are queued, so they form one
			// batch whatever the scheduling.
			go func() { defer close(done); m.offboarding.run(ctx) }()
		}
		deadline := time.Now().Add(10 * time.Second)
		for m.OffboardingPending() > 0 || len(m.Liveness().Snapshot()) > 1 {
			if time.Now().After(deadline) {
				t.Fatalf("async offboarding did not finish: %d pending, %+v", m.OffboardingPending(), m.Liveness().Snapshot())
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if !sync {
			<-done
		}
		return m.Stats(), m.Liveness().Snapshot(), m
	}
	s1, l1, _ := end(true)
	s2, l2, m2 := end(false)
	if s1.Segments != s2.Segments || s1.Objects != s2.Objects || len(l1) != len(l2) || s2.Segments != 1 || s2.Objects != 1 {
		t.Fatalf("sync %+v %+v, async %+v %+v", s1, l1, s2, l2)
	}
	if v := histogramCount(t, m2.metrics.offboardingBatch); v != 1 {
		t.Fatalf("async batches %v, want the 7 clients in one", v)
	}
}

func TestAsyncOffboardingRetriesWithBackoffAndDrains(t *testing.T) {
	var calls atomic.Int32
	cleanup := func(context.Context, *ClientOffboardingJob) error {
		if calls.Add(1) <= 3 {
			return errors.New("external cleanup unavailable")
		}
		return nil
	}
	m, clk := newTestMaster(t, liveCfg(false), Options{ExternalCleanup: cleanup})
	mount(t, m, "c1", 1, 1000)
	m.CheckLiveness(context.Background())
	advance(m, clk, 30*time.Second)
	if m.OffboardingPending() != 1 {
		t.Fatalf("queued %d", m.OffboardingPending())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.offboarding.run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for m.OffboardingPending() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("job not completed after its retries")
		}
		time.Sleep(time.Millisecond)
	}
	if calls.Load() != 4 || counterValue(t, m.metrics.offboardingRetries) != 3 {
		t.Fatalf("cleanup calls %d, retries %v", calls.Load(), counterValue(t, m.metrics.offboardingRetries))
	}
	cancel()
	<-done

	// Shutdown drains: a job queued when the executor stops is completed
	// before it returns, its retry delay ignored.
	calls.Store(0)
	once := func(context.Context, *ClientOffboardingJob) error {
		if calls.Add(1) == 1 {
			return errors.New("external cleanup unavailable")
		}
		return nil
	}
	m2, clk2 := newTestMaster(t, liveCfg(false), Options{ExternalCleanup: once})
	m2.offboarding.cfg.RetryBase, m2.offboarding.cfg.RetryMax = time.Hour, time.Hour
	mount(t, m2, "c1", 1, 1000)
	m2.CheckLiveness(context.Background())
	advance(m2, clk2, 30*time.Second)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { defer close(done2); m2.offboarding.run(ctx2) }()
	for calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel2()
	<-done2
	if m2.OffboardingPending() != 0 || state(m2, "c1") != 0 {
		t.Fatalf("after the drain: %d pending, c1 %v", m2.OffboardingPending(), state(m2, "c1"))
	}
}

// After a promotion (or restart) every restored client starts Active with
// a fresh active TTL; readiness still follows the remount protocol.
func TestRestoredClientsStartActive(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000)}, sobj("k", 10, mem(1, 0, 10)))
	if n := m.RestoreLiveness(); n != 1 {
		t.Fatalf("restored %d clients", n)
	}
	r := m.live.Record("c1")
	if r.State() != ClientActive || !r.Restored() {
		t.Fatalf("restored record %v restored=%v", r.State(), r.Restored())
	}
	if st := ping(t, m, "c1"); st != PingNeedRemount {
		t.Fatalf("ping before the remount: %v", st)
	}
	m.CheckLiveness(context.Background())
	advance(m, clk, 9*time.Second)
	if s := state(m, "c1"); s != ClientActive {
		t.Fatalf("9 s after the restore: %v", s)
	}
	remount(t, m, 1)
	if st := ping(t, m, "c1"); st != PingOK {
		t.Fatalf("ping after the remount: %v", st)
	}
	if reps, err := m.GetReplicaList(context.Background(), "t", "k"); err != nil || len(reps) != 1 {
		t.Fatalf("read after the remount: %+v %v", reps, err)
	}
}

// A promoted master that hears from nobody cannot tell dead clients from
// its own isolation (elected while cut off from the nodes): restored
// windows run only from the first signal any client sends it, and then
// each restored client gets a whole active TTL from that signal.
// (Simulation seed 87382: a standby elected while partitioned moved every
// shard 0.8 s after the partition healed.)
func TestRestoredWindowsRunFromTheFirstSignal(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	c2 := sseg(2, 1000)
	c2.ClientId = "c2"
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), c2})
	if n := m.RestoreLiveness(); n != 2 {
		t.Fatalf("restored %d clients", n)
	}
	m.CheckLiveness(context.Background())
	advance(m, clk, 40*time.Second) // past both TTLs, nobody heard from
	for _, c := range []string{"c1", "c2"} {
		if s := state(m, c); s != ClientActive {
			t.Fatalf("%s after 40 s in which no client reached the master: %v, want active", c, s)
		}
	}
	ping(t, m, "c1") // the first signal: the master is reachable
	advance(m, clk, 9*time.Second)
	if s := state(m, "c2"); s != ClientActive {
		t.Fatalf("c2 9 s after the first signal: %v, want active", s)
	}
	advance(m, clk, time.Second)
	if s := state(m, "c2"); s != ClientSuspected {
		t.Fatalf("c2 10 s after the first signal: %v, want suspected", s)
	}
}

func TestLivenessConfigRanges(t *testing.T) {
	for _, c := range []LivenessConfig{
		{ActiveTTL: time.Millisecond},
		{SuspicionTTL: 48 * time.Hour},
		{ActiveTTL: time.Second, MonitorInterval: 2 * time.Second},
		{MonitorInterval: time.Second, StallAfter: time.Second},
	} {
		if _, err := New(Config{Liveness: c}, Options{}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// A signal between the monitor's last pass and the stall restarts a window
// the stall must not eat either.
func TestStallAfterALateSignal(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	mount(t, m, "c1", 1, 1000)
	m.CheckLiveness(context.Background())
	clk.Advance(500 * time.Millisecond)
	ping(t, m, "c1") // after the last pass, before the master froze
	clk.Advance(time.Hour)
	if p := m.CheckLiveness(context.Background()); !p.Stalled || len(p.Suspected) != 0 {
		t.Fatalf("pass after the stall: %+v", p)
	}
	advance(m, clk, 8*time.Second)
	if s := state(m, "c1"); s != ClientActive {
		t.Fatalf("8 s after the stall: %v, want active (the ping's window was not eaten)", s)
	}
}
