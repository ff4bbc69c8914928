package ha

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/recovery"
)

// The Elector's bookkeeping, with plain numbers.
func TestElectorWaitsTheLongerTimeoutWithAJitter(t *testing.T) {
	const ms = int64(time.Millisecond)
	e := NewElector(time.Second, 7, 0)
	d, ok := e.Until(0)
	if !ok || d < time.Second || d > time.Second+time.Second/electionJitterDivisor {
		t.Fatalf("a fresh Elector claims in %v (%v), want 1 s plus at most a fifth", d, ok)
	}
	// A sign of life restarts the wait.
	e.Alive(500 * ms)
	if d, _ := e.Until(1400 * ms); d <= 0 {
		t.Fatalf("due %v after a sign of life 900 ms ago", d)
	}
	if d, _ := e.Until(1700 * ms); d > 0 {
		t.Fatalf("not due 1.2 s after the last sign of life (jitter %v): %v", e.jitter, d)
	}
	// A new term is a sign of life; an old one is not.
	if !e.SawTerm(3, 2000*ms) || e.SawTerm(3, 2500*ms) || e.SawTerm(2, 2500*ms) {
		t.Fatal("sawTerm: only a term above the known one is news")
	}
	if d, _ := e.Until(2500 * ms); d <= 0 {
		t.Fatal("due right after a new term was seen")
	}
	// The primary announces a longer timeout: wait that long.
	e.PrimaryTimeout(3 * time.Second)
	e.Alive(0)
	if e.Timeout() != 3*time.Second {
		t.Fatalf("timeout %v, want the primary's 3 s", e.Timeout())
	}
	if d, _ := e.Until(2900 * ms); d <= 0 {
		t.Fatal("claimed before the primary's announced timeout")
	}
	// A primary without a leadership lease: never claim by itself.
	e.PrimaryTimeout(0)
	if _, ok := e.Until(1 << 60); ok {
		t.Fatal("claims over a primary that keeps no lease")
	}
	// Elections off here: never.
	if _, ok := NewElector(0, 1, 0).Until(1 << 60); ok {
		t.Fatal("an Elector with no timeout claims")
	}
	// Two electors with different seeds draw different shares (so they
	// do not claim in lockstep); the same seed draws the same.
	a, b, c := NewElector(time.Second, 1, 0), NewElector(time.Second, 2, 0), NewElector(time.Second, 1, 0)
	if a.jitter == b.jitter || a.jitter != c.jitter {
		t.Fatalf("jitters %v %v %v", a.jitter, b.jitter, c.jitter)
	}
}

func TestLeaseKeepsAMarginForDrift(t *testing.T) {
	for _, et := range []time.Duration{time.Second, 3 * time.Second} {
		l := LeaseFor(et)
		// Steady clocks within 5% of real time: the lease, stretched by
		// a slow primary clock, ends before the wait, shrunk by a fast
		// standby clock.
		if float64(l)/0.95 >= float64(et)/1.05 {
			t.Fatalf("lease %v for timeout %v leaves no margin for 5%% drift", l, et)
		}
		if r := RenewEvery(et); 2*r >= l {
			t.Fatalf("renewal every %v: two slow renewals exhaust the %v lease", r, l)
		}
	}
	if LeaseFor(0) != 0 {
		t.Fatal("a lease without elections")
	}
}

// electing starts a node with elections at timeout et, named name.
func electing(t *testing.T, store *blobstore.Container, standby bool, name string, et time.Duration, seed uint64) *node {
	t.Helper()
	return start(t, store, standby, func(o *Options) {
		o.Node, o.Advertise, o.ElectionTimeout, o.ElectionSeed = name, "http://"+name, et, seed
	})
}

// primaryOf waits until exactly one of nodes is primary and returns it.
func primaryOf(t *testing.T, what string, nodes ...*node) *node {
	t.Helper()
	var p *node
	waitFor(t, what, func() bool {
		p = nil
		for _, n := range nodes {
			if _, err := n.Serving(); err == nil {
				if p != nil {
					t.Fatalf("two primaries at once: %s (term %d) and %s (term %d)", p.opts.Node, p.Status().Term, n.opts.Node, n.Status().Term)
				}
				p = n
			}
		}
		return p != nil
	})
	return p
}

// A primary that stops: one of two standbys claims the next term by
// itself, the other follows it, every acknowledged change is in the new
// primary, and nobody claims again while it lives.
func TestElectionReplacesAStoppedPrimary(t *testing.T) {
	runBackends(t, func(t *testing.T, store *blobstore.Container) {
		const et = 600 * time.Millisecond
		p := electing(t, store, false, "m1", et, 1)
		m := primary(t, p)
		s1 := electing(t, store, true, "m2", et, 2)
		s2 := electing(t, store, true, "m3", et, 3)
		mountSeg(t, m, 1)
		for i := range 10 {
			putObj(t, m, fmt.Sprintf("k%d", i), master.PutOptions{HardPin: true})
		}
		for _, s := range []*node{s1, s2} {
			waitFor(t, "the standby to learn the primary", func() bool {
				l := s.Leader()
				return l.Node == "m1" && l.Addr == "http://m1" && l.Term == 1
			})
		}
		// A primary that is alive is never replaced: several timeouts
		// pass and the term stays.
		time.Sleep(3 * et)
		if st := p.Status(); st.Role != RolePrimary || st.Term != 1 {
			t.Fatalf("a live primary was replaced: %+v", st)
		}
		p.stop(t)
		stopped := time.Now()
		np := primaryOf(t, "a standby to be elected", s1, s2)
		took := time.Since(stopped)
		other := s1
		if np == s1 {
			other = s2
		}
		if st := np.Status(); st.Term != 2 || st.Leader.Node != np.opts.Node {
			t.Fatalf("the elected master: %+v", st)
		}
		if got := primary(t, np).Stats().Objects; got != 10 {
			t.Fatalf("the elected master holds %d objects, want the 10 acknowledged", got)
		}
		waitFor(t, "the other standby to follow the winner", func() bool {
			l := other.Leader()
			return l.Term == 2 && l.Node == np.opts.Node
		})
		_, err := other.Serving()
		if l, ok := master.LeaderOf(err); !ok || l.Addr != "http://"+np.opts.Node || !errors.Is(err, master.ErrNotPrimary) {
			t.Fatalf("the loser's refusal does not redirect to the winner: %v", err)
		}
		t.Logf("%s elected at term 2 %v after the primary stopped (timeout %v)", np.opts.Node, took.Round(time.Millisecond), et)
		time.Sleep(3 * et)
		for _, n := range []*node{np, other} {
			if st := n.Status(); st.Term > 2 || st.Leader.Term != 2 {
				t.Fatalf("a second election while the winner lives: %s %+v", n.opts.Node, st)
			}
		}
		if got := testCounter(t, np.opts.Metrics.elections); got != 1 {
			t.Fatalf("the winner counts %v elections won", got)
		}
	})
}

// Two standbys whose waits end together (the same random share) both
// claim the same term: the fence key's create lets exactly one win, the
// other stays a standby and tails it, and no third term follows.
func TestTheClaimIsTheArbiter(t *testing.T) {
	store := mem.New()
	const et = 500 * time.Millisecond
	p := electing(t, store, false, "m1", et, 1)
	mountSeg(t, primary(t, p), 1)
	s1 := electing(t, store, true, "m2", et, 42)
	s2 := electing(t, store, true, "m3", et, 42)
	for _, s := range []*node{s1, s2} {
		waitFor(t, "the standby to learn the primary", func() bool { return s.Leader().Term == 1 })
	}
	p.stop(t)
	np := primaryOf(t, "one standby to win", s1, s2)
	time.Sleep(4 * et)
	np2 := primaryOf(t, "the winner to stay primary", s1, s2)
	if np2 != np || np.Status().Term != 2 {
		t.Fatalf("the election did not settle at term 2: %s then %s (term %d)", np.opts.Node, np2.opts.Node, np2.Status().Term)
	}
}

// A primary that cannot reach the store (as when paused, or partitioned)
// stops answering before a standby may claim the log; when it can again,
// its stuck append is fenced, and it steps down and follows the winner by
// itself. A change it was writing when cut off is not acknowledged.
func TestAPrimaryCutOffStopsAnsweringThenFollows(t *testing.T) {
	store := mem.New()
	view := faulty.New(store, 1)
	var cut atomic.Bool
	heal := make(chan struct{})
	view.SetHooks(faulty.Hooks{Before: func(ctx context.Context, _ faulty.Request) error {
		if cut.Load() {
			select {
			case <-heal:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	const et = 600 * time.Millisecond
	p := electing(t, view.Container, false, "m1", et, 1)
	m := primary(t, p)
	mountSeg(t, m, 1)
	putObj(t, m, "before", master.PutOptions{HardPin: true})
	s := electing(t, store, true, "m2", et, 2)
	waitFor(t, "the standby to learn the primary", func() bool { return s.Leader().Term == 1 })

	cut.Store(true)
	put := make(chan error, 1)
	go func() {
		ctx := context.Background()
		if _, err := m.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: "during", Size: 4096}); err != nil {
			put <- err
			return
		}
		put <- m.PutEnd(ctx, "c1", "t", "during")
	}()
	waitFor(t, "the standby to be elected", func() bool { _, err := s.Serving(); return err == nil })
	// By the time the standby may claim, the cut-off primary answers
	// nothing: its leadership lease ran out first.
	if _, err := p.Serving(); !errors.Is(err, master.ErrNotPrimary) {
		t.Fatalf("the cut-off primary still serves after a standby was elected: %v", err)
	}
	if err := p.Ready(); err == nil {
		t.Fatal("the cut-off primary reports ready")
	}
	close(heal)
	cut.Store(false)
	if err := <-put; err == nil {
		t.Fatal("a change written while the primary was cut off was acknowledged")
	}
	waitFor(t, "the old primary to step down and follow", func() bool {
		st := p.Status()
		return errors.Is(st.SteppedDown, master.ErrFenced) && st.Role == RoleStandby && st.Leader.Node == "m2" && st.Leader.Term == 2
	})
	if err := readable(primary(t, s), "before"); !errors.Is(err, master.ErrNoReadableReplica) {
		t.Fatalf("the acknowledged object is not in the elected master (awaiting remount): %v", err)
	}
}

// An append acknowledged by the store after the leadership lease ran out
// (the store held it that long) is not acknowledged to its caller: the
// outcome is unknown, the master steps down, and, with no other master,
// it is elected again and holds the change, which was durable.
func TestAnAppendPastTheLeaseIsNotAcknowledged(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	const et = 400 * time.Millisecond
	p := electing(t, store.Container, false, "m1", et, 1)
	m := primary(t, p)
	mountSeg(t, m, 1)
	slow := store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Prefix: p.Shard() + "/" + layout.FenceDir, Latency: faulty.Fixed(et)})
	ctx := context.Background()
	_, err := m.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: "slow", Size: 4096})
	if err == nil {
		err = m.PutEnd(ctx, "c1", "t", "slow")
	}
	if !errors.Is(err, master.ErrNotPrimary) {
		t.Fatalf("a change whose append outlived the lease: %v, want a lapsed leadership", err)
	}
	store.Remove(slow)
	waitFor(t, "the master to step down", func() bool { return errors.Is(p.Status().SteppedDown, master.ErrNotPrimary) })
	m2 := primary(t, p)
	if st := p.Status(); st.Term != 2 {
		t.Fatalf("re-elected at term %d, want 2", st.Term)
	}
	if m2.Stats().Segments != 1 {
		t.Fatalf("the re-elected master lost the mount: %+v", m2.Stats())
	}
}

// A master started as primary over a log that has a term does not claim
// it at once (a primary may be serving): it waits a timeout for a sign of
// life, then claims.
func TestAPrimaryRestartWaitsForTheElection(t *testing.T) {
	store := mem.New()
	const et = 500 * time.Millisecond
	p := electing(t, store, false, "m1", et, 1)
	mountSeg(t, primary(t, p), 1)
	p.stop(t)
	restarted := time.Now()
	p2 := electing(t, store, false, "m1", et, 1)
	if st := p2.Status(); st.Role == RolePrimary {
		t.Fatalf("the restarted master claimed at once: %+v", st)
	}
	m := primary(t, p2)
	if took := time.Since(restarted); took < et {
		t.Fatalf("claimed %v after the restart, before the %v timeout", took, et)
	}
	if st := p2.Status(); st.Term != 2 || m.Stats().Segments != 1 {
		t.Fatalf("after the restart: %+v, %d segments", st, m.Stats().Segments)
	}
}

// A new primary answers at once when the restore point holds nothing it
// had not read before it claimed; when the old term wrote generations it
// never saw (their md landed after its last read, their CAS before its
// sweep), one of them may have renewed the old primary's lease up to the
// sweep, and the new one stays quiet until that lease has run out.
func TestQuietAfterAClaimOverUnseenGenerations(t *testing.T) {
	store := mem.New()
	const et = time.Second
	p := electing(t, store, false, "m1", et, 1)
	m := primary(t, p)
	mountSeg(t, m, 1)
	putObj(t, m, "k", master.PutOptions{})
	gen := p.Status().Position.Gen
	p.stop(t)
	n := electing(t, store, true, "m2", et, 2)
	waitFor(t, "the standby to load", func() bool { return n.Status().Position.Gen == gen })
	sub, err := blobstore.Sub(store, n.Shard())
	if err != nil {
		t.Fatal(err)
	}
	sh, err := recovery.Open(context.Background(), sub, n.Shard(), 5, "test-claim", recovery.Options{Clock: clock.System()})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Writer.Close(context.Background())
	wait := int64(LeaseFor(et) + et/driftDivisor)
	longAgo := n.opts.Clock.Now() - 2*int64(et)
	if q := n.quietUntil(sh, gen, longAgo); q != 0 {
		t.Fatalf("quiet until %d after a claim over generations all seen a timeout ago", q)
	}
	if q := n.quietUntil(sh, gen-1, longAgo); q != sh.Chain.SweptAt()+wait {
		t.Fatalf("quiet until %d, want the sweep plus the lease and the margin, %d", q, sh.Chain.SweptAt()+wait)
	}
	// A promote by hand right after a sign of life: the lease it may have
	// renewed runs from then.
	justNow := n.opts.Clock.Now()
	if q := n.quietUntil(sh, gen, justNow); q != justNow+wait {
		t.Fatalf("quiet until %d after a sign of life just now, want %d", q, justNow+wait)
	}
	if q := n.quietUntil(sh, -1, justNow); q != 0 {
		t.Fatal("quiet after a claim that tailed nothing (a new log, or a restart without elections)")
	}
}
