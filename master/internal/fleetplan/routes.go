package fleetplan

import (
	"sort"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// RouteState is the state the routing feed shows for a published row:
// unassigned without an owner, assigned until the owner reported it open
// at that row (or while a newer row is on its way to the log), else what
// the owner reported.
func RouteState(node, state string, durable bool) string {
	switch {
	case node == "":
		return StateUnassigned
	case state == "" || !durable && state == StateOpen:
		return StateAssigned
	}
	return state
}

// DiffRoutes lists the routes of cur that differ from last, and those of
// last cur no longer has (removed), in shard order.
func DiffRoutes(last, cur map[string]*masterv1.ShardRoute) []*masterv1.ShardRoute {
	var out []*masterv1.ShardRoute
	for name, r := range cur {
		if old := last[name]; old == nil || !proto.Equal(old, r) {
			out = append(out, r)
		}
	}
	for name := range last {
		if cur[name] == nil {
			out = append(out, &masterv1.ShardRoute{Shard: name, Removed: true})
		}
	}
	sortRoutes(out)
	return out
}

// SortedRoutes lists the routes of m in shard order.
func SortedRoutes(m map[string]*masterv1.ShardRoute) []*masterv1.ShardRoute {
	out := make([]*masterv1.ShardRoute, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sortRoutes(out)
	return out
}

func sortRoutes(rs []*masterv1.ShardRoute) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Shard < rs[j].Shard })
}
