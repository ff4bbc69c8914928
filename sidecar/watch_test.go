package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore/mem"
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
