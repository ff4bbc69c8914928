package translog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

func TestLeaseModeCASesOncePerLeaseAndAcksOnlyInsideIt(t *testing.T) {
	clk := clock.NewFake()
	r := newRig(t, 1, Options{FencingMode: Lease, LeaseInterval: 10 * time.Second, Clock: clk})
	cas := func() int64 { return r.store.Requests(blobstore.OpCompareAndSwap) }
	step := func(what string, advance time.Duration, wantCAS int64) {
		t.Helper()
		clk.Advance(advance)
		r.mustAppend(what)
		if got := cas(); got != wantCAS {
			t.Fatalf("%s: %d CAS requests, want %d", what, got, wantCAS)
		}
	}
	step("first sync: no lease yet", 0, 1)        // lease from t=0
	step("t=1s: inside", time.Second, 1)          // acked on the lease
	step("t=9s: inside", 8*time.Second, 1)        // acked on the lease
	step("t=10s: run out, renew", time.Second, 2) // lease from t=10s
	step("t=15s: inside", 5*time.Second, 2)       // at most one CAS per interval
	if s := r.w.Stats(); s.LeaseSkips != 3 || s.Syncs != 5 {
		t.Fatalf("stats %+v", s)
	}

	// At t=19.9s the lease still covers, but the md create takes 6s: the
	// lease (until t=20s) has run out when the md lands, so the ack waits
	// for a CAS.
	clk.Advance(4900 * time.Millisecond)
	r.store.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCreateIfAbsent {
			clk.Advance(6 * time.Second)
		}
		return nil
	}})
	r.mustAppend("slow md")
	r.store.SetHooks(faulty.Hooks{})
	if got := cas(); got != 3 {
		t.Fatalf("slow md: %d CAS requests, want 3", got)
	} // lease from t=25.9s

	// A successor claims. Inside our lease we still ack without a CAS:
	// that is lease mode's window, which the successor covers by waiting
	// lease+margin after its sweep before it reads the lineage.
	succ, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	step("t=26s: successor claimed, still inside the lease", 100*time.Millisecond, 3)
	if clk.Now() >= succ.SweptAt()+int64(10*time.Second) {
		t.Fatal("test bug: the ack above must fall inside the successor's wait")
	}
	// Once the lease runs out the writer renews, and the renewal is
	// fenced.
	clk.Advance(10 * time.Second)
	_, err = r.append("t=36s")
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the lease: %v", err)
	}
	if s, _ := fence.SuccessorTerm(err); s != 2 {
		t.Fatalf("successor %d (%v)", s, err)
	}
}

func TestPerSyncModeFencesOnTheFirstSyncAfterTheClaim(t *testing.T) {
	clk := clock.NewFake()
	r := newRig(t, 1, Options{Clock: clk})
	for range 3 {
		clk.Advance(time.Second)
		r.mustAppend("x")
	}
	if got := r.store.Requests(blobstore.OpCompareAndSwap); got != 3 {
		t.Fatalf("%d CAS requests for 3 syncs", got)
	}
	if _, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond)
	if _, err := r.append("y"); !errors.Is(err, ErrFenced) {
		t.Fatalf("append right after the claim: %v", err)
	}
}

// The successor's lease wait covers every ack the deposed lease-mode writer
// makes without a CAS: such acks happen before the claim returns (so the
// lineage read after it sees their md), and none after.
func TestSuccessorLeaseWaitOutlastsZombieAcks(t *testing.T) {
	clk := clock.NewFake()
	lease := 10 * time.Second
	r := newRig(t, 1, Options{FencingMode: Lease, LeaseInterval: lease, Clock: clk})
	r.mustAppend("with CAS") // lease from t=0
	done := make(chan error, 1)
	go func() {
		c, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clk))
		if err == nil {
			err = c.WaitOutLease(context.Background(), lease+time.Second)
		}
		done <- err
	}()
	waitFor(t, func() bool { return clk.Waiters() == 1 }) // the successor is waiting
	clk.Advance(9 * time.Second)
	a := r.mustAppend("inside the lease, after the sweep") // acked without a CAS
	select {
	case err := <-done:
		t.Fatalf("the successor's claim returned inside the zombie's lease: %v", err)
	default:
	}
	clk.Advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := r.inner.Stat(context.Background(), layout.MDKey(1, a.Gen)); err != nil {
		t.Fatalf("the zombie's lease-covered ack has no md when the claim returns: %v", err)
	}
	if _, err := r.append("after the wait"); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie append after the successor's wait: %v", err)
	}
}
