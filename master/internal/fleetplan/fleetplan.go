// Package fleetplan holds the pure decisions of the master's fleet of
// sidecar nodes: which node a shard goes to, what a node's report does to
// its row, what happens to a node's shards when it goes Suspected or
// Offline, what the monitor's pass may act on, what a routing feed sends,
// how a rebalance spreads shards, and which requests are well formed. It
// holds no lock, records nothing and tells no node: package master does,
// under its locks, and publishes a change only once the log holds it.
package fleetplan

import (
	"fmt"
	"strings"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// Shard states, as ListShards and the routing feed report them.
const (
	StateAssigned   = "assigned"   // told (or about to be), not confirmed open
	StateOpen       = "open"       // the owner reported it open at the term
	StateFailed     = "failed"     // the owner could not open it (reason)
	StateFenced     = "fenced"     // a term the master did not grant took it
	StateMoving     = "moving"     // a drain's or a move's handoff is under way
	StateUnassigned = "unassigned" // no owner (reason)
)

// Candidate is a node as a placement sees it.
type Candidate struct {
	Name    string
	Store   string
	Fencing bool // the node's store passed the precondition probe
	// NotServing is why the serving eligibility refuses the node ("is
	// draining", "is suspected", ...); "" when it serves.
	NotServing string
}

// Want is what a shard asks of the node it goes to.
type Want struct {
	Store  string // "" for any store
	Fenced bool   // the shard runs fenced: the node must have fencing
	// Exclude is never chosen; Avoid (the node that last lost the
	// shard) only when no other node fits.
	Exclude, Avoid string
}

// WantOf returns what the shard of assignment a asks of a node.
func WantOf(a *masterv1.ShardAssignment, exclude, avoid string) Want {
	return Want{Store: a.GetStore(), Fenced: !a.GetSettings().GetFencingDisabled(), Exclude: exclude, Avoid: avoid}
}

// Pick chooses the node a shard goes to among names (in the order given,
// which breaks ties): one that serves, of the shard's store, able to run
// its fencing, not w.Exclude, least loaded; w.Avoid only if no other
// fits. With none, it returns "" and why.
func Pick(names []string, node func(name string) Candidate, load map[string]int, w Want) (string, string) {
	var best, fallback string
	var why []string
	for _, name := range names {
		if name == w.Exclude {
			continue
		}
		c := node(name)
		switch {
		case c.NotServing != "":
			why = append(why, name+" "+c.NotServing)
			continue
		case w.Store != "" && c.Store != w.Store:
			why = append(why, name+" serves another store")
			continue
		case w.Fenced && !c.Fencing:
			why = append(why, name+"'s store did not pass the precondition probe")
			continue
		}
		if name == w.Avoid {
			fallback = name
			continue
		}
		if best == "" || load[name] < load[best] {
			best = name
		}
	}
	if best == "" {
		best = fallback
	}
	if best == "" {
		if len(why) > 0 {
			return "", "no eligible node: " + strings.Join(why, ", ")
		}
		return "", "no node is registered"
	}
	return best, ""
}

// Lost is what a node's loss does to one shard row that names it.
type Lost int

const (
	LostNothing       Lost = iota
	LostTakeOver           // move the shard to a live node at term+1, new allocation
	LostUnassign           // leave it unassigned (auto_restore off), with the reason
	LostCancelHandoff      // the node was a handoff's target: the source keeps it
)

// OnSuspected decides for a shard row when node goes Suspected: only a
// shard that asked for a takeover at suspected moves; a handoff to the
// node is cancelled.
func OnSuspected(a *masterv1.ShardAssignment, node string) Lost {
	switch {
	case a.GetNode() == node && a.GetAutoRestore() && a.GetTakeoverAtSuspected():
		return LostTakeOver
	case a.GetHandoffNode() == node:
		return LostCancelHandoff
	}
	return LostNothing
}

// OnOffline decides for a shard row when node goes Offline: an
// auto-restore shard moves, any other shard it owned is left unassigned,
// and a handoff to it is cancelled.
func OnOffline(a *masterv1.ShardAssignment, node string) Lost {
	switch {
	case a.GetNode() == node && a.GetAutoRestore():
		return LostTakeOver
	case a.GetNode() == node:
		return LostUnassign
	case a.GetHandoffNode() == node:
		return LostCancelHandoff
	}
	return LostNothing
}

// OfflineReason is the reason an offline node's shard without
// auto_restore is left unassigned with.
func OfflineReason(node string) string {
	return fmt.Sprintf("node %s went offline and auto_restore is off: assign the shard again (shardfence master assign)", node)
}

// Owner is the owner of a shard as the monitor's pass sees it.
type Owner struct {
	Known     bool // a node of that name is in the table
	Draining  bool
	Suspected bool // its incarnation is Suspected
}

// Pending is what the monitor's pass does with a shard row.
type Pending int

const (
	PendingNothing      Pending = iota
	PendingPlace                // unassigned auto-restore: place it if a node can take it
	PendingStartHandoff         // the owner drains: start its handoff
	PendingTakeOver             // the owner is Suspected and the shard asked for a takeover then
)

// PendingStep decides what the monitor's pass does with row a, whose
// owner is o.
func PendingStep(a *masterv1.ShardAssignment, o Owner) Pending {
	switch {
	case a.GetRemoved():
		return PendingNothing
	case a.GetNode() == "":
		if a.GetAutoRestore() {
			return PendingPlace
		}
		return PendingNothing
	case !o.Known:
		return PendingNothing
	case o.Draining && a.GetHandoffNode() == "":
		return PendingStartHandoff
	case o.Suspected && a.GetAutoRestore() && a.GetTakeoverAtSuspected():
		return PendingTakeOver
	}
	return PendingNothing
}

// HandoffBlocked says why a shard cannot be handed off at all ("" when it
// can): the handoff moves the fence key, which an unfenced shard has not.
func HandoffBlocked(a *masterv1.ShardAssignment) string {
	if a.GetSettings().GetFencingDisabled() {
		return "an unfenced shard cannot be handed off (the handoff moves its fence key): unassign it, or assign it elsewhere at a new term"
	}
	return ""
}

// Drain is what a drain of a node does with one shard row.
type Drain int

const (
	DrainNothing  Drain = iota // not the node's shard (or removed)
	DrainUnderWay              // its handoff is already under way: moving
	DrainStart                 // start its handoff (or wait for a target)
)

// DrainStep decides what a drain of node does with row a.
func DrainStep(a *masterv1.ShardAssignment, node string) Drain {
	switch {
	case a.GetNode() != node || a.GetRemoved():
		return DrainNothing
	case a.GetHandoffNode() != "":
		return DrainUnderWay
	}
	return DrainStart
}

// ForNode is what published row p asks of node: to hold the shard (its
// owner, handing off if p names a target) or to adopt it (the handoff's
// target, with the source's context adoptCtx); nil when p does not name
// node or is removed.
func ForNode(p *masterv1.ShardAssignment, node string, adoptCtx []byte) *masterv1.NodeAssignment {
	switch {
	case p == nil || p.GetRemoved():
		return nil
	case node == p.GetNode():
		return &masterv1.NodeAssignment{Shard: p.GetShard(), Term: p.GetTerm(), Allocation: p.GetAllocation(), Settings: p.GetSettings(),
			HandoffAllocation: p.GetHandoffAllocation(), HandoffNode: p.GetHandoffNode(), Warm: p.GetWarm()}
	case node == p.GetHandoffNode():
		return &masterv1.NodeAssignment{Shard: p.GetShard(), Term: p.GetTerm(), Allocation: p.GetHandoffAllocation(), Settings: p.GetSettings(),
			AdoptAllocation: p.GetHandoffAllocation(), AdoptContext: adoptCtx}
	}
	return nil
}
