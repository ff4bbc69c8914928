package master

import (
	"context"
	"errors"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// A move is a drain of one shard with a fixed target: same term, the
// source hands off, the named node adopts and owns the shard; the row
// shows moving until then, and nothing else moves.
func TestMoveHandsOffToTheChosenNode(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{})
	for _, n := range []string{"a", "b", "c"} {
		register(t, m, n)
	}
	s := assign(t, m, "s", "a", true, false).Assignment
	other := assign(t, m, "o", "a", true, false).Assignment
	report(t, m, "a", s, s.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	report(t, m, "a", other, other.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	wa, wc := watch(t, m, "a", "a-1"), watch(t, m, "c", "c-1")

	si, err := m.MoveShard(context.Background(), "s", "c")
	if err != nil {
		t.Fatal(err)
	}
	if si.State != ShardMoving || si.Assignment.GetHandoffNode() != "c" || si.Assignment.GetNode() != "a" || si.Assignment.GetTerm() != s.GetTerm() {
		t.Fatalf("after MoveShard: %s %+v", si.State, si.Assignment)
	}
	src := wa.until(t, "to hand s off to c", func(l []*NodeAssignment) bool {
		for _, x := range l {
			if x.GetShard() == "s" && x.GetHandoffNode() == "c" {
				return true
			}
		}
		return false
	})
	for _, x := range src {
		if x.GetShard() == "o" && x.GetHandoffNode() != "" {
			t.Fatalf("the move of s moves o too: %+v", x)
		}
	}
	// A second move of the same shard is refused while the first runs.
	if _, err := m.MoveShard(context.Background(), "s", "b"); !errors.Is(err, ErrShardMoving) {
		t.Fatalf("move of a moving shard: %v", err)
	}
	report(t, m, "a", s, s.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, func(r *ShardReport) { r.HandoffContext = []byte("ctx") })
	tgt := wc.until(t, "to adopt s", func(l []*NodeAssignment) bool { return len(l) == 1 && string(l[0].GetAdoptContext()) == "ctx" })[0]
	report(t, m, "c", s, tgt.GetAdoptAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	wa.until(t, "a holds only o", func(l []*NodeAssignment) bool { return len(l) == 1 && l[0].GetShard() == "o" })
	si, _ = m.ShardInfo("s")
	if r := si.Assignment; r.GetNode() != "c" || r.GetTerm() != s.GetTerm() || r.GetAllocation() != tgt.GetAdoptAllocation() || r.GetHandoffNode() != "" || si.State != ShardOpen {
		t.Fatalf("after the move: %s %+v", si.State, r)
	}
	if r := row(t, m, "o"); r.GetNode() != "a" || r.GetHandoffNode() != "" {
		t.Fatalf("o after the move of s: %+v", r)
	}
}

// A move whose target cannot adopt is cancelled: the shard stays on its
// source at its term, and the move is not retried (a drain's would be).
func TestMoveRevertsWhenTheTargetFails(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	for _, n := range []string{"a", "b", "c"} {
		register(t, m, n)
	}
	s := assign(t, m, "s", "a", true, false).Assignment
	report(t, m, "a", s, s.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	wa := watch(t, m, "a", "a-1")

	// The target's adoption fails.
	si, err := m.MoveShard(context.Background(), "s", "b")
	if err != nil {
		t.Fatal(err)
	}
	report(t, m, "a", s, s.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, func(r *ShardReport) { r.HandoffContext = []byte("ctx") })
	report(t, m, "b", s, si.Assignment.GetHandoffAllocation(), masterv1.ShardReport_SHARD_REPORT_FAILED, func(r *ShardReport) { r.Err = "disk full" })
	wa.until(t, "to keep s, the move cancelled", func(l []*NodeAssignment) bool { return len(l) == 1 && l[0].GetHandoffNode() == "" })
	if r := row(t, m, "s"); r.GetNode() != "a" || r.GetTerm() != s.GetTerm() || r.GetAllocation() != s.GetAllocation() || r.GetHandoffNode() != "" {
		t.Fatalf("after a failed adoption: %+v", r)
	}
	// Until the source says it resumed, the shard is not open: no move.
	if _, err := m.MoveShard(context.Background(), "s", "c"); !errors.Is(err, ErrShardNotOpen) {
		t.Fatalf("move before the source resumed: %v", err)
	}
	report(t, m, "a", s, s.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_RESUMED, nil)
	m.fleet.placePending(context.Background())
	if r := row(t, m, "s"); r.GetHandoffNode() != "" {
		t.Fatalf("the monitor retried a cancelled move: %+v", r)
	}

	// The target goes suspected mid-move: cancelled too.
	if _, err := m.MoveShard(context.Background(), "s", "c"); err != nil {
		t.Fatal(err)
	}
	m.CheckLiveness(context.Background())
	keepAlive(t, m, clk, 10*time.Second, "a", "b")
	if s := state(m, NodeClientID("c")); s != ClientSuspected {
		t.Fatalf("c: %v", s)
	}
	wa.until(t, "to keep s, the move to c cancelled", func(l []*NodeAssignment) bool { return len(l) == 1 && l[0].GetHandoffNode() == "" })
	if r := row(t, m, "s"); r.GetNode() != "a" || r.GetTerm() != s.GetTerm() || r.GetHandoffNode() != "" {
		t.Fatalf("after the target went suspected: %+v", r)
	}
}

// Every refusal is typed and records nothing.
func TestMoveRefusals(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{})
	for _, n := range []string{"a", "b", "d", "gone"} {
		register(t, m, n)
	}
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "other", Addr: "http://other", Store: "s3://elsewhere/p", Fencing: true, Session: "other-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "nofence", Addr: "http://nofence", Store: "s3://b/p", Fencing: false, Session: "nofence-1"}); err != nil {
		t.Fatal(err)
	}
	open := func(shard string) *masterv1.ShardAssignment {
		a := assign(t, m, shard, "a", true, false).Assignment
		report(t, m, "a", a, a.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
		return a
	}
	open("s")
	assign(t, m, "pending", "a", true, false) // never reported open
	failed := assign(t, m, "failed", "a", false, false).Assignment
	report(t, m, "a", failed, failed.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_FAILED, func(r *ShardReport) { r.Err = "boom" })
	unf, err := m.AssignShard(context.Background(), AssignRequest{Shard: "unfenced", Node: "a", Settings: &sidecarv1.ShardSettings{FencingDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	report(t, m, "a", unf.Assignment, unf.Assignment.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	open("moving")
	orphan := assign(t, m, "orphan", "gone", false, false).Assignment
	report(t, m, "gone", orphan, orphan.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	if _, err := m.MoveShard(context.Background(), "moving", "b"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.DrainNode(context.Background(), "d", false); err != nil {
		t.Fatal(err)
	}
	// "gone" goes suspected, then offline; the others stay active.
	m.CheckLiveness(context.Background())
	keepAlive(t, m, clk, 10*time.Second, "a", "b", "d", "other", "nofence")
	if s := state(m, NodeClientID("gone")); s != ClientSuspected {
		t.Fatalf("gone: %v", s)
	}

	for _, tc := range []struct {
		shard, node string
		want        error
	}{
		{"nope", "b", ErrShardNotAssigned},
		{"bad/name", "b", ErrInvalidArgument},
		{"s", "bad/name", ErrInvalidArgument},
		{"pending", "b", ErrShardNotOpen},
		{"failed", "b", ErrShardNotOpen},
		{"moving", "d", ErrShardMoving},
		{"unfenced", "b", ErrInvalidArgument},
		{"s", "a", ErrShardAssigned},
		{"s", "unknown", ErrNodeNotEligible},
		{"s", "d", ErrNodeNotEligible},       // draining
		{"s", "gone", ErrNodeNotEligible},    // suspected
		{"s", "other", ErrNodeNotEligible},   // another store
		{"s", "nofence", ErrNodeNotEligible}, // no fencing
	} {
		before := row(t, m, "s")
		_, err := m.MoveShard(context.Background(), tc.shard, tc.node)
		if !errors.Is(err, tc.want) {
			t.Errorf("move %s to %s: %v, want %v", tc.shard, tc.node, err, tc.want)
			continue
		}
		var me *Error
		if !errors.As(err, &me) || me.Op != "MoveShard" || me.Hint == "" && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("move %s to %s: %#v, want a MoveShard error with a hint", tc.shard, tc.node, err)
		}
		if after := row(t, m, "s"); after.GetHandoffNode() != before.GetHandoffNode() {
			t.Errorf("refused move %s to %s recorded a handoff: %+v", tc.shard, tc.node, after)
		}
	}
	// A shard left unassigned (its owner went offline, auto_restore off)
	// is not open; an offline node is not a target.
	m.CheckLiveness(context.Background())
	keepAlive(t, m, clk, 30*time.Second, "a", "b", "d", "other", "nofence")
	if s := state(m, NodeClientID("gone")); s == ClientActive || s == ClientSuspected {
		t.Fatalf("gone: %v", s)
	}
	if r := row(t, m, "orphan"); r.GetNode() != "" {
		t.Fatalf("orphan after its owner went offline: %+v", r)
	}
	for _, tc := range []struct {
		shard, node string
		want        error
	}{
		{"orphan", "b", ErrShardNotOpen},
		{"s", "gone", ErrNodeNotEligible},
	} {
		if _, err := m.MoveShard(context.Background(), tc.shard, tc.node); !errors.Is(err, tc.want) {
			t.Errorf("move %s to %s: %v, want %v", tc.shard, tc.node, err, tc.want)
		}
	}
}
