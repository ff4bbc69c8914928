package sidecar

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
)

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// A later term opened on the same sidecar replaces the shard; the previous
// term's writer is closed in the background so its pending appends are
// answered. Shutdown waits for that close, and when its own deadline runs
// out while the close hangs on the store, it makes the close abandon its
// syncs: no goroutine outlives it and the pending append gets its answer.
func TestShutdownWaitsForTheClosesOfReplacedWriters(t *testing.T) {
	const closer = "sidecar.(*registry).closeReplaced"
	if n := goroutinesIn(closer); n != 0 {
		t.Fatalf("%d closes of replaced writers running before the test", n)
	}
	f := faulty.New(mem.New(), 1)
	srv, err := New(t.Context(), f.Container, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Append(t.Context(), "s", [][]byte{[]byte("x")}, 1); err != nil {
		t.Fatal(err)
	}
	// Hold term 1's next md create until the request's context ends: its
	// writer cannot finish that sync, so closing it hangs.
	var once sync.Once
	held := make(chan struct{})
	f.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if r.Op != blobstore.OpCreateIfAbsent || !strings.Contains(r.Key, layout.MDTermPrefix(1)) {
			return nil
		}
		hold := false
		once.Do(func() { hold = true })
		if !hold {
			return nil
		}
		close(held)
		<-ctx.Done()
		return ctx.Err()
	}})
	pending := make(chan error, 1)
	go func() {
		_, err := srv.Append(context.Background(), "s", [][]byte{[]byte("y")}, 1)
		pending <- err
	}()
	select {
	case <-held:
	case err := <-pending:
		t.Fatalf("the append ended before its md create was held: %v", err)
	}
	if _, err := srv.Open(t.Context(), "s", 2, "b", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = srv.Shutdown(ctx)
	// The close Shutdown cut short cancelled the writer's store calls: the
	// pending append is answered, not acknowledged.
	select {
	case err := <-pending:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("the append pending on the replaced writer: %v, want the writer's refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the append pending on the replaced writer is still unanswered after Shutdown")
	}
	// A goroutine past its WaitGroup Done may still be on its way out;
	// give it a moment, as goleak does.
	for deadline := time.Now().Add(2 * time.Second); goroutinesIn(closer) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := goroutinesIn(closer); n != 0 {
		t.Errorf("%d closes of replaced writers outlived Shutdown", n)
	}
}
