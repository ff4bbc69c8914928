package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/translog"
)

// cluster is a master and sidecars in this process, over one mem store:
// the agent's logic end to end (the multi-process tests in cmd/shardfence
// run the same over real processes and MinIO).
type cluster struct {
	t      *testing.T
	m      *master.Master
	url    string
	store  *blobstore.Container
	nodes  map[string]*node
	cancel context.CancelFunc
}

type node struct {
	srv    *sidecar.Server
	ag     *Agent
	cancel context.CancelFunc
	done   chan struct{}
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	cfg := master.Config{Shards: 16, Liveness: master.LivenessConfig{ActiveTTL: 300 * time.Millisecond, SuspicionTTL: 300 * time.Millisecond, MonitorInterval: 20 * time.Millisecond}}
	m, err := master.New(cfg, master.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p, h := master.NewHandler(m)
	mux.Handle(p, h)
	p, h = master.NewFleetHandlerFunc(func() (*master.Master, error) { return m, nil })
	mux.Handle(p, h)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(context.Background())
	go m.RunLiveness(ctx)
	c := &cluster{t: t, m: m, url: hs.URL, store: mem.New(), nodes: map[string]*node{}, cancel: cancel}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
		cancel()
	})
	return c
}

// start runs a sidecar with an agent named name.
func (c *cluster) start(name string) *node {
	c.t.Helper()
	return c.startOn(name, c.store, Options{})
}

// startOn runs a sidecar over store (the cluster's store, or a middleware
// over it) with an agent named name; opts set the agent's bounds.
func (c *cluster) startOn(name string, store *blobstore.Container, opts Options) *node {
	c.t.Helper()
	srv, err := sidecar.New(context.Background(), store, sidecar.Options{Node: name})
	if err != nil {
		c.t.Fatal(err)
	}
	ag, err := New(Options{Server: srv, Node: name, Addr: "http://" + name, Store: "mem://test", Masters: []string{c.url},
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond, CloseTimeout: opts.CloseTimeout})
	if err != nil {
		c.t.Fatal(err)
	}
	n := &node{srv: srv, ag: ag}
	c.nodes[name] = n
	n.run()
	return n
}

func (n *node) run() {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		_ = n.ag.Run(ctx)
	}()
}

// pause stops the agent (no pings, no reconciling), as a node that is
// cut off or stopped; its sidecar keeps its shards.
func (n *node) pause() {
	n.cancel()
	<-n.done
}

func (n *node) stop() {
	n.pause()
	_ = n.srv.Shutdown(context.Background())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func openAt(srv *sidecar.Server, shard string, term int64) bool {
	st, err := srv.Status(shard)
	return err == nil && st.Term == term && fmt.Sprint(st.State) == "open"
}

func TestNodeLossMovesTheShardAndTheReturningNodeClosesIt(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	waitFor(t, "both nodes registered", func() bool { return len(c.m.Nodes()) == 2 && a.ag.Status().Registered && b.ag.Status().Registered })

	// b's primary watches its sidecar.
	var mu sync.Mutex
	var events []sidecar.WatchEvent
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go func() {
		_ = b.srv.Watch(wctx, nil, func(ev sidecar.WatchEvent) error {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
			return nil
		})
	}()

	if _, err := c.m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 open on a", func() bool { return openAt(a.srv, "s1", 1) })
	waitFor(t, "the master to see s1 open", func() bool { si, _ := c.m.ShardInfo("s1"); return si.State == master.ShardOpen })
	var acked []string
	for i := range 20 {
		op := fmt.Sprint("op-", i)
		if _, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte(op)}, 0); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, op)
	}

	// a stops pinging: Suspected, then Offline; s1 moves to b at term 2.
	a.pause()
	waitFor(t, "s1 open on b at term 2", func() bool { return openAt(b.srv, "s1", 2) })
	if _, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte("zombie")}, 0); sidecar.Reason(err) != "fenced" {
		t.Fatalf("append on the old owner: %v, want fenced", err)
	}
	got := map[string]bool{}
	if err := b.srv.Read(context.Background(), "s1", 0, 0, func(bt translog.Batch) error {
		for _, op := range bt.Ops {
			got[string(op)] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, op := range acked {
		if !got[op] {
			t.Fatalf("acknowledged %s missing on the new owner", op)
		}
	}
	// The watch on b saw the shard gained, with its restore stream.
	waitFor(t, "b's watch to see s1 gained", func() bool {
		mu.Lock()
		defer mu.Unlock()
		var ops, gained bool
		for _, ev := range events {
			ops = ops || (ev.Kind == sidecar.WatchOps && ev.Shard == "s1")
			gained = gained || (ev.Kind == sidecar.WatchGained && ev.Shard == "s1" && ev.Term == 2 && !ev.Current)
		}
		return ops && gained
	})

	// a comes back: it registers again, learns it lost s1 and closes it;
	// s1 stays on b.
	a.run()
	waitFor(t, "a to close s1", func() bool { _, err := a.srv.Status("s1"); return err != nil })
	if si, _ := c.m.ShardInfo("s1"); si.Assignment.GetNode() != "b" || si.Assignment.GetTerm() != 2 {
		t.Fatalf("s1 after a returned: %+v", si.Assignment)
	}
}

// A node whose store stalls every request while the shard moves away
// still closes the shard when it learns it lost it: the close abandons the
// stalled syncs at CloseTimeout instead of waiting for the store, and none
// of their appends is acknowledged.
func TestReturningNodeClosesAShardWhoseStoreStalls(t *testing.T) {
	c := newCluster(t)
	f := faulty.New(c.store, 1)
	var stall atomic.Bool
	f.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if stall.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}})
	a := c.startOn("a", f.Container, Options{CloseTimeout: 200 * time.Millisecond})
	b := c.start("b")
	waitFor(t, "both nodes registered", func() bool { return a.ag.Status().Registered && b.ag.Status().Registered })
	if _, err := c.m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 open on a", func() bool { return openAt(a.srv, "s1", 1) })
	if _, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte("acked")}, 0); err != nil {
		t.Fatal(err)
	}

	// a's store stalls with an append in flight, and a stops pinging.
	stall.Store(true)
	stuck := make(chan error, 1)
	go func() {
		_, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte("stalled")}, 0)
		stuck <- err
	}()
	a.pause()
	waitFor(t, "s1 open on b at term 2", func() bool { return openAt(b.srv, "s1", 2) })

	a.run()
	waitFor(t, "a to close s1 although its store stalls", func() bool { _, err := a.srv.Status("s1"); return err != nil })
	select {
	case err := <-stuck:
		if err == nil {
			t.Fatal("the append stalled in the store was acknowledged by the node that lost the shard")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled append was never answered after the close")
	}
	got := map[string]bool{}
	if err := b.srv.Read(context.Background(), "s1", 0, 0, func(bt translog.Batch) error {
		for _, op := range bt.Ops {
			got[string(op)] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !got["acked"] {
		t.Fatal("the acknowledged op is missing on the new owner")
	}
}

func TestDrainHandsOffWithoutATermChange(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	waitFor(t, "both nodes registered", func() bool { return a.ag.Status().Registered && b.ag.Status().Registered })
	if _, err := c.m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 open on a", func() bool { return openAt(a.srv, "s1", 1) })
	if _, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte("before")}, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.m.DrainNode(context.Background(), "a", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 open on b at term 1", func() bool { return openAt(b.srv, "s1", 1) })
	waitFor(t, "the master to record b", func() bool { si, _ := c.m.ShardInfo("s1"); return si.Assignment.GetNode() == "b" })
	waitFor(t, "a to close s1", func() bool { _, err := a.srv.Status("s1"); return err != nil })
	if _, err := b.srv.Append(context.Background(), "s1", [][]byte{[]byte("after")}, 0); err != nil {
		t.Fatal(err)
	}
	if si, _ := c.m.ShardInfo("s1"); si.Assignment.GetTerm() != 1 {
		t.Fatalf("drain changed the term: %+v", si.Assignment)
	}
}

// A sidecar restarted before it went offline (same node, new process)
// reopens its shard; the term it wrote at cannot reopen, so the master
// raises it.
func TestRestartedNodeReopensAtARaisedTerm(t *testing.T) {
	c := newCluster(t)
	a := c.start("a")
	waitFor(t, "a registered", func() bool { return a.ag.Status().Registered })
	if _, err := c.m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 open on a", func() bool { return openAt(a.srv, "s1", 1) })
	if _, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte("x")}, 0); err != nil {
		t.Fatal(err)
	}
	a.stop()
	delete(c.nodes, "a")
	a2 := c.start("a")
	waitFor(t, "s1 open again on the restarted a", func() bool {
		st, err := a2.srv.Status("s1")
		return err == nil && st.Term >= 2 && fmt.Sprint(st.State) == "open"
	})
}

// An agent with no master to reach says why and keeps trying.
func TestAgentReportsItsFailures(t *testing.T) {
	c := newCluster(t)
	srv, err := sidecar.New(context.Background(), c.store, sidecar.Options{Node: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	ag, err := New(Options{Server: srv, Node: "x", Addr: "http://x", Masters: []string{"http://127.0.0.1:1"}, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ag.Run(ctx) }()
	waitFor(t, "the agent to record the failure", func() bool { return ag.Status().LastErr != "" })
	cancel()
	<-done
	if ag.Status().Registered {
		t.Fatal("registered with no master")
	}
}

// Given the master and its standby, the agent registers with whichever
// serves as primary.
func TestAgentFindsThePrimary(t *testing.T) {
	c := newCluster(t)
	standby := http.NewServeMux()
	notPrimary := func() (*master.Master, error) { return nil, master.ErrNotPrimary }
	p, h := master.NewFleetHandlerFunc(notPrimary)
	standby.Handle(p, h)
	p, h = master.NewHandlerFunc(notPrimary)
	standby.Handle(p, h)
	hs := httptest.NewServer(standby)
	t.Cleanup(hs.Close)
	srv, err := sidecar.New(context.Background(), c.store, sidecar.Options{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	ag, err := New(Options{Server: srv, Node: "a", Addr: "http://a", Masters: []string{hs.URL, c.url}, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ag.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "registration with the primary", func() bool { st := ag.Status(); return st.Registered && st.Master == c.url })
	if _, err := c.m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 open on a", func() bool { return openAt(srv, "s1", 1) })
}

// A move hands one shard to the node named, at its term, with real
// sidecars: a move whose target stops before it adopts is cancelled and
// the source takes the shard back (and appends again); a move to a live
// node then moves it there. No acknowledged op is lost on the way, and
// the source, once the target owns the shard, acknowledges nothing more.
func TestMoveHandsOffToTheChosenNodeAndKeepsEveryAck(t *testing.T) {
	c := newCluster(t)
	a, b, tgt := c.start("a"), c.start("b"), c.start("c")
	waitFor(t, "the nodes registered", func() bool {
		return len(c.m.Nodes()) == 3 && a.ag.Status().Registered && b.ag.Status().Registered && tgt.ag.Status().Registered
	})
	if _, err := c.m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the master to see s1 open on a", func() bool { si, _ := c.m.ShardInfo("s1"); return si.State == master.ShardOpen })
	var acked []string
	appendOn := func(n *node, op string) {
		t.Helper()
		if _, err := n.srv.Append(context.Background(), "s1", [][]byte{[]byte(op)}, 0); err != nil {
			t.Fatalf("append %s: %v", op, err)
		}
		acked = append(acked, op)
	}
	for i := range 10 {
		appendOn(a, fmt.Sprint("before-", i))
	}

	// The target stops before it can adopt: it goes suspected, the move
	// is cancelled, a takes s1 back at term 1.
	var err error
	for try := 0; try < 5; try++ {
		tgt.pause()
		if _, err = c.m.MoveShard(context.Background(), "s1", "c"); !errors.Is(err, master.ErrNodeNotEligible) {
			break
		}
		// c was already suspected (a slow machine): let it recover.
		tgt.run()
		waitFor(t, "c active again", func() bool {
			for _, n := range c.m.Nodes() {
				if n.Name == "c" && n.State == master.ClientActive {
					return true
				}
			}
			return false
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the move to the stopped node cancelled", func() bool {
		si, _ := c.m.ShardInfo("s1")
		return si.Assignment.GetNode() == "a" && si.Assignment.GetHandoffNode() == "" && si.State == master.ShardOpen
	})
	if si, _ := c.m.ShardInfo("s1"); si.Assignment.GetTerm() != 1 {
		t.Fatalf("the cancelled move changed the term: %+v", si.Assignment)
	}
	if _, err := tgt.srv.Status("s1"); err == nil {
		t.Fatal("the stopped target holds s1")
	}
	appendOn(a, "after-abort")

	// c is back: the move goes through.
	tgt.run()
	waitFor(t, "c active again", func() bool {
		for _, n := range c.m.Nodes() {
			if n.Name == "c" && n.State == master.ClientActive {
				return true
			}
		}
		return false
	})
	si, err := c.m.MoveShard(context.Background(), "s1", "c")
	if err != nil {
		t.Fatal(err)
	}
	if si.State != master.ShardMoving || si.Assignment.GetHandoffNode() != "c" {
		t.Fatalf("after MoveShard: %s %+v", si.State, si.Assignment)
	}
	waitFor(t, "s1 open on c at term 1", func() bool { return openAt(tgt.srv, "s1", 1) })
	waitFor(t, "the master to record c", func() bool {
		si, _ := c.m.ShardInfo("s1")
		return si.Assignment.GetNode() == "c" && si.State == master.ShardOpen
	})
	waitFor(t, "a to close s1", func() bool { _, err := a.srv.Status("s1"); return err != nil })
	if _, err := a.srv.Append(context.Background(), "s1", [][]byte{[]byte("zombie")}, 0); err == nil {
		t.Fatal("the source acknowledged an append after the move")
	}
	for i := range 10 {
		appendOn(tgt, fmt.Sprint("after-", i))
	}
	if si, _ := c.m.ShardInfo("s1"); si.Assignment.GetTerm() != 1 || si.Assignment.GetHandoffNode() != "" {
		t.Fatalf("after the move: %+v", si.Assignment)
	}
	if _, err := b.srv.Status("s1"); err == nil {
		t.Fatal("the move opened s1 on b, which it did not name")
	}
	got := map[string]bool{}
	if err := tgt.srv.Read(context.Background(), "s1", 0, 0, func(bt translog.Batch) error {
		for _, op := range bt.Ops {
			got[string(op)] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, op := range acked {
		if !got[op] {
			t.Fatalf("acknowledged %s missing on the new owner", op)
		}
	}
}
