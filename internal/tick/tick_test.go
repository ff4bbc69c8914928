package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryRunsOnTicksAndKicks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kick := make(chan struct{}, 1)
	steps := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// An hour between ticks: every step this test sees is a kick's.
		Every(ctx, time.Hour, kick, func() { steps <- struct{}{} })
	}()
	for i := 0; i < 3; i++ {
		Kick(kick)
		select {
		case <-steps:
		case <-time.After(10 * time.Second):
			t.Fatalf("kick %d ran no step", i)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return when its context ended")
	}
}

func TestEveryTicksWithoutKicks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	// The step cancels the loop on its third run; Every must not run a
	// fourth, and must return.
	Every(ctx, time.Millisecond, nil, func() {
		if n.Add(1) == 3 {
			cancel()
		}
	})
	if got := n.Load(); got != 3 {
		t.Fatalf("steps = %d, want 3 (the third cancelled the loop)", got)
	}
}

func TestKickNeverBlocks(t *testing.T) {
	ch := make(chan struct{}, 1)
	Kick(ch)
	Kick(ch) // the first is still pending: this one must not block
	if len(ch) != 1 {
		t.Fatalf("pending kicks = %d, want 1", len(ch))
	}
}
