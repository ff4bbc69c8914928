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
