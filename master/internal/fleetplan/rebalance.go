package fleetplan

import (
	"sort"
)

// RebalanceNode is a node a rebalance may place shards on: an active,
// non-draining node whose store passed the precondition probe.
type RebalanceNode struct {
	Name string
	// Group is the node's store: a shard moves only between nodes of its
	// own store.
	Group string
}

// RebalanceShard is a shard of the table as a rebalance sees it.
type RebalanceShard struct {
	Shard string
	// Node is the node the shard counts on: its owner, or the target of a
	// handoff under way.
	Node string
	// Group is the shard's store.
	Group string
	// Movable: the shard may be moved now (open on an active owner,
	// fenced, no handoff under way).
	Movable bool
}

// ShardMove is one move of a rebalance plan.
type ShardMove struct {
	Shard, From, To string
}

// RebalancePlan is what PlanRebalance proposes: the moves in the order to
// start them (each shard at most once), and every node's shard count
// before and after them.
type RebalancePlan struct {
	Moves         []ShardMove
	Before, After map[string]int
}

// PlanRebalance spreads shards evenly over nodes: within each group, it
// moves a movable shard from the most loaded node to the least loaded one
// until their counts differ by at most one, or the most loaded nodes have
// nothing movable left. A shard moves at most once and only to a node of
// its group; shards on nodes not listed neither count nor move. The plan
// depends on its inputs alone (ties go to the smaller name), so the same
// table gives the same plan.
func PlanRebalance(nodes []RebalanceNode, shards []RebalanceShard) RebalancePlan {
	plan := RebalancePlan{Before: map[string]int{}, After: map[string]int{}}
	group := map[string]string{}
	for _, n := range nodes {
		group[n.Name] = n.Group
		plan.Before[n.Name] = 0
	}
	load := map[string]int{}
	// movable[node] lists the node's movable shards of its own group, by
	// name.
	movable := map[string][]string{}
	for _, s := range shards {
		g, ok := group[s.Node]
		if !ok {
			continue
		}
		plan.Before[s.Node]++
		load[s.Node]++
		if s.Movable && s.Group == g {
			movable[s.Node] = append(movable[s.Node], s.Shard)
		}
	}
	for _, l := range movable {
		sort.Strings(l)
	}
	groups := map[string][]string{}
	for _, n := range nodes {
		groups[n.Group] = append(groups[n.Group], n.Name)
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		members := groups[g]
		sort.Strings(members)
		for {
			var least, most string
			for _, n := range members {
				if least == "" || load[n] < load[least] {
					least = n
				}
				if len(movable[n]) > 0 && (most == "" || load[n] > load[most]) {
					most = n
				}
			}
			if most == "" || load[most]-load[least] <= 1 {
				break
			}
			shard := movable[most][0]
			movable[most] = movable[most][1:]
			load[most]--
			load[least]++
			plan.Moves = append(plan.Moves, ShardMove{Shard: shard, From: most, To: least})
		}
	}
	for n := range plan.Before {
		plan.After[n] = load[n]
	}
	return plan
}
