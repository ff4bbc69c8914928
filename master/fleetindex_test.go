package master

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// scanAssignments is what a node's watch is told, from a scan of the whole
// table (what the index replaces).
func scanAssignments(f *fleet, name string) []string {
	var out []string
	for _, e := range f.shards {
		p := e.pub
		if p == nil || p.GetRemoved() {
			continue
		}
		switch name {
		case p.GetNode():
			out = append(out, fmt.Sprintf("%s/%d/%s/own", p.GetShard(), p.GetTerm(), p.GetAllocation()))
		case p.GetHandoffNode():
			out = append(out, fmt.Sprintf("%s/%d/%s/adopt", p.GetShard(), p.GetTerm(), p.GetHandoffAllocation()))
		}
	}
	sort.Strings(out)
	return out
}

// scanLoad counts what each node owns or receives, from a scan.
func scanLoad(f *fleet) map[string]int {
	load := map[string]int{}
	for _, e := range f.shards {
		if n := e.cur.GetNode(); n != "" && !e.cur.GetRemoved() {
			load[n]++
		}
		if n := e.cur.GetHandoffNode(); n != "" {
			load[n]++
		}
	}
	return load
}

// checkIndex compares the fleet's indexes with scans of its table.
func checkIndex(t *testing.T, what string, m *Master, nodes ...string) {
	t.Helper()
	f := m.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range nodes {
		var got []string
		for _, a := range f.assignmentsLocked(n) {
			if a.GetAdoptAllocation() != "" {
				got = append(got, fmt.Sprintf("%s/%d/%s/adopt", a.GetShard(), a.GetTerm(), a.GetAllocation()))
			} else {
				got = append(got, fmt.Sprintf("%s/%d/%s/own", a.GetShard(), a.GetTerm(), a.GetAllocation()))
			}
		}
		if want := scanAssignments(f, n); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: node %s is told %v, the table says %v", what, n, got, want)
		}
	}
	want := scanLoad(f)
	if fmt.Sprint(f.loadLocked()) != fmt.Sprint(want) {
		t.Fatalf("%s: load %v, the table says %v", what, f.loadLocked(), want)
	}
	names := append([]string(nil), f.sortedNamesLocked()...)
	if len(names) != len(f.nodes) || !sort.StringsAreSorted(names) {
		t.Fatalf("%s: names %v for %d nodes", what, names, len(f.nodes))
	}
}

// The per-node index of the published table and the load counts agree
// with a scan of the table after every kind of change: assigns, a drain's
// handoff, a takeover, an unassign, and a shard assigned again while its
// removal is still on its way to the log (TestFleetDurableThroughLogAndSnapshot
// checks a replayed log and a restored snapshot).
func TestFleetIndexMatchesTheTable(t *testing.T) {
	j := &holdJournal{}
	m, clk := newTestMaster(t, liveCfg(true), Options{Journal: j})
	nodes := []string{"a", "b", "c"}
	for _, n := range nodes {
		register(t, m, n)
	}
	for i := range 12 {
		assign(t, m, fmt.Sprint("s", i), "", true, false)
	}
	checkIndex(t, "assigned", m, nodes...)
	if _, _, err := m.DrainNode(context.Background(), "a", false); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, "draining a", m, nodes...)
	for _, si := range m.Shards() {
		if a := si.Assignment; a.GetHandoffNode() != "" {
			report(t, m, a.GetNode(), a, a.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, func(r *ShardReport) { r.HandoffContext = []byte("ctx") })
			report(t, m, a.GetHandoffNode(), a, a.GetHandoffAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
		}
	}
	checkIndex(t, "a drained", m, nodes...)
	if _, _, err := m.DrainNode(context.Background(), "a", true); err != nil {
		t.Fatal(err)
	}
	// Unassign s0 with the log held, and assign it again before the
	// removal is durable.
	j.hold(true)
	done := make(chan error, 2)
	go func() { done <- m.UnassignShard(context.Background(), "s0") }()
	waitRow := time.Now().Add(10 * time.Second)
	for {
		if _, err := m.ShardInfo("s0"); err != nil || row(t, m, "s0").GetRemoved() {
			break
		}
		if time.Now().After(waitRow) {
			t.Fatal("the unassign was never recorded")
		}
		time.Sleep(time.Millisecond)
	}
	go func() {
		_, err := m.AssignShard(context.Background(), AssignRequest{Shard: "s0", Node: "c", AutoRestore: true})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	checkIndex(t, "s0 unassigned and assigned again, neither durable", m, nodes...)
	j.hold(false)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	checkIndex(t, "s0 assigned again", m, nodes...)
	// b goes offline: its shards are taken over by a and c.
	keepAlive(t, m, clk, 40*time.Second, "a", "c")
	for range 1000 {
		if load := scanLoadOf(m, "b"); load == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkIndex(t, "b offline", m, nodes...)
	if n := scanLoadOf(m, "b"); n != 0 {
		t.Fatalf("b still owns %d shards", n)
	}
}

func scanLoadOf(m *Master, node string) int {
	m.fleet.mu.Lock()
	defer m.fleet.mu.Unlock()
	return scanLoad(m.fleet)[node]
}
