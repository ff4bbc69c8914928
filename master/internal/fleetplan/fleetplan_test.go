package fleetplan

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

func TestPick(t *testing.T) {
	nodes := map[string]Candidate{
		"a":     {Name: "a", Store: "s3", Fencing: true},
		"b":     {Name: "b", Store: "s3", Fencing: true},
		"c":     {Name: "c", Store: "s3", Fencing: true},
		"drain": {Name: "drain", Store: "s3", Fencing: true, NotServing: "is draining"},
		"gcs":   {Name: "gcs", Store: "gcs", Fencing: true},
		"weak":  {Name: "weak", Store: "s3"},
	}
	cand := func(name string) Candidate { return nodes[name] }
	for _, tc := range []struct {
		name     string
		names    []string
		load     map[string]int
		want     Want
		pick     string
		whyParts []string
	}{
		{name: "no node", whyParts: []string{"no node is registered"}},
		{name: "least loaded", names: []string{"a", "b", "c"}, load: map[string]int{"a": 2, "b": 1, "c": 3}, want: Want{Store: "s3", Fenced: true}, pick: "b"},
		{name: "ties go to the first name", names: []string{"a", "b"}, load: map[string]int{"a": 1, "b": 1}, pick: "a"},
		{name: "exclude is never chosen", names: []string{"a", "b"}, load: map[string]int{"b": 5}, want: Want{Exclude: "a"}, pick: "b"},
		{name: "avoid only as a last resort", names: []string{"a", "b"}, load: map[string]int{"b": 5}, want: Want{Avoid: "a"}, pick: "b"},
		{name: "avoid when nothing else fits", names: []string{"a", "drain"}, want: Want{Avoid: "a"}, pick: "a"},
		{name: "store must match", names: []string{"gcs", "a"}, load: map[string]int{"a": 9}, want: Want{Store: "s3"}, pick: "a"},
		{name: "any store when the shard has none", names: []string{"gcs", "a"}, load: map[string]int{"a": 9}, pick: "gcs"},
		{name: "fenced shard needs fencing", names: []string{"weak", "a"}, load: map[string]int{"a": 9}, want: Want{Fenced: true}, pick: "a"},
		{name: "unfenced shard takes any", names: []string{"weak", "a"}, load: map[string]int{"a": 9}, pick: "weak"},
		{name: "every refusal named", names: []string{"drain", "gcs", "weak", "a"}, want: Want{Store: "s3", Fenced: true, Exclude: "a"},
			whyParts: []string{"no eligible node: ", "drain is draining", "gcs serves another store", "weak's store did not pass the precondition probe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Pick(tc.names, cand, tc.load, tc.want)
			if got != tc.pick {
				t.Fatalf("picked %q (%s), want %q", got, why, tc.pick)
			}
			if (why == "") != (tc.pick != "") {
				t.Fatalf("why %q with pick %q", why, got)
			}
			for _, p := range tc.whyParts {
				if !strings.Contains(why, p) {
					t.Errorf("why %q lacks %q", why, p)
				}
			}
		})
	}
}

func TestWantOf(t *testing.T) {
	a := &masterv1.ShardAssignment{Store: "s3", Settings: &sidecarv1.ShardSettings{FencingDisabled: true}}
	if w := WantOf(a, "x", "y"); w != (Want{Store: "s3", Fenced: false, Exclude: "x", Avoid: "y"}) {
		t.Fatalf("%+v", w)
	}
	if w := WantOf(&masterv1.ShardAssignment{}, "", ""); !w.Fenced {
		t.Fatalf("a shard without settings is fenced: %+v", w)
	}
}

func TestOnNodeLoss(t *testing.T) {
	row := func(node, handoff string, auto, tas bool) *masterv1.ShardAssignment {
		return &masterv1.ShardAssignment{Shard: "s", Node: node, HandoffNode: handoff, AutoRestore: auto, TakeoverAtSuspected: tas}
	}
	for _, tc := range []struct {
		name               string
		a                  *masterv1.ShardAssignment
		suspected, offline Lost
	}{
		{"owner, auto-restore, takeover at suspected", row("n", "", true, true), LostTakeOver, LostTakeOver},
		{"owner, auto-restore", row("n", "", true, false), LostNothing, LostTakeOver},
		{"owner, no auto-restore", row("n", "", false, false), LostNothing, LostUnassign},
		{"owner during a handoff it performs", row("n", "m", true, false), LostNothing, LostTakeOver},
		{"handoff target", row("m", "n", true, false), LostCancelHandoff, LostCancelHandoff},
		{"handoff target of a takeover-at-suspected shard", row("m", "n", true, true), LostCancelHandoff, LostCancelHandoff},
		{"another node's shard", row("m", "", true, true), LostNothing, LostNothing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OnSuspected(tc.a, "n"); got != tc.suspected {
				t.Errorf("suspected: %v, want %v", got, tc.suspected)
			}
			if got := OnOffline(tc.a, "n"); got != tc.offline {
				t.Errorf("offline: %v, want %v", got, tc.offline)
			}
		})
	}
}

func TestPendingStep(t *testing.T) {
	known := Owner{Known: true}
	for _, tc := range []struct {
		name string
		a    *masterv1.ShardAssignment
		o    Owner
		want Pending
	}{
		{"removed", &masterv1.ShardAssignment{Removed: true, AutoRestore: true}, Owner{}, PendingNothing},
		{"unassigned auto-restore", &masterv1.ShardAssignment{AutoRestore: true}, Owner{}, PendingPlace},
		{"unassigned without auto-restore", &masterv1.ShardAssignment{}, Owner{}, PendingNothing},
		{"owner unknown", &masterv1.ShardAssignment{Node: "n", AutoRestore: true, TakeoverAtSuspected: true}, Owner{}, PendingNothing},
		{"owner active", &masterv1.ShardAssignment{Node: "n", AutoRestore: true, TakeoverAtSuspected: true}, known, PendingNothing},
		{"owner draining", &masterv1.ShardAssignment{Node: "n"}, Owner{Known: true, Draining: true}, PendingStartHandoff},
		{"owner draining, handoff under way", &masterv1.ShardAssignment{Node: "n", HandoffNode: "m"}, Owner{Known: true, Draining: true}, PendingNothing},
		{"owner suspected, takeover at suspected", &masterv1.ShardAssignment{Node: "n", AutoRestore: true, TakeoverAtSuspected: true}, Owner{Known: true, Suspected: true}, PendingTakeOver},
		{"owner suspected, waits for offline", &masterv1.ShardAssignment{Node: "n", AutoRestore: true}, Owner{Known: true, Suspected: true}, PendingNothing},
		{"draining before suspected", &masterv1.ShardAssignment{Node: "n", AutoRestore: true, TakeoverAtSuspected: true}, Owner{Known: true, Draining: true, Suspected: true}, PendingStartHandoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PendingStep(tc.a, tc.o); got != tc.want {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

func TestHandoffBlocked(t *testing.T) {
	if why := HandoffBlocked(&masterv1.ShardAssignment{}); why != "" {
		t.Fatalf("a fenced shard is blocked: %s", why)
	}
	if why := HandoffBlocked(&masterv1.ShardAssignment{Settings: &sidecarv1.ShardSettings{FencingDisabled: true}}); why == "" {
		t.Fatal("an unfenced shard is handed off")
	}
}

func TestDrainStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *masterv1.ShardAssignment
		want Drain
	}{
		{"the node's shard", &masterv1.ShardAssignment{Node: "n"}, DrainStart},
		{"already moving", &masterv1.ShardAssignment{Node: "n", HandoffNode: "m"}, DrainUnderWay},
		{"removed", &masterv1.ShardAssignment{Node: "n", Removed: true}, DrainNothing},
		{"another node's", &masterv1.ShardAssignment{Node: "m"}, DrainNothing},
		{"coming to the node", &masterv1.ShardAssignment{Node: "m", HandoffNode: "n"}, DrainNothing},
	} {
		if got := DrainStep(tc.a, "n"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestForNode(t *testing.T) {
	settings := &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC}
	p := &masterv1.ShardAssignment{Shard: "s", Term: 3, Node: "a", Allocation: "a1", HandoffNode: "b", HandoffAllocation: "b1", Settings: settings, Warm: true}
	ctx := []byte("ctx")
	for _, tc := range []struct {
		name, node string
		p          *masterv1.ShardAssignment
		want       *masterv1.NodeAssignment
	}{
		{"owner holds and hands off", "a", p, &masterv1.NodeAssignment{Shard: "s", Term: 3, Allocation: "a1", Settings: settings, HandoffAllocation: "b1", HandoffNode: "b", Warm: true}},
		{"target adopts", "b", p, &masterv1.NodeAssignment{Shard: "s", Term: 3, Allocation: "b1", Settings: settings, AdoptAllocation: "b1", AdoptContext: ctx}},
		{"another node", "c", p, nil},
		{"nothing published", "a", nil, nil},
		{"removed", "a", &masterv1.ShardAssignment{Shard: "s", Node: "a", Removed: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ForNode(tc.p, tc.node, ctx)
			if (got == nil) != (tc.want == nil) || got != nil && !proto.Equal(got, tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}
