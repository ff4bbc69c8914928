package fleetplan

import (
	"reflect"
	"testing"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

func TestRouteState(t *testing.T) {
	for _, tc := range []struct {
		node, state string
		durable     bool
		want        string
	}{
		{"", StateOpen, true, StateUnassigned},
		{"a", "", true, StateAssigned},
		{"a", StateOpen, true, StateOpen},
		{"a", StateOpen, false, StateAssigned}, // a newer row is on its way to the log
		{"a", StateMoving, false, StateMoving},
		{"a", StateFailed, true, StateFailed},
	} {
		if got := RouteState(tc.node, tc.state, tc.durable); got != tc.want {
			t.Errorf("RouteState(%q, %q, %v) = %q, want %q", tc.node, tc.state, tc.durable, got, tc.want)
		}
	}
}

func TestDiffRoutes(t *testing.T) {
	r := func(shard, node string, term int64) *masterv1.ShardRoute {
		return &masterv1.ShardRoute{Shard: shard, Node: node, Term: term, State: StateOpen}
	}
	gone := func(shard string) *masterv1.ShardRoute { return &masterv1.ShardRoute{Shard: shard, Removed: true} }
	table := func(rs ...*masterv1.ShardRoute) map[string]*masterv1.ShardRoute {
		m := map[string]*masterv1.ShardRoute{}
		for _, x := range rs {
			m[x.Shard] = x
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		last, cur map[string]*masterv1.ShardRoute
		want      []*masterv1.ShardRoute
	}{
		{"nothing", table(), table(), nil},
		{"unchanged", table(r("a", "n", 1)), table(r("a", "n", 1)), nil},
		{"new shard", table(r("a", "n", 1)), table(r("a", "n", 1), r("b", "n", 1)), []*masterv1.ShardRoute{r("b", "n", 1)}},
		{"moved at a higher term", table(r("a", "n", 1)), table(r("a", "m", 2)), []*masterv1.ShardRoute{r("a", "m", 2)}},
		{"removed", table(r("a", "n", 1), r("b", "n", 1)), table(r("b", "n", 1)), []*masterv1.ShardRoute{gone("a")}},
		{"in shard order", table(r("c", "n", 1), r("a", "n", 1)), table(r("b", "n", 1), r("d", "n", 1)),
			[]*masterv1.ShardRoute{gone("a"), r("b", "n", 1), gone("c"), r("d", "n", 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffRoutes(tc.last, tc.cur)
			if len(got) != len(tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].String() != tc.want[i].String() {
					t.Fatalf("%d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestSortedRoutes(t *testing.T) {
	m := map[string]*masterv1.ShardRoute{"b": {Shard: "b"}, "a": {Shard: "a"}, "c": {Shard: "c"}}
	var names []string
	for _, r := range SortedRoutes(m) {
		names = append(names, r.Shard)
	}
	if want := []string{"a", "b", "c"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("%v, want %v", names, want)
	}
}
