package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// An unfenced shard opens through recovery (the writer takes its identity
// from the claim) and a later unfenced term replays what it wrote.
func TestUnfencedShardOpensAppendsAndReplays(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	o := options(nil)
	o.Writer.FencingDisabled = true
	sh1 := open(t, store, 1, "a1", o)
	ack := appendOps(t, sh1.Writer, "x", "y")
	closeW(t, sh1.Writer)
	var got []string
	err := translog.NewReader(store, shard).Iterate(ctx, 1, ack.Gen, ack.Gen, func(b translog.Batch) error {
		for _, op := range b.Ops {
			got = append(got, string(op))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Fatalf("read back %q, want [x y]", got)
	}

	var l log
	o2 := options(&l)
	o2.Writer.FencingDisabled = true
	sh2 := open(t, store, 2, "a2", o2)
	appendOps(t, sh2.Writer, "z")
	if r := l.set(); !r["x"] || !r["y"] || len(r) != 2 {
		t.Errorf("term 2 replayed %v, want x and y", l.ops)
	}
}

// The fencing mode is the shard's: a lease-mode term 1 keeps acknowledging
// without a CAS inside its lease while a term 2 that asks for per-sync
// opens. Term 2 runs the stored lease mode, waits out the stored lease
// before it resolves the lineage, and restores every op term 1 acked.
func TestSuccessorAskingPerSyncWaitsOutALeaseModeShard(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clock := clock.NewFake()
	const lease, margin = 5 * time.Second, time.Second
	o1 := options(nil)
	o1.Clock, o1.LeaseMargin = clock, margin
	o1.Writer.FencingMode, o1.Writer.LeaseInterval = translog.Lease, lease
	o1.Writer.MaxGatherDelay = -1 // no timer of the writer's on the fake clock
	openAsync := func(term int64, alloc string, o recovery.Options) chan *recovery.Shard {
		ch := make(chan *recovery.Shard, 1)
		go func() {
			sh, err := recovery.Open(ctx, store, shard, term, alloc, o)
			if err != nil {
				t.Errorf("open term %d: %v", term, err)
				ch <- nil
				return
			}
			t.Cleanup(func() { _ = sh.Writer.Close(context.Background()) })
			ch <- sh
		}()
		return ch
	}
	advancePast := func(d time.Duration) {
		for clock.Waiters() == 0 {
			time.Sleep(time.Millisecond)
		}
		clock.Advance(d)
	}
	// A new shard has no predecessor to wait for
	// (TestFirstOpenOfALeaseShardDoesNotWait).
	sh1 := <-openAsync(1, "a1", o1)
	if sh1 == nil {
		t.FailNow()
	}

	// The first sync CASes and starts the lease.
	appendOps(t, sh1.Writer, "t1-first")
	var mu sync.Mutex
	acked := []string{"t1-first"}
	afterSweep := 0
	swept := func() bool {
		_, err := store.Stat(ctx, layout.FenceKey(1))
		return errors.Is(err, blobstore.ErrNotFound)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			gone := swept()
			op := fmt.Sprintf("t1-%d", i)
			if _, err := sh1.Writer.Append(ctx, [][]byte{[]byte(op)}); err != nil {
				if !errors.Is(err, fence.ErrFenced) {
					t.Errorf("term 1 append: %v", err)
				}
				return
			}
			mu.Lock()
			acked = append(acked, op)
			if gone {
				afterSweep++
			}
			mu.Unlock()
		}
	}()

	var l log
	o2 := options(&l)
	o2.Clock, o2.LeaseMargin = clock, margin // asks for per-sync (the default)
	ch2 := openAsync(2, "a2", o2)
	// Term 1 acks without a CAS after term 2 deleted its fence key: that
	// is what lease mode allows, and why term 2 must wait.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := afterSweep
		mu.Unlock()
		if n >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := store.Stat(ctx, layout.MarkerKey(2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("term 2 sealed (stat %v) while term 1's lease still ran", err)
	}
	mu.Lock()
	n := afterSweep
	mu.Unlock()
	if n < 5 {
		t.Fatalf("term 1 acked %d ops after term 2's sweep, want it still inside its lease", n)
	}
	advancePast(lease + margin)
	sh2 := <-ch2
	close(stop)
	<-done
	if sh2 == nil {
		t.FailNow()
	}
	if sh2.Fencing.Mode != translog.Lease || sh2.Fencing.LeaseInterval != lease {
		t.Errorf("term 2 runs fencing %v, want the shard's lease (%v)", sh2.Fencing, lease)
	}
	restored := l.set()
	mu.Lock()
	defer mu.Unlock()
	for _, op := range acked {
		if !restored[op] {
			t.Fatalf("acknowledged op %q of term 1 is not in term 2's restore point (%d acked, %d restored)", op, len(acked), len(restored))
		}
	}
}

// A shard never switches between fenced and unfenced: the Open asking for
// the other is refused naming the stored setting, before it claims.
func TestFencingOnAnUnfencedShardIsRefusedBeforeTheClaim(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	o := options(nil)
	o.Writer.FencingDisabled = true
	sh1 := open(t, store, 1, "a1", o)
	appendOps(t, sh1.Writer, "x")
	_, err := recovery.Open(ctx, store, shard, 2, "a2", options(nil))
	if !errors.Is(err, seal.ErrFencingMismatch) {
		t.Fatalf("fenced open of an unfenced shard: %v, want seal.ErrFencingMismatch", err)
	}
	if msg := err.Error(); !strings.Contains(msg, shard) || !strings.Contains(msg, "fencing disabled") {
		t.Errorf("error %q does not name the shard and its stored setting", msg)
	}
	if _, err := store.Stat(ctx, layout.FenceKey(2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("the refused open claimed term 2 (stat %v)", err)
	}
	appendOps(t, sh1.Writer, "y")
}
