package fleetplan

import (
	"fmt"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// Kind names the master's sentinel error a refusal is reported with.
type Kind int

const (
	NotAssigned Kind = iota + 1 // ErrShardNotAssigned
	Moving                      // ErrShardMoving
	NotOpen                     // ErrShardNotOpen
	Assigned                    // ErrShardAssigned
	Invalid                     // ErrInvalidArgument
	NotEligible                 // ErrNodeNotEligible
)

// Refusal is why a request is refused, with nothing recorded: the
// sentinel (Kind), the detail after it ("" for none) and a hint for the
// operator.
type Refusal struct {
	Kind         Kind
	Detail, Hint string
}

func refuse(k Kind, hint, format string, args ...any) *Refusal {
	return &Refusal{Kind: k, Detail: fmt.Sprintf(format, args...), Hint: hint}
}

// Move is a move of a shard to node To, as its check sees the table.
type Move struct {
	// Row is the shard's newest recorded assignment, nil when the shard is
	// not in the table (or its removal is on its way to the log).
	Row *masterv1.ShardAssignment
	// State is what its owner last reported ("" for nothing yet).
	State string
	// OwnerState is the owner's liveness: "" when Active, else as
	// "is suspected" or "is not registered".
	OwnerState string
	To         string
	// Target describes node To, nil when it is not registered.
	Target *Candidate
}

// CheckMove decides whether a move may start: a shard in the table, open
// on an active owner, fenced, not moving, not already on To; To
// registered, serving, of the shard's store, with fencing. nil when it
// may.
func CheckMove(m Move) *Refusal {
	c := m.Row
	if c == nil {
		return &Refusal{Kind: NotAssigned, Hint: "list the shards with shardfence master shards"}
	}
	switch {
	case c.GetHandoffNode() != "":
		return refuse(Moving, "wait for that handoff to end (shardfence master shards), then move it again",
			"it is moving from node %q to node %q at term %d", c.GetNode(), c.GetHandoffNode(), c.GetTerm())
	case c.GetNode() == "":
		return refuse(NotOpen, "assign it (or let auto-restore place it), then move it once it is open", "it is unassigned at term %d", c.GetTerm())
	case c.GetNode() == m.To:
		return refuse(Assigned, "choose another node", "node %q already owns it at term %d", m.To, c.GetTerm())
	case c.GetSettings().GetFencingDisabled():
		return refuse(Invalid, "unassign it and assign it on the node at a new term", "an unfenced shard cannot be handed off (the handoff moves its fence key)")
	case m.State != StateOpen:
		state := m.State
		if state == "" {
			state = StateAssigned
		}
		return refuse(NotOpen, "move it once shardfence master shards shows it open",
			"it is %s on node %q at term %d (its owner has not reported it open)", state, c.GetNode(), c.GetTerm())
	case m.OwnerState != "":
		// The owner performs the handoff: a suspected one would only
		// leave the shard moving until it is taken over.
		return refuse(NotOpen, "move it once its owner is active", "its owner node %q %s", c.GetNode(), m.OwnerState)
	}
	n := m.Target
	switch {
	case n == nil:
		return refuse(NotEligible, "list the nodes with shardfence master nodes", "node %q is not registered", m.To)
	case n.NotServing != "":
		return refuse(NotEligible, "choose an active node that is not draining", "node %q %s", m.To, n.NotServing)
	case c.GetStore() != "" && n.Store != c.GetStore():
		return refuse(NotEligible, "choose a node of the shard's store", "node %q serves store %q, the shard is in %q", m.To, n.Store, c.GetStore())
	case !n.Fencing:
		return refuse(NotEligible, "choose a node whose store enforces conditional writes",
			"node %q's store did not pass the precondition probe: a fenced shard cannot run there", m.To)
	}
	return nil
}

// CheckAssignTarget decides whether the node an assignment names (target,
// nil when not registered) may take a shard that is fenced or not.
func CheckAssignTarget(name string, target *Candidate, fenced bool) *Refusal {
	switch {
	case target == nil:
		return refuse(NotEligible, "start its sidecar with --master, or let the master choose", "node %q is not registered", name)
	case target.NotServing != "":
		return refuse(NotEligible, "choose an active node", "node %q %s", name, target.NotServing)
	case fenced && !target.Fencing:
		return refuse(NotEligible, "choose a node whose store enforces conditional writes",
			"node %q's store did not pass the precondition probe: a fenced shard cannot run there", name)
	}
	return nil
}

// Occupied refuses an assignment of a shard the table holds (row, nil
// when it does not).
func Occupied(row *masterv1.ShardAssignment) *Refusal {
	switch {
	case row == nil || row.GetRemoved():
		return nil
	case row.GetNode() == "":
		return refuse(Assigned, "unassign it first to assign it afresh", "shard is in the table, unassigned at term %d", row.GetTerm())
	}
	return refuse(Assigned, "move it to another node with shardfence master move, or unassign it first to assign it afresh",
		"owned by node %q at term %d", row.GetNode(), row.GetTerm())
}
