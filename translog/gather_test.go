package translog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/clock"
)

// appendOrError is mustAppend for goroutines other than the test's own.
func (r *rig) appendOrError(op string) Ack {
	a, err := r.append(op)
	if err != nil {
		r.t.Errorf("append %q: %v", op, err)
	}
	return a
}

func (w *Writer) pendingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.p.queue)
}

// The committer waits, on the injected clock and at most MaxGatherDelay, for
// a batch as large as the previous one, and no longer.
func TestGatherWaitsBoundedOnTheClock(t *testing.T) {
	clk := clock.NewFake()
	r := newRig(t, 1, Options{Clock: clk, MaxGatherDelay: 2 * time.Millisecond, AckOrder: Sequenced})
	// Every md create takes 16ms of fake time; the first one also waits
	// until four more appends queue behind it, so the second sync carries
	// four appends (the sequenced order keeps the committer inside the
	// first sync meanwhile).
	first := true
	r.store.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCreateIfAbsent {
			if first {
				first = false
				for deadline := time.Now().Add(10 * time.Second); r.w.pendingCount() < 4; {
					if time.Now().After(deadline) {
						return errors.New("the four appends never queued")
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			clk.Advance(16 * time.Millisecond)
		}
		return nil
	}})
	var wg sync.WaitGroup
	wg.Go(func() { r.appendOrError("lead") })
	// The lead is cut into its own sync (queued, then taken off the
	// queue) before the others arrive; on a loaded machine the committer
	// could otherwise take some of them into the first batch.
	waitFor(t, func() bool { return r.w.inflightBytes() > 0 && r.w.pendingCount() == 0 })
	for range 4 {
		wg.Go(func() { r.appendOrError("batched") })
	}
	wg.Wait()
	if s := r.w.Stats(); s.Syncs != 2 {
		t.Fatalf("%d syncs, want 2", s.Syncs)
	}

	// One append alone: the committer waits for three more, on the clock.
	done := make(chan Ack, 1)
	go func() { done <- r.appendOrError("alone") }()
	waitFor(t, func() bool { return clk.Waiters() == 1 })
	select {
	case a := <-done:
		t.Fatalf("acked in gen %d before the gather delay ran out", a.Gen)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(2 * time.Millisecond)
	if a := <-done; a.Gen != 3 {
		t.Fatalf("gen %d, want 3", a.Gen)
	}

	// A batch as large as the last arrives: no wait at all.
	r.store.SetHooks(faulty.Hooks{})
	before := clk.Now()
	r.mustAppend("next")
	if clk.Now() != before || clk.Waiters() != 0 {
		t.Fatal("a batch the size of the previous one must not wait")
	}
}

func TestGatherDelayCanBeDisabled(t *testing.T) {
	clk := clock.NewFake()
	r := newRig(t, 1, Options{Clock: clk, MaxGatherDelay: -1})
	r.store.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCreateIfAbsent {
			clk.Advance(16 * time.Millisecond)
		}
		return nil
	}})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { r.appendOrError("x") })
	}
	wg.Wait()
	r.mustAppend("alone") // would block on the fake clock if it gathered
}
