package ha

import (
	"context"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/master"
)

// The shard assignment table goes through the fenced log: a restarted
// master (from the log, then from a snapshot plus the log) and a promoted
// standby hold the same rows, and every node they know starts Active with
// a fresh window.
func TestShardAssignmentsSurviveTheMaster(t *testing.T) {
	runBackends(t, func(t *testing.T, store *blobstore.Container) {
		ctx := context.Background()
		n1 := start(t, store, false)
		m := primary(t, n1)
		for _, name := range []string{"a", "b"} {
			if _, err := m.RegisterNode(ctx, master.NodeRegistration{Name: name, Addr: "http://" + name, Store: "s", Fencing: true, Session: name}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.AssignShard(ctx, master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.AssignShard(ctx, master.AssignRequest{Shard: "s2", Node: "b", Term: 4}); err != nil {
			t.Fatal(err)
		}
		want := m.Shards()
		same := func(what string, m *master.Master) {
			t.Helper()
			got := m.Shards()
			if len(got) != len(want) {
				t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
			}
			for i := range got {
				if got[i].Assignment.String() != want[i].Assignment.String() || !got[i].Durable {
					t.Fatalf("%s: row %v (durable %v), want %v", what, got[i].Assignment, got[i].Durable, want[i].Assignment)
				}
			}
			for _, nd := range m.Nodes() {
				if nd.State != master.ClientActive {
					t.Fatalf("%s: node %s is %v, want active (a fresh window)", what, nd.Name, nd.State)
				}
			}
		}
		sb := start(t, store, true)
		n1.stop(t)
		n2 := start(t, store, false)
		same("restarted from the log", primary(t, n2))
		if _, err := n2.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		n2.stop(t)
		n3 := start(t, store, false)
		same("restarted from a snapshot", primary(t, n3))
		n3.stop(t)
		waitFor(t, "the standby to load", func() bool { return sb.Status().Bootstrapped })
		if _, err := sb.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		same("promoted standby", primary(t, sb))
	})
}
