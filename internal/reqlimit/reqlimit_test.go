package reqlimit

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

// A Wait returns at once when its condition holds, after the Broadcast
// that follows the change that makes it hold, or with the context's error;
// it always returns with the mutex held.
func TestSignalWait(t *testing.T) {
	var mu sync.Mutex
	var sig Signal
	ready := false
	mu.Lock()
	if err := sig.Wait(t.Context(), &mu, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	mu.Unlock()

	done := make(chan error, 1)
	go func() {
		mu.Lock()
		err := sig.Wait(t.Context(), &mu, func() bool { return ready })
		if !ready {
			err = errors.New("woke before its condition held")
		}
		mu.Unlock()
		done <- err
	}()
	waiting(t, &mu, &sig, done)
	mu.Lock()
	sig.Broadcast() // nothing changed: the waiter looks again and waits on
	mu.Unlock()
	waiting(t, &mu, &sig, done)
	mu.Lock()
	ready = true
	sig.Broadcast()
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	mu.Lock()
	err := sig.Wait(ctx, &mu, func() bool { return false })
	if mu.TryLock() {
		t.Fatal("Wait returned without the mutex held")
	}
	mu.Unlock()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an ended context: %v", err)
	}
}

// An Acquire the gate cannot hold waits for a Release, or ends with its
// context.
func TestGateAcquireWaitsForRelease(t *testing.T) {
	full := func() *Gate {
		g := NewGate(10)
		if err := g.Acquire(t.Context(), 10); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := full()
	if g.TryAcquire(1) {
		t.Fatal("TryAcquire took a byte of a full gate")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := g.Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on a full gate with an ended context: %v", err)
	}
	g = full()
	done := make(chan error, 1)
	go func() { done <- g.Acquire(t.Context(), 6) }()
	waiting(t, &g.mu, &g.freed, done)
	g.Release(5) // not enough yet
	waiting(t, &g.mu, &g.freed, done)
	g.Release(5)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !g.TryAcquire(4) || g.TryAcquire(1) {
		t.Fatal("the gate does not hold 4 bytes after 6 of 10 were taken")
	}
}

// waiting returns once a Wait on sig is waiting (it made the channel a
// Broadcast closes); the waiter must not return before.
func waiting(t *testing.T, mu *sync.Mutex, sig *Signal, done <-chan error) {
	t.Helper()
	for {
		mu.Lock()
		w := sig.ch != nil
		mu.Unlock()
		if w {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the waiter returned early: %v", err)
		default:
		}
		runtime.Gosched()
	}
}
