package fleetplan

import (
	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// MaxStaleGrants bounds how often in a row the master raises a shard's
// term because the owner found a higher one in the store.
const MaxStaleGrants = 5

// Report is a node's report on a shard, as the decision needs it.
type Report struct {
	Node, Allocation string
	Term             int64
	Kind             masterv1.ShardReport
	Reason           string
	SuccessorTerm    int64
	HasContext       bool // the report carries a handoff context
}

// Step is what a report does to its row.
type Step int

const (
	StepNothing       Step = iota
	StepAdopted            // the handoff's target opened: it owns the shard now
	StepOpen               // the owner opened the shard (moving while a handoff is under way)
	StepResumed            // the owner resumed it: open
	StepCancelHandoff      // the target could not adopt: the source keeps the shard
	StepRaiseTerm          // a stale grant: raise the term above the store's, new allocation
	StepGiveUp             // a stale grant once too often: failed
	StepFailed             // the owner could not open it
	StepFenced             // a term this master did not grant took the shard
	StepHandedOff          // the source handed off: keep its context, tell the target
	StepStoodDown          // the source stood down after an aborted handoff: take over
	StepClosed             // the owner closed it: assigned
)

// OnReport decides what report r does to the row whose newest recorded
// assignment is a, after staleGrants raised terms in a row. Only the
// owner at a's term and allocation, or the handoff's target at its
// allocation, changes anything.
func OnReport(a *masterv1.ShardAssignment, staleGrants int, r Report) Step {
	owner := r.Node == a.GetNode() && r.Allocation == a.GetAllocation() && r.Term == a.GetTerm()
	target := a.GetHandoffNode() != "" && r.Node == a.GetHandoffNode() && r.Allocation == a.GetHandoffAllocation() && r.Term == a.GetTerm()
	switch r.Kind {
	case masterv1.ShardReport_SHARD_REPORT_OPEN:
		switch {
		case target:
			return StepAdopted
		case owner:
			return StepOpen
		}
	case masterv1.ShardReport_SHARD_REPORT_FAILED:
		switch {
		case target:
			return StepCancelHandoff
		case owner && (r.Reason == "fenced" || r.Reason == "term_already_open"):
			// The store holds a higher term (or another allocation
			// holds this one), or this allocation already wrote at
			// this term (its process restarted).
			if staleGrants+1 > MaxStaleGrants {
				return StepGiveUp
			}
			return StepRaiseTerm
		case owner:
			return StepFailed
		}
	case masterv1.ShardReport_SHARD_REPORT_HANDED_OFF:
		if owner && a.GetHandoffNode() != "" && r.HasContext {
			return StepHandedOff
		}
	default:
		if owner {
			return ownerOnly[r.Kind]
		}
	}
	return StepNothing
}

// ownerOnly maps the reports only the owner's word counts for.
var ownerOnly = map[masterv1.ShardReport]Step{
	masterv1.ShardReport_SHARD_REPORT_RESUMED:    StepResumed,
	masterv1.ShardReport_SHARD_REPORT_FENCED:     StepFenced,
	masterv1.ShardReport_SHARD_REPORT_STOOD_DOWN: StepStoodDown,
	masterv1.ShardReport_SHARD_REPORT_CLOSED:     StepClosed,
}

// RaisedTerm is the term a stale grant is raised to: above both the
// assignment's and the one the owner found in the store.
func RaisedTerm(a *masterv1.ShardAssignment, successor int64) int64 {
	return max(a.GetTerm(), successor) + 1
}
