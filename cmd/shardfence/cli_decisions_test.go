package main

import (
	"errors"
	"slices"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/sidecar"
)

// TestCheckpointPolicy: serve's checkpoint flags (0: never) as the
// sidecar's policy (-1: never), negative values refused.
func TestCheckpointPolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    sidecar.CheckpointPolicy
		gc    bool
		want  sidecar.CheckpointPolicy
		usage bool
	}{
		{name: "both set", in: sidecar.CheckpointPolicy{EveryBytes: 1 << 20, Every: time.Minute}, gc: true, want: sidecar.CheckpointPolicy{EveryBytes: 1 << 20, Every: time.Minute}},
		{name: "never by size", in: sidecar.CheckpointPolicy{Every: time.Minute}, gc: true, want: sidecar.CheckpointPolicy{EveryBytes: -1, Every: time.Minute}},
		{name: "never by age, no gc", in: sidecar.CheckpointPolicy{EveryBytes: 5}, want: sidecar.CheckpointPolicy{EveryBytes: 5, Every: -1, NoGC: true}},
		{name: "negative bytes", in: sidecar.CheckpointPolicy{EveryBytes: -1}, usage: true},
		{name: "negative age", in: sidecar.CheckpointPolicy{Every: -time.Second}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkpointPolicy(tc.in, tc.gc)
			if tc.usage {
				if !errors.Is(err, errUsage) {
					t.Fatalf("want a usage error, got %+v, %v", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestMovedShards counts the bench's shards whose term or node changed,
// and no other shard.
func TestMovedShards(t *testing.T) {
	row := func(node string, term int64) *masterv1.ShardInfo {
		return &masterv1.ShardInfo{Assignment: &masterv1.ShardAssignment{Node: node, Term: term}}
	}
	before := map[string]*masterv1.ShardInfo{"bench-1": row("a", 1), "bench-2": row("b", 1), "bench-3": row("c", 1), "probe-1": row("a", 1)}
	after := map[string]*masterv1.ShardInfo{"bench-1": row("a", 1), "bench-2": row("b", 2), "bench-3": row("a", 1), "probe-1": row("b", 3)}
	if n := movedShards(before, after, "bench-"); n != 2 {
		t.Fatalf("moved %d, want 2 (bench-2's term, bench-3's node)", n)
	}
	if n := movedShards(before, before, "bench-"); n != 0 {
		t.Fatalf("moved %d of an unchanged table", n)
	}
}

// TestAcksByNode: the demo's per-node count, in the order given, nodes
// without an ack left out.
func TestAcksByNode(t *testing.T) {
	acks := []ackedOp{{node: "B"}, {node: "A"}, {node: "B"}, {node: "A"}, {node: "A"}}
	if got := acksByNode(acks, "A", "B", "C"); got != "A 3 + B 2" {
		t.Fatalf("got %q", got)
	}
	if got := acksByNode(nil, "A"); got != "" {
		t.Fatalf("no acks: got %q", got)
	}
}

// TestListParsing: the benches' comma-separated lists.
func TestListParsing(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi int
		want   []int
		ok     bool
	}{
		{"1,16", 1, 0, []int{1, 16}, true},
		{" 1 , 2 ", 1, 0, []int{1, 2}, true},
		{"0", 1, 0, nil, false},
		{"1,,2", 1, 0, nil, false},
		{"2048", 1, 1024, nil, false},
		{"1024", 1, 1024, []int{1024}, true},
		{"x", 1, 0, nil, false},
	} {
		got, ok := parseCounts(tc.in, tc.lo, tc.hi)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("parseCounts(%q, %d, %d) = %v, %v; want %v, %v", tc.in, tc.lo, tc.hi, got, ok, tc.want, tc.ok)
		}
	}
	if got := listItems("1s, ,3s,"); !slices.Equal(got, []string{"1s", "3s"}) {
		t.Errorf("listItems: %q", got)
	}
}
