package master

import (
	"sort"

	"github.com/shardfence/shardfence/master/internal/fleetplan"
)

// RebalanceNode is a node a rebalance may place shards on: an active,
// non-draining node whose store passed the precondition probe. Name is
// the node; Group is its store (a shard moves only between nodes of its
// own store).
type RebalanceNode = fleetplan.RebalanceNode

// RebalanceShard is a shard of the table as a rebalance sees it: Node is
// the node it counts on (its owner, or the target of a handoff under
// way), Group its store, Movable whether it may be moved now (open on an
// active owner, fenced, no handoff under way).
type RebalanceShard = fleetplan.RebalanceShard

// ShardMove is one move of a rebalance plan.
type ShardMove = fleetplan.ShardMove

// RebalancePlan is what PlanRebalance proposes: the moves in the order to
// start them (each shard at most once), and every node's shard count
// before and after them.
type RebalancePlan = fleetplan.RebalancePlan

// PlanRebalance spreads shards evenly over nodes: within each group, it
// moves a movable shard from the most loaded node to the least loaded one
// until their counts differ by at most one, or the most loaded nodes have
// nothing movable left. A shard moves at most once and only to a node of
// its group; shards on nodes not listed neither count nor move. The plan
// depends on its inputs alone (ties go to the smaller name), so the same
// table gives the same plan.
func PlanRebalance(nodes []RebalanceNode, shards []RebalanceShard) RebalancePlan {
	return fleetplan.PlanRebalance(nodes, shards)
}

// PlanRebalance plans the moves that spread the table's shards evenly
// over the active, non-draining nodes able to run fenced shards (see the
// function PlanRebalance). It starts none: MoveShard does, one per shard.
func (m *Master) PlanRebalance() RebalancePlan {
	f := m.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	var nodes []RebalanceNode
	for name, n := range f.nodes {
		if n.rec != nil && f.m.eligibility.CanServe(n) && n.rec.GetFencing() {
			nodes = append(nodes, RebalanceNode{Name: name, Group: n.rec.GetStore()})
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var shards []RebalanceShard
	for _, e := range f.sortedLocked() {
		c := e.cur
		if c.GetRemoved() || c.GetNode() == "" {
			continue
		}
		rs := RebalanceShard{Shard: c.GetShard(), Node: c.GetNode(), Group: c.GetStore()}
		if h := c.GetHandoffNode(); h != "" {
			rs.Node = h
		} else {
			owner := f.nodes[c.GetNode()]
			rs.Movable = e.state == ShardOpen && !c.GetSettings().GetFencingDisabled() &&
				owner != nil && owner.owner.Load().State() == ClientActive
		}
		shards = append(shards, rs)
	}
	return PlanRebalance(nodes, shards)
}
