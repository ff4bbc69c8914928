package sidecar

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/translog"
)

// watchAPI follows Watch over the API and hands out its events.
func watchAPI(t *testing.T, c sidecarv1connect.SidecarServiceClient, shards ...string) <-chan *sidecarv1.WatchResponse {
	t.Helper()
	st, err := c.Watch(t.Context(), connect.NewRequest(&sidecarv1.WatchRequest{Shards: shards}))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *sidecarv1.WatchResponse, 1024)
	go func() {
		defer st.Close()
		for st.Receive() {
			out <- st.Msg()
		}
	}()
	return out
}

// next waits for an event of kind on shard.
func next(t *testing.T, ch <-chan *sidecarv1.WatchResponse, kind sidecarv1.WatchEventKind, seen *[]*sidecarv1.WatchResponse) *sidecarv1.WatchResponse {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-ch:
			if seen != nil {
				*seen = append(*seen, ev)
			}
			if ev.GetKind() == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event", kind)
		}
	}
}

// The primary next to a sidecar learns what it owns from Watch: a shard
// gained with its restore stream, fenced when a higher term takes it, lost
// when closed; a watch that starts later gets the shards open now.
func TestWatchTellsGainedFencedLost(t *testing.T) {
	store := mem.New()
	start := func(name string) (*Server, sidecarv1connect.SidecarServiceClient) {
		srv, err := New(t.Context(), store, Options{Node: name})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler(HandlerOptions{}))
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()); hs.Close() })
		return srv, sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, hs.URL)
	}
	a, ca := start("a")
	b, cb := start("b")
	wa, wb := watchAPI(t, ca), watchAPI(t, cb, "s1")
	ctx := t.Context()
	if _, err := a.Open(ctx, "s1", 1, "a1", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	next(t, wa, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_OPENING, nil)
	if g := next(t, wa, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED, nil); g.GetTerm() != 1 || g.GetCurrent() {
		t.Fatalf("gained %v", g)
	}
	for _, op := range []string{"x", "y", "z"} {
		if _, err := a.Append(ctx, "s1", [][]byte{[]byte(op)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	// b takes the shard at term 2: its watcher gets the restore stream.
	if _, err := b.Open(ctx, "s1", 2, "b1", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	var seen []*sidecarv1.WatchResponse
	g := next(t, wb, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED, &seen)
	replayed := 0
	for _, ev := range seen {
		replayed += len(ev.GetOps().GetOps())
	}
	if g.GetTerm() != 2 || replayed != 3 || g.GetRestorePoint().GetNextSeqNo() != 3 {
		t.Fatalf("b gained %v after replaying %d ops", g, replayed)
	}
	// a learns it was fenced (its next append finds out; the watch says so).
	if _, err := a.Append(ctx, "s1", [][]byte{[]byte("late")}, 0); Reason(err) != "fenced" {
		t.Fatalf("append on a: %v", err)
	}
	if f := next(t, wa, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_FENCED, nil); f.GetSuccessorTerm() != 2 {
		t.Fatalf("fenced %v", f)
	}
	// A watch that starts now sees b's shard as current.
	if g := next(t, watchAPI(t, cb), sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED, nil); !g.GetCurrent() || g.GetTerm() != 2 {
		t.Fatalf("current %v", g)
	}
	if _, err := b.Close(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if l := next(t, wb, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_LOST, nil); l.GetReason() != LostClosed {
		t.Fatalf("lost %v", l)
	}
}

// stalledWatch runs Watch with a consumer that takes events one at a
// time, as the test hands them out: each call of fn waits for a token on
// take. Watch's error arrives on done.
type stalledWatch struct {
	got  chan WatchEvent
	take chan struct{}
	done chan error
}

func startStalledWatch(t *testing.T, s *Server) *stalledWatch {
	t.Helper()
	w := &stalledWatch{got: make(chan WatchEvent, 1), take: make(chan struct{}), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		w.done <- s.Watch(ctx, nil, func(ev WatchEvent) error {
			w.got <- ev
			select {
			case <-w.take:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	return w
}

// A watcher whose consumer stalls is cut off once the events it has not
// taken pass watchBuffer, counting the events queued for it and the one
// being sent (a stalled send). It used to take its whole queue at once
// and count only what came after: a consumer stalled on the first of 48
// MiB of events and given 56 MiB more held 104 MiB in the sidecar, was
// never cut off and got every event on resuming. Now the queue is dropped
// while the consumer stalls, and on resuming it gets the error,
// classified (resource_exhausted, watch_behind).
func TestStalledWatcherIsCutOffWithBoundedMemory(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	w := startStalledWatch(t, e.srv)
	if ev := <-w.got; ev.Kind != WatchSynced {
		t.Fatalf("first event %v", ev.Kind)
	}
	w.take <- struct{}{}
	op := make([]byte, 8<<20) // shared by every event: the test's own memory stays small
	publish := func(n int) {
		for range n {
			e.srv.watch.publish(WatchEvent{Kind: WatchOps, Shard: "s", Ops: &translog.Batch{Ops: [][]byte{op}}})
		}
	}
	got := func() {
		t.Helper()
		select {
		case <-w.got:
		case err := <-w.done:
			t.Fatalf("the watch ended early: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no event")
		}
	}
	publish(1)
	got() // the consumer holds event 1
	publish(6)
	w.take <- struct{}{} // takes event 1; stalls on event 2
	got()
	publish(7) // 48 MiB queued and in flight before these, 104 MiB after
	w.take <- struct{}{}
	after := 0
	for {
		select {
		case ev := <-w.got:
			after++
			if after > 1 {
				t.Fatalf("the stalled watcher got %d more events on resuming: it was not cut off", after)
			}
			_ = ev
			w.take <- struct{}{}
		case err := <-w.done:
			if !errors.Is(err, ErrWatchBehind) {
				t.Fatalf("watch ended with %v, want ErrWatchBehind", err)
			}
			ce := connectError("", err)
			code, d := detailOf(t, ce)
			if code != connect.CodeResourceExhausted || d.GetReason() != "watch_behind" {
				t.Fatalf("the cut-off as an API error: code %v reason %q: %v", code, d.GetReason(), ce)
			}
			return
		case <-time.After(30 * time.Second):
			t.Fatal("the watch was not cut off")
		}
	}
}

// Over the API, a client that stops reading its watch is cut off with
// resource_exhausted and the reason watch_behind, and the sidecar holds
// no more than the watch buffer for it whatever it publishes meanwhile.
func TestStalledWatchClientGetsResourceExhausted(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := e.client.Watch(ctx, connect.NewRequest(&sidecarv1.WatchRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetKind() != sidecarv1.WatchEventKind_WATCH_EVENT_KIND_SYNCED {
		t.Fatalf("first event: %v %v", st.Msg(), st.Err())
	}
	op := make([]byte, 256<<10)
	for range 800 { // 200 MiB while the client reads nothing
		e.srv.watch.publish(WatchEvent{Kind: WatchOps, Shard: "s", Ops: &translog.Batch{Ops: [][]byte{op}}})
		e.srv.watch.mu.Lock()
		for sub := range e.srv.watch.subs {
			sub.mu.Lock()
			if sub.pending > watchBuffer+eventBytes(WatchEvent{Ops: &translog.Batch{Ops: [][]byte{op}}}) {
				t.Errorf("a watcher holds %d bytes of events", sub.pending)
			}
			sub.mu.Unlock()
		}
		e.srv.watch.mu.Unlock()
	}
	n := 0
	for st.Receive() {
		n++
	}
	code, d := detailOf(t, st.Err())
	if code != connect.CodeResourceExhausted || d.GetReason() != "watch_behind" {
		t.Fatalf("after %d events: code %v reason %q: %v", n, code, d.GetReason(), st.Err())
	}
	if n >= 800 {
		t.Fatalf("the stalled client got all %d events", n)
	}
}
