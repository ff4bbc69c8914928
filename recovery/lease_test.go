package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// leaseOptions open lease-mode terms on a fake clock that only the test
// advances.
func leaseOptions(clock *clock.Fake, lease time.Duration, l *log) recovery.Options {
	o := options(l)
	o.Clock, o.LeaseMargin = clock, time.Second
	o.Writer.FencingMode, o.Writer.LeaseInterval = translog.Lease, lease
	o.Writer.MaxGatherDelay = -1
	return o
}

// openResult is an Open running in the background.
type openResult struct {
	sh  *recovery.Shard
	err error
}

func openBG(t *testing.T, store *blobstore.Container, term int64, alloc string, o recovery.Options) chan openResult {
	ch := make(chan openResult, 1)
	go func() {
		sh, err := recovery.Open(context.Background(), store, shard, term, alloc, o)
		if err == nil {
			t.Cleanup(func() { _ = sh.Writer.Close(context.Background()) })
		}
		ch <- openResult{sh, err}
	}()
	return ch
}

// waitOpen returns the Open's result, failing the test if it is still
// waiting after 30s of real time (the fake clock never moves by itself).
func waitOpen(t *testing.T, ch chan openResult, what string) *recovery.Shard {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.sh
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still waiting after 30s (a lease wait on the fake clock?)", what)
	}
	return nil
}

// mustWait checks that an Open blocks on the fake clock without sealing,
// then advances the clock past lease + margin and returns the shard.
func mustWait(t *testing.T, store *blobstore.Container, clock *clock.Fake, ch chan openResult, term int64, lease time.Duration) *recovery.Shard {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for clock.Waiters() == 0 {
		select {
		case r := <-ch:
			t.Fatalf("term %d opened without waiting out the lease (err %v)", term, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("term %d never started its lease wait", term)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := store.Stat(context.Background(), layout.MarkerKey(term)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("term %d sealed before its lease wait ended (stat %v)", term, err)
	}
	clock.Advance(lease + time.Second)
	return waitOpen(t, ch, fmt.Sprintf("open of term %d after the wait", term))
}

// A new lease-mode shard has no predecessor that could hold a lease: no
// lower fence key to sweep and no lower seal marker. Its first open does
// not wait a lease.
func TestFirstOpenOfALeaseShardDoesNotWait(t *testing.T) {
	store := mem.New()
	clock := clock.NewFake()
	sh := waitOpen(t, openBG(t, store, 1, "a1", leaseOptions(clock, 5*time.Second, nil)), "first open of a lease shard")
	appendOps(t, sh.Writer, "x")
	if sh.Fencing.Mode != translog.Lease {
		t.Fatalf("runs %v", sh.Fencing)
	}
}

// A concurrent first claimant whose key the open sweeps is a predecessor:
// it may be about to open its writer, so the open waits the lease.
func TestLeaseOpenWaitsForASweptFirstClaimant(t *testing.T) {
	store := mem.New()
	clock := clock.NewFake()
	const lease = 5 * time.Second
	if _, err := seal.ShardFencing(context.Background(), store, shard, seal.Fencing{Mode: translog.Lease, LeaseInterval: lease}, seal.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Claim(context.Background(), store, shard, 1, "a1"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, store, clock, openBG(t, store, 2, "a2", leaseOptions(clock, lease, nil)), 2, lease)
}

// A lower term that opened a writer left a seal marker, even when its fence
// key is gone already (swept by a claimant that then withdrew): the open
// waits the lease although it swept nothing, and restores what the lower
// term acknowledged.
func TestLeaseOpenWaitsForALowerTermThatOpenedWithoutItsKey(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clock := clock.NewFake()
	const lease = 5 * time.Second
	sh1 := waitOpen(t, openBG(t, store, 1, "a1", leaseOptions(clock, lease, nil)), "term 1")
	appendOps(t, sh1.Writer, "acked by term 1")
	if err := store.Delete(ctx, layout.FenceKey(1)); err != nil {
		t.Fatal(err)
	}
	var l log
	sh3 := mustWait(t, store, clock, openBG(t, store, 3, "a3", leaseOptions(clock, lease, &l)), 3, lease)
	if len(sh3.Chain.Predecessors()) != 0 {
		t.Fatalf("term 3 swept %v, want nothing (the test removed term 1's key)", sh3.Chain.Predecessors())
	}
	if !l.set()["acked by term 1"] {
		t.Fatalf("term 3 restored %v", l.ops)
	}
}

type rewriteOut struct {
	res recovery.RewriteResult
	err error
}

// rewriteBG runs a fencing rewrite in the background.
func rewriteBG(store *blobstore.Container, term int64, to seal.Fencing, o recovery.RewriteOptions) chan rewriteOut {
	ch := make(chan rewriteOut, 1)
	go func() {
		res, err := recovery.RewriteFencing(context.Background(), store, shard, term, "admin", to, o)
		ch <- rewriteOut{res, err}
	}()
	return ch
}

// rewriteDone returns the rewrite's result, failing the test if it erred
// or still runs after 30s of real time (waiting on the fake clock).
func rewriteDone(t *testing.T, ch chan rewriteOut, what string) recovery.RewriteResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.res
	case <-time.After(30 * time.Second):
		t.Fatalf("%s waited", what)
	}
	return recovery.RewriteResult{}
}

// storeFencing writes a settings body by hand, as a build without the
// lease range could have stored it.
func storeFencing(t *testing.T, store *blobstore.Container, lease time.Duration) {
	t.Helper()
	s := fmt.Sprintf("shardfence.fencing|v1|%s|enabled|lease|%d", shard, lease.Milliseconds())
	body := fmt.Sprintf("%s|%08x", s, translog.Checksum([]byte(s)))
	if _, err := store.CreateIfAbsent(context.Background(), layout.FencingKey, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

// The bricked shard of an unbounded lease: its first open stored 87600h
// and never completed. Opens are refused, naming the way out, before they
// claim; the rewrite finds that no term ever opened, installs a sane lease
// without waiting, and the shard opens.
func TestRewriteRescuesAShardWhoseFirstOpenStoredAnAbsurdLease(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clock := clock.NewFake()
	storeFencing(t, store, 87600*time.Hour)
	if _, err := fence.Claim(ctx, store, shard, 1, "a1"); err != nil { // the open that never returned
		t.Fatal(err)
	}
	_, err := recovery.Open(ctx, store, shard, 2, "a2", leaseOptions(clock, time.Second, nil))
	if !errors.Is(err, seal.ErrFencingOutOfRange) || !strings.Contains(err.Error(), "shardfence settings") {
		t.Fatalf("open of the bricked shard: %v, want ErrFencingOutOfRange naming the rewrite", err)
	}
	if _, err := store.Stat(ctx, layout.FenceKey(2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the refused open claimed term 2 (stat %v)", err)
	}
	to := seal.Fencing{Mode: translog.Lease, LeaseInterval: 2 * time.Second}
	res := rewriteDone(t, rewriteBG(store, 2, to, recovery.RewriteOptions{Clock: clock}), "the rewrite of a shard no term ever opened")
	if res.Waited != 0 || res.From.LeaseInterval != 87600*time.Hour || res.To != to {
		t.Fatalf("rewrite result %+v", res)
	}
	// Term 3 sweeps the rewrite's key, so it waits, but the new lease.
	sh := mustWait(t, store, clock, openBG(t, store, 3, "a3", leaseOptions(clock, time.Second, nil)), 3, to.LeaseInterval)
	if sh.Fencing != to {
		t.Fatalf("term 3 runs %v, want %v", sh.Fencing, to)
	}
	appendOps(t, sh.Writer, "x")
}

// Shortening the lease of a shard whose term 1 runs (and keeps acking
// inside its lease) waits out term 1's lease from the rewrite's sweep.
// While the rewrite runs, no term opens. Afterwards term 1 acknowledges
// nothing more, and the next term restores everything term 1 acked.
func TestRewriteShorteningTheLeaseWaitsOutTheRunningLease(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clock := clock.NewFake()
	const lease = 5 * time.Second
	sh1 := waitOpen(t, openBG(t, store, 1, "a1", leaseOptions(clock, lease, nil)), "term 1")
	acked := []string{"t1-0"}
	appendOps(t, sh1.Writer, acked[0])

	to := seal.Fencing{Mode: translog.PerSync}
	done := rewriteBG(store, 2, to, recovery.RewriteOptions{Clock: clock})
	deadline := time.Now().Add(30 * time.Second)
	for clock.Waiters() == 0 {
		select {
		case r := <-done:
			t.Fatalf("the rewrite finished without waiting out term 1's lease: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the rewrite never started its wait")
		}
		time.Sleep(time.Millisecond)
	}
	// Term 1's key is gone, but its lease still runs: it may ack.
	if _, err := store.Stat(ctx, layout.FenceKey(1)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("term 1's key survived the rewrite's claim: %v", err)
	}
	if _, err := sh1.Writer.Append(ctx, [][]byte{[]byte("t1-1")}); err == nil {
		acked = append(acked, "t1-1")
	}
	if _, err := recovery.Open(ctx, store, shard, 3, "a3", options(nil)); !errors.Is(err, seal.ErrFencingRewrite) {
		t.Fatalf("open during the rewrite: %v, want ErrFencingRewrite", err)
	}
	clock.Advance(lease + time.Second)
	rewriteDone(t, done, "the rewrite after the lease")
	if _, err := sh1.Writer.Append(ctx, [][]byte{[]byte("t1-2")}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("term 1 after the rewrite: %v, want fenced", err)
	}
	var l log
	sh4 := waitOpen(t, openBG(t, store, 4, "a4", options(&l)), "term 4")
	if sh4.Fencing != to {
		t.Fatalf("term 4 runs %v, want %v", sh4.Fencing, to)
	}
	for _, op := range acked {
		if !l.set()[op] {
			t.Fatalf("term 4 lost %q acknowledged by term 1 (restored %v)", op, l.ops)
		}
	}
}

// Lengthening the lease, or going from per-sync to lease, never waits; a
// shortening that would wait longer than allowed is rolled back and the
// shard opens again with what it ran.
func TestRewriteThatCannotWeakenDoesNotWaitAndAnUnsafeOneRollsBack(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clock := clock.NewFake()
	sh1 := waitOpen(t, openBG(t, store, 1, "a1", leaseOptions(clock, time.Second, nil)), "term 1")
	appendOps(t, sh1.Writer, "x")
	longer := seal.Fencing{Mode: translog.Lease, LeaseInterval: 4 * time.Second}
	rewriteDone(t, rewriteBG(store, 2, longer, recovery.RewriteOptions{Clock: clock}), "a lengthening rewrite")
	_, err := recovery.RewriteFencing(ctx, store, shard, 3, "admin", seal.Fencing{Mode: translog.PerSync}, recovery.RewriteOptions{Clock: clock, MaxWait: time.Second})
	if !errors.Is(err, recovery.ErrRewriteUnsafe) {
		t.Fatalf("a shortening that must wait 5s with at most 1s allowed: %v, want ErrRewriteUnsafe", err)
	}
	f, rw, _, err := seal.ReadFencing(ctx, store, shard, seal.Options{})
	if err != nil || rw != nil || f != longer {
		t.Fatalf("after the rollback the shard stores %v (rewrite %v, %v), want %v", f, rw, err, longer)
	}
	// Unfenced waits no lease either: from lease mode it weakens too.
	if _, err := recovery.RewriteFencing(ctx, store, shard, 4, "admin", seal.Fencing{Disabled: true}, recovery.RewriteOptions{Clock: clock, MaxWait: time.Second}); !errors.Is(err, recovery.ErrRewriteUnsafe) {
		t.Fatalf("rewrite of a lease shard to unfenced with at most 1s allowed: %v, want ErrRewriteUnsafe", err)
	}
	sh5 := mustWait(t, store, clock, openBG(t, store, 5, "a5", leaseOptions(clock, time.Second, nil)), 5, 4*time.Second)
	if sh5.Fencing != longer {
		t.Fatalf("term 5 runs %v, want %v", sh5.Fencing, longer)
	}
}
