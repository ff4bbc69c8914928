package agent

import (
	"fmt"
	"sort"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/sidecar"
)

// The agent's decisions, as data: plan compares what the master assigns
// this node with what the sidecar holds and returns the actions to take,
// with no clock, lock or call of its own; reconcile (agent.go) is the
// driver that gathers its inputs and carries the actions out.

// actionKind is what the agent does about one shard.
type actionKind int

const (
	// actForget: neither assigned here nor held here: drop what the
	// agent remembers of the shard.
	actForget actionKind = iota + 1
	// actClose: held here but not assigned here (any more): close it
	// (its last syncs bounded by Options.CloseTimeout) and report CLOSED.
	actClose
	// actReport: tell the master the shard's state; the report is
	// remembered so the same one is not sent twice.
	actReport
	// actFail: the assignment cannot be carried out (its settings are
	// invalid): report FAILED with the cause.
	actFail
	// actAdopt: this node is the target of a drain or a move and the
	// source handed off: adopt the shard from the hand-off context.
	actAdopt
	// actHandOff: a drain or a move takes the shard off this node: hand
	// it off to the target allocation on the target node.
	actHandOff
	// actAbort: the master cancelled a hand-off this node started: take
	// the shard back (RESUMED, or STOOD_DOWN if the target wrote).
	actAbort
	// actOpen: gained, or to reopen at the assigned term: open it with
	// the protocol's recovery.
	actOpen
)

var actionNames = map[actionKind]string{
	actForget: "forget", actClose: "close", actReport: "report", actFail: "fail",
	actAdopt: "adopt", actHandOff: "hand off", actAbort: "abort hand-off", actOpen: "open",
}

func (k actionKind) String() string {
	if n, ok := actionNames[k]; ok {
		return n
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// action is one step on one shard. Term and Alloc are the assignment's,
// except for actClose, where they are the term and allocation the
// sidecar holds.
type action struct {
	Kind  actionKind
	Shard string
	Term  int64
	Alloc string
	// Why says which rule chose the action (logs and tests).
	Why string
	// Report is the report actReport sends.
	Report masterv1.ShardReport
	// Context is the hand-off context: sent with a HANDED_OFF report,
	// adopted by actAdopt, taken back by actAbort.
	Context []byte
	// Settings and Warm open (actOpen) or adopt (actAdopt) the shard.
	Settings sidecar.Settings
	Warm     bool
	// Target and TargetNode are where actHandOff sends the shard.
	Target, TargetNode string
	// State is the state the sidecar holds the shard in (actClose, for
	// its log).
	State string
	// Err is the cause actFail reports.
	Err error
}

// String is the action without its reason, for logs and test failures.
func (x action) String() string {
	s := fmt.Sprintf("%s %s term %d alloc %q", x.Kind, x.Shard, x.Term, x.Alloc)
	switch x.Kind {
	case actReport:
		s += " " + x.Report.String()
		if len(x.Context) > 0 {
			s += fmt.Sprintf(" context %q", x.Context)
		}
	case actAdopt, actAbort:
		s += fmt.Sprintf(" context %q", x.Context)
	case actHandOff:
		s += fmt.Sprintf(" to %q on %q", x.Target, x.TargetNode)
	case actOpen:
		if x.Warm {
			s += " warm"
		}
	case actClose:
		s += " from " + x.State
	case actFail:
		s += fmt.Sprintf(": %v", x.Err)
	}
	return s
}

// reportKey names a report for the once-only check: the same kind at the
// same term and allocation is sent once (until the agent forgets what it
// reported: a new master, a cancelled hand-off).
func reportKey(term int64, alloc string, kind masterv1.ShardReport) string {
	return fmt.Sprintf("%d/%s/%d", term, alloc, kind)
}

// shardView is what plan reads about one shard.
type shardView struct {
	// Desired is the master's assignment of the shard to this node (nil:
	// not assigned here).
	Desired *masterv1.NodeAssignment
	// Here says the sidecar holds the shard, in Local's state.
	Here  bool
	Local sidecar.ShardStatus
	// Reported is the key (reportKey) of the last report sent.
	Reported string
	// Handoff is the context this node's StartHandoff returned (nil if
	// none is outstanding).
	Handoff []byte
	// Busy: an action on the shard is still running. NotBefore: the last
	// one failed, and the next waits its back-off until then.
	Busy      bool
	NotBefore time.Time
}

// plan returns the actions to take now, at most one per shard, in the
// order of the shards' names. A shard that is busy or waiting out a
// back-off gets none.
func plan(now time.Time, shards map[string]shardView) []action {
	names := make([]string, 0, len(shards))
	for name := range shards {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []action
	for _, name := range names {
		v := shards[name]
		if v.Busy || now.Before(v.NotBefore) {
			continue
		}
		if x, ok := planShard(name, v); ok {
			out = append(out, x)
		}
	}
	return out
}

// planShard decides what to do about one shard; ok is false when there is
// nothing to do.
func planShard(name string, v shardView) (action, bool) {
	d, st := v.Desired, v.Local
	if d == nil {
		if !v.Here {
			return action{Kind: actForget, Shard: name, Why: "neither assigned nor held here"}, true
		}
		// Not ours (any more): close it. Until now the store fenced it if
		// a successor took it.
		return action{Kind: actClose, Shard: name, Term: st.Term, Alloc: st.Allocation, State: fmt.Sprint(st.State),
			Why: "held here, not assigned here"}, true
	}
	term, alloc := d.GetTerm(), d.GetAllocation()
	at := action{Shard: name, Term: term, Alloc: alloc}
	settings, err := sidecar.SettingsFromProto(d.GetSettings())
	if err != nil {
		at.Kind, at.Err, at.Why = actFail, err, "the assignment's settings are invalid"
		return at, true
	}
	if d.GetAdoptAllocation() != "" {
		return planAdopt(at, d, v, settings)
	}
	return planOwner(at, d, v, settings)
}

// mine: the sidecar holds the shard at the assigned term and allocation.
func mine(d *masterv1.NodeAssignment, v shardView) bool {
	return v.Here && v.Local.Term == d.GetTerm() && v.Local.Allocation == d.GetAllocation()
}

// planAdopt decides for the target of a drain or a move: adopt once the
// source handed off.
func planAdopt(at action, d *masterv1.NodeAssignment, v shardView, settings sidecar.Settings) (action, bool) {
	switch {
	case mine(d, v) && v.Local.State == sidecar.ShardOpen:
		return reportOnce(at, v, masterv1.ShardReport_SHARD_REPORT_OPEN, nil, "adopted and open")
	case len(d.GetAdoptContext()) == 0:
		return action{}, false // the source has not handed off yet
	}
	at.Kind, at.Context, at.Settings, at.Why = actAdopt, d.GetAdoptContext(), settings, "the source handed off"
	return at, true
}

// planOwner decides for a shard assigned to this node as its owner.
func planOwner(at action, d *masterv1.NodeAssignment, v shardView, settings sidecar.Settings) (action, bool) {
	st := v.Local
	state, own := st.State, mine(d, v)
	handingOff := d.GetHandoffNode() != ""
	switch {
	case own && handingOff && (state == sidecar.ShardOpen || state == sidecar.ShardHandedOff):
		// A drain (or a move) takes the shard off this node: hand it off
		// (or say again that it was).
		if state == sidecar.ShardHandedOff && v.Handoff != nil {
			return reportOnce(at, v, masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, v.Handoff, "handed off")
		}
		at.Kind, at.Target, at.TargetNode, at.Why = actHandOff, d.GetHandoffAllocation(), d.GetHandoffNode(), "a drain or a move takes it elsewhere"
		return at, true
	case own && (state == sidecar.ShardHandedOff || state == sidecar.ShardHandingOff) && !handingOff && v.Handoff != nil:
		at.Kind, at.Context, at.Why = actAbort, v.Handoff, "the master cancelled the hand-off"
		return at, true
	case own && state == sidecar.ShardOpen:
		return reportOnce(at, v, masterv1.ShardReport_SHARD_REPORT_OPEN, nil, "open at the assigned term")
	case own && st.Fenced:
		return reportOnce(at, v, masterv1.ShardReport_SHARD_REPORT_FENCED, nil, "fenced at the assigned term")
	case own && (state == sidecar.ShardOpening || state == sidecar.ShardClosing || state == sidecar.ShardHandingOff):
		return action{}, false // in transition: wait for it
	case v.Here && st.Term > at.Term:
		// Open here above the master's term (an operator's open): leave
		// it, and say so.
		return reportOnce(at, v, masterv1.ShardReport_SHARD_REPORT_FENCED, nil, "held above the assigned term")
	}
	// Gained (or to reopen at the assigned term): open it with the
	// protocol's recovery. A term that already wrote here, or a stale
	// grant, is reported; the master raises the term.
	at.Kind, at.Settings, at.Warm, at.Why = actOpen, settings, d.GetWarm(), "assigned here, not open at the assigned term"
	return at, true
}

// reportOnce is the report of kind, unless it is the last one sent.
func reportOnce(at action, v shardView, kind masterv1.ShardReport, handoff []byte, why string) (action, bool) {
	if v.Reported == reportKey(at.Term, at.Alloc, kind) {
		return action{}, false
	}
	at.Kind, at.Report, at.Context, at.Why = actReport, kind, handoff, why
	return at, true
}
