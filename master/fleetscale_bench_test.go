package master

import (
	"context"
	"fmt"
	"testing"
)

// A fleet of 1,000 nodes and 10,000 shards in the table, the master's
// work per operation on it, without the log's latency (a journal that
// acknowledges at once): an AssignShard (with its unassign, so the table
// stays the same size), what a node's watch sends when woken, and one
// monitor pass's placement of pending shards (nothing pending).
func BenchmarkFleetScale(b *testing.B) {
	m, _ := newTestMaster(b, liveCfg(true), Options{Journal: &holdJournal{}})
	ctx := context.Background()
	for i := range 1000 {
		name := fmt.Sprintf("n%04d", i)
		if _, err := m.RegisterNode(ctx, NodeRegistration{Name: name, Addr: "http://" + name, Store: "s3://b/p", Fencing: true, Session: name}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 10000 {
		if _, err := m.AssignShard(ctx, AssignRequest{Shard: fmt.Sprintf("s%05d", i), AutoRestore: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("assign", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			shard := fmt.Sprintf("x%d", i)
			if _, err := m.AssignShard(ctx, AssignRequest{Shard: shard, AutoRestore: true}); err != nil {
				b.Fatal(err)
			}
			if err := m.UnassignShard(ctx, shard); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("watch", func(b *testing.B) {
		for b.Loop() {
			m.fleet.mu.Lock()
			l := m.fleet.assignmentsLocked("n0500")
			m.fleet.mu.Unlock()
			if len(l) != 10 {
				b.Fatalf("%d assignments", len(l))
			}
		}
	})
	b.Run("monitor-pass", func(b *testing.B) {
		for b.Loop() {
			m.fleet.placePending(ctx)
		}
	})
}
