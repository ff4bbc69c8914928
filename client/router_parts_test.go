package client

import (
	"context"
	"strings"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// A snapshot in parts: until its last part the router does not take a
// shard missing from the parts so far as absent from the table; after
// it, the table is the union of the parts, and a later snapshot replaces
// it.
func TestRouterSnapshotInParts(t *testing.T) {
	r := &Router{routes: map[string]Route{"stale": {Shard: "stale"}}, changed: make(chan struct{})}
	open := func(s string) *masterv1.ShardRoute {
		return &masterv1.ShardRoute{Shard: s, Term: 1, Node: "n", Addr: "http://n", State: "open"}
	}
	r.apply(&masterv1.WatchShardsResponse{Snapshot: true, More: true, Routes: []*masterv1.ShardRoute{open("a")}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := r.Route(ctx, "b")
	cancel()
	if err == nil || strings.Contains(err.Error(), "does not hold it") {
		t.Fatalf("a shard of a later part, before it came: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := r.Route(context.Background(), "b")
		got <- err
	}()
	r.apply(&masterv1.WatchShardsResponse{Routes: []*masterv1.ShardRoute{open("b")}})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if rs := r.Routes(); len(rs) != 2 || rs["stale"].Shard != "" {
		t.Fatalf("after the last part: %v", rs)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Route(ctx, "c"); err == nil || !strings.Contains(err.Error(), "does not hold it") {
		t.Fatalf("a shard in no part once the snapshot is whole: %v", err)
	}
}

// A call that failed on the owner the feed still names (a reset
// connection proves nothing about ownership) is tried on that owner again
// after a pause instead of waiting for a move that may never come; a new
// owner named meanwhile is taken at once.
func TestRouterTriesTheSameOwnerAgainAfterAPause(t *testing.T) {
	r := &Router{routes: map[string]Route{}, changed: make(chan struct{})}
	route := func(node string, term int64) *masterv1.ShardRoute {
		return &masterv1.ShardRoute{Shard: "a", Term: term, Node: node, Addr: "http://" + node, State: "open"}
	}
	r.apply(&masterv1.WatchShardsResponse{Snapshot: true, Routes: []*masterv1.ShardRoute{route("n1", 1)}})
	first, err := r.Route(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	var pace retryPace
	pace.failed(first)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	again, err := r.await(ctx, "a", &pace)
	if err != nil || !again.same(first) {
		t.Fatalf("the same owner, still named after the pause: %v, %v", again, err)
	}
	pace.failed(again)
	pace.failed(again)
	if pace.wait != 4*sameOwnerRetry.Initial {
		t.Fatalf("after three failures on one route the pause is %v, want %v", pace.wait, 4*sameOwnerRetry.Initial)
	}
	for range 10 {
		pace.failed(again)
	}
	if pace.wait != sameOwnerRetry.Max {
		t.Fatalf("the pause grew to %v, past %v", pace.wait, sameOwnerRetry.Max)
	}
	got := make(chan Route, 1)
	go func() {
		rt, _ := r.await(ctx, "a", &pace)
		got <- rt
	}()
	r.apply(&masterv1.WatchShardsResponse{Routes: []*masterv1.ShardRoute{route("n2", 2)}})
	if rt := <-got; rt.Node != "n2" || rt.Term != 2 {
		t.Fatalf("a new owner named during the pause: %v", rt)
	}
	pace.failed(Route{Shard: "a", Term: 2, Node: "n2", Addr: "http://n2"})
	if pace.wait != sameOwnerRetry.Initial {
		t.Fatalf("a failure on a new route starts at %v, not %v", pace.wait, sameOwnerRetry.Initial)
	}
}
