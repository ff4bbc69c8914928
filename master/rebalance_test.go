package master

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// The master's plan takes only open shards of active owners, counts a
// moving shard on its target, and places nothing on a draining node.
func TestMasterPlanRebalance(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{})
	for _, n := range []string{"a", "b", "c", "d"} {
		register(t, m, n)
	}
	open := func(shard, node string) {
		a := assign(t, m, shard, node, true, false).Assignment
		report(t, m, node, a, a.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	}
	for i := range 4 {
		open(fmt.Sprint("s", i), "a")
	}
	assign(t, m, "pending", "a", true, false) // not open: counts, never moves
	open("m", "b")
	if _, err := m.MoveShard(context.Background(), "m", "c"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.DrainNode(context.Background(), "d", false); err != nil {
		t.Fatal(err)
	}
	plan := m.PlanRebalance()
	want := []ShardMove{{Shard: "s0", From: "a", To: "b"}, {Shard: "s1", From: "a", To: "b"}, {Shard: "s2", From: "a", To: "c"}}
	if !reflect.DeepEqual(plan.Moves, want) {
		t.Fatalf("moves %v, want %v", plan.Moves, want)
	}
	if wantAfter := map[string]int{"a": 2, "b": 2, "c": 2}; !reflect.DeepEqual(plan.After, wantAfter) {
		t.Fatalf("after %v, want %v", plan.After, wantAfter)
	}
	// Every planned move is one MoveShard accepts.
	for _, mv := range plan.Moves {
		if _, err := m.MoveShard(context.Background(), mv.Shard, mv.To); err != nil {
			t.Fatal(err)
		}
	}
}
