package fleetplan

import (
	"testing"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

func TestOnReport(t *testing.T) {
	const (
		open      = masterv1.ShardReport_SHARD_REPORT_OPEN
		failed    = masterv1.ShardReport_SHARD_REPORT_FAILED
		fenced    = masterv1.ShardReport_SHARD_REPORT_FENCED
		handedOff = masterv1.ShardReport_SHARD_REPORT_HANDED_OFF
		stoodDown = masterv1.ShardReport_SHARD_REPORT_STOOD_DOWN
		closed    = masterv1.ShardReport_SHARD_REPORT_CLOSED
		resumed   = masterv1.ShardReport_SHARD_REPORT_RESUMED
	)
	plain := &masterv1.ShardAssignment{Shard: "s", Node: "a", Allocation: "a1", Term: 3}
	moving := &masterv1.ShardAssignment{Shard: "s", Node: "a", Allocation: "a1", Term: 3, HandoffNode: "b", HandoffAllocation: "b1"}
	owner := func(k masterv1.ShardReport) Report { return Report{Node: "a", Allocation: "a1", Term: 3, Kind: k} }
	target := func(k masterv1.ShardReport) Report { return Report{Node: "b", Allocation: "b1", Term: 3, Kind: k} }
	with := func(r Report, f func(*Report)) Report { f(&r); return r }
	for _, tc := range []struct {
		name  string
		a     *masterv1.ShardAssignment
		stale int
		r     Report
		want  Step
	}{
		{"owner open", plain, 0, owner(open), StepOpen},
		{"owner open during a handoff", moving, 0, owner(open), StepOpen},
		{"target open adopts", moving, 0, target(open), StepAdopted},
		{"target open without a handoff is nobody", plain, 0, target(open), StepNothing},
		{"old term is nobody", plain, 0, with(owner(open), func(r *Report) { r.Term = 2 }), StepNothing},
		{"old allocation is nobody", plain, 0, with(owner(open), func(r *Report) { r.Allocation = "a0" }), StepNothing},
		{"target at another term is nobody", moving, 0, with(target(open), func(r *Report) { r.Term = 4 }), StepNothing},
		{"owner resumed", plain, 0, owner(resumed), StepResumed},
		{"target resumed is nobody", moving, 0, target(resumed), StepNothing},
		{"target failed cancels the handoff", moving, 0, target(failed), StepCancelHandoff},
		{"owner failed", plain, 0, owner(failed), StepFailed},
		{"owner fenced at open raises the term", plain, 0, with(owner(failed), func(r *Report) { r.Reason = "fenced" }), StepRaiseTerm},
		{"owner's term already open raises the term", plain, MaxStaleGrants - 1, with(owner(failed), func(r *Report) { r.Reason = "term_already_open" }), StepRaiseTerm},
		{"too many raised terms give up", plain, MaxStaleGrants, with(owner(failed), func(r *Report) { r.Reason = "fenced" }), StepGiveUp},
		{"owner fenced later", plain, 0, owner(fenced), StepFenced},
		{"handed off with context", moving, 0, with(owner(handedOff), func(r *Report) { r.HasContext = true }), StepHandedOff},
		{"handed off without context", moving, 0, owner(handedOff), StepNothing},
		{"handed off without a handoff", plain, 0, with(owner(handedOff), func(r *Report) { r.HasContext = true }), StepNothing},
		{"stood down", moving, 0, owner(stoodDown), StepStoodDown},
		{"target stood down is nobody", moving, 0, target(stoodDown), StepNothing},
		{"closed", plain, 0, owner(closed), StepClosed},
		{"unspecified", plain, 0, owner(masterv1.ShardReport_SHARD_REPORT_UNSPECIFIED), StepNothing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OnReport(tc.a, tc.stale, tc.r); got != tc.want {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

func TestRaisedTerm(t *testing.T) {
	a := &masterv1.ShardAssignment{Term: 3}
	for _, tc := range []struct{ successor, want int64 }{{0, 4}, {3, 4}, {7, 8}} {
		if got := RaisedTerm(a, tc.successor); got != tc.want {
			t.Errorf("successor %d: %d, want %d", tc.successor, got, tc.want)
		}
	}
}
