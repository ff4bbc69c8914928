package fleetplan

import (
	"strings"
	"testing"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

func TestCheckMove(t *testing.T) {
	row := &masterv1.ShardAssignment{Shard: "s", Node: "a", Store: "s3", Term: 4}
	good := &Candidate{Name: "b", Store: "s3", Fencing: true}
	ok := Move{Row: row, State: StateOpen, To: "b", Target: good}
	with := func(f func(*Move)) Move { m := ok; f(&m); return m }
	rowWith := func(f func(*masterv1.ShardAssignment)) *masterv1.ShardAssignment {
		a := &masterv1.ShardAssignment{Shard: "s", Node: "a", Store: "s3", Term: 4}
		f(a)
		return a
	}
	for _, tc := range []struct {
		name   string
		m      Move
		kind   Kind
		detail string
	}{
		{name: "ok", m: ok},
		{name: "ok to a node of any store when the shard has none", m: with(func(m *Move) {
			m.Row = rowWith(func(a *masterv1.ShardAssignment) { a.Store = "" })
			m.Target = &Candidate{Store: "gcs", Fencing: true}
		})},
		{name: "not in the table", m: with(func(m *Move) { m.Row = nil }), kind: NotAssigned},
		{name: "moving", m: with(func(m *Move) { m.Row = rowWith(func(a *masterv1.ShardAssignment) { a.HandoffNode = "c" }) }), kind: Moving, detail: `from node "a" to node "c" at term 4`},
		{name: "unassigned", m: with(func(m *Move) { m.Row = rowWith(func(a *masterv1.ShardAssignment) { a.Node = "" }) }), kind: NotOpen, detail: "unassigned at term 4"},
		{name: "already there", m: with(func(m *Move) { m.To = "a" }), kind: Assigned, detail: `node "a" already owns it`},
		{name: "unfenced", m: with(func(m *Move) {
			m.Row = rowWith(func(a *masterv1.ShardAssignment) { a.Settings = &sidecarv1.ShardSettings{FencingDisabled: true} })
		}), kind: Invalid, detail: "unfenced"},
		{name: "not reported open", m: with(func(m *Move) { m.State = "" }), kind: NotOpen, detail: "it is assigned on node"},
		{name: "failed", m: with(func(m *Move) { m.State = StateFailed }), kind: NotOpen, detail: "it is failed on node"},
		{name: "owner suspected", m: with(func(m *Move) { m.OwnerState = "is suspected" }), kind: NotOpen, detail: `owner node "a" is suspected`},
		{name: "target not registered", m: with(func(m *Move) { m.Target = nil }), kind: NotEligible, detail: `node "b" is not registered`},
		{name: "target draining", m: with(func(m *Move) { m.Target = &Candidate{Store: "s3", Fencing: true, NotServing: "is draining"} }), kind: NotEligible, detail: "is draining"},
		{name: "target of another store", m: with(func(m *Move) { m.Target = &Candidate{Store: "gcs", Fencing: true} }), kind: NotEligible, detail: `serves store "gcs", the shard is in "s3"`},
		{name: "target without fencing", m: with(func(m *Move) { m.Target = &Candidate{Store: "s3"} }), kind: NotEligible, detail: "precondition probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRefusal(t, CheckMove(tc.m), tc.kind, tc.detail)
		})
	}
}

func TestCheckAssignTarget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      *Candidate
		fenced bool
		kind   Kind
		detail string
	}{
		{name: "ok", c: &Candidate{Fencing: true}, fenced: true},
		{name: "unfenced shard on a node without fencing", c: &Candidate{}},
		{name: "not registered", kind: NotEligible, detail: `node "n" is not registered`},
		{name: "not serving", c: &Candidate{Fencing: true, NotServing: "is offline"}, kind: NotEligible, detail: `node "n" is offline`},
		{name: "fenced shard on a node without fencing", c: &Candidate{}, fenced: true, kind: NotEligible, detail: "precondition probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRefusal(t, CheckAssignTarget("n", tc.c, tc.fenced), tc.kind, tc.detail)
		})
	}
}

func TestOccupied(t *testing.T) {
	checkRefusal(t, Occupied(nil), 0, "")
	checkRefusal(t, Occupied(&masterv1.ShardAssignment{Node: "a", Removed: true}), 0, "")
	checkRefusal(t, Occupied(&masterv1.ShardAssignment{Term: 2}), Assigned, "unassigned at term 2")
	checkRefusal(t, Occupied(&masterv1.ShardAssignment{Node: "a", Term: 2}), Assigned, `owned by node "a" at term 2`)
}

func checkRefusal(t *testing.T, r *Refusal, kind Kind, detail string) {
	t.Helper()
	if kind == 0 {
		if r != nil {
			t.Fatalf("refused: %+v", r)
		}
		return
	}
	if r == nil || r.Kind != kind || !strings.Contains(r.Detail, detail) || r.Hint == "" {
		t.Fatalf("%+v, want kind %d with %q and a hint", r, kind, detail)
	}
}
