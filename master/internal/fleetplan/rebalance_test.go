package fleetplan

import (
	"fmt"
	"reflect"
	"testing"
)

func TestPlanRebalance(t *testing.T) {
	n := func(names ...string) []RebalanceNode {
		var out []RebalanceNode
		for _, name := range names {
			out = append(out, RebalanceNode{Name: name, Group: "s3"})
		}
		return out
	}
	// on puts count movable shards named prefix0.. on node.
	on := func(node, prefix string, count int) []RebalanceShard {
		var out []RebalanceShard
		for i := range count {
			out = append(out, RebalanceShard{Shard: fmt.Sprint(prefix, i), Node: node, Group: "s3", Movable: true})
		}
		return out
	}
	cat := func(ls ...[]RebalanceShard) []RebalanceShard {
		var out []RebalanceShard
		for _, l := range ls {
			out = append(out, l...)
		}
		return out
	}
	pinned := func(s []RebalanceShard) []RebalanceShard {
		for i := range s {
			s[i].Movable = false
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		nodes  []RebalanceNode
		shards []RebalanceShard
		moves  []ShardMove
		after  map[string]int
	}{
		{name: "empty", after: map[string]int{}},
		{name: "no shards", nodes: n("a", "b"), after: map[string]int{"a": 0, "b": 0}},
		{name: "balanced", nodes: n("a", "b"), shards: cat(on("a", "x", 2), on("b", "y", 2)), after: map[string]int{"a": 2, "b": 2}},
		{name: "off by one is balanced", nodes: n("a", "b", "c"), shards: cat(on("a", "x", 2), on("b", "y", 1), on("c", "z", 1)),
			after: map[string]int{"a": 2, "b": 1, "c": 1}},
		{name: "all on one node", nodes: n("a", "b", "c"), shards: on("a", "x", 6),
			moves: []ShardMove{{"x0", "a", "b"}, {"x1", "a", "c"}, {"x2", "a", "b"}, {"x3", "a", "c"}},
			after: map[string]int{"a": 2, "b": 2, "c": 2}},
		{name: "a pile after failures", nodes: n("a", "b", "c", "d"), shards: cat(on("a", "a", 1), on("b", "b", 5), on("c", "c", 1), on("d", "d", 1)),
			moves: []ShardMove{{"b0", "b", "a"}, {"b1", "b", "c"}, {"b2", "b", "d"}},
			after: map[string]int{"a": 2, "b": 2, "c": 2, "d": 2}},
		{name: "a new empty node", nodes: n("a", "b", "new"), shards: cat(on("a", "a", 3), on("b", "b", 3)),
			moves: []ShardMove{{"a0", "a", "new"}, {"b0", "b", "new"}},
			after: map[string]int{"a": 2, "b": 2, "new": 2}},
		{name: "unmovable shards count but stay", nodes: n("a", "b"), shards: cat(pinned(on("a", "p", 3)), on("a", "x", 1)),
			moves: []ShardMove{{"x0", "a", "b"}},
			after: map[string]int{"a": 3, "b": 1}},
		{name: "nothing movable", nodes: n("a", "b"), shards: pinned(on("a", "p", 4)), after: map[string]int{"a": 4, "b": 0}},
		{name: "the next most loaded node moves when the most loaded cannot", nodes: n("a", "b", "c"),
			shards: cat(pinned(on("a", "p", 5)), on("b", "x", 4)),
			moves:  []ShardMove{{"x0", "b", "c"}, {"x1", "b", "c"}},
			after:  map[string]int{"a": 5, "b": 2, "c": 2}},
		{name: "shards on nodes not listed neither count nor move", nodes: n("a", "b"), shards: cat(on("gone", "g", 5), on("a", "x", 2)),
			moves: []ShardMove{{"x0", "a", "b"}},
			after: map[string]int{"a": 1, "b": 1}},
		{name: "stores are balanced apart",
			nodes: []RebalanceNode{{"a", "s3"}, {"b", "s3"}, {"g1", "gcs"}, {"g2", "gcs"}},
			shards: []RebalanceShard{
				{"x0", "a", "s3", true}, {"x1", "a", "s3", true}, {"x2", "a", "s3", true}, {"x3", "a", "s3", true},
				{"y0", "g1", "gcs", true}, {"y1", "g1", "gcs", true},
			},
			moves: []ShardMove{{"y0", "g1", "g2"}, {"x0", "a", "b"}, {"x1", "a", "b"}},
			after: map[string]int{"a": 2, "b": 2, "g1": 1, "g2": 1}},
		{name: "a shard of another store than its node's stays",
			nodes:  []RebalanceNode{{"a", "s3"}, {"b", "s3"}},
			shards: []RebalanceShard{{"x0", "a", "old", true}, {"x1", "a", "old", true}},
			after:  map[string]int{"a": 2, "b": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := PlanRebalance(tc.nodes, tc.shards)
			if !reflect.DeepEqual(plan.Moves, tc.moves) {
				t.Errorf("moves %v, want %v", plan.Moves, tc.moves)
			}
			if !reflect.DeepEqual(plan.After, tc.after) {
				t.Errorf("after %v, want %v", plan.After, tc.after)
			}
			seen := map[string]bool{}
			for _, mv := range plan.Moves {
				if seen[mv.Shard] {
					t.Errorf("%s moves twice", mv.Shard)
				}
				seen[mv.Shard] = true
			}
			if again := PlanRebalance(tc.nodes, tc.shards); !reflect.DeepEqual(again, plan) {
				t.Errorf("the same inputs planned differently: %v then %v", plan, again)
			}
		})
	}
}
