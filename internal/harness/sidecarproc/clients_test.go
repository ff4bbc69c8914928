package sidecarproc

import (
	"slices"
	"testing"
)

func TestLineageProblems(t *testing.T) {
	acked := map[string]ack{"a-1": {who: "A"}, "a-2": {who: "A"}, "b-1": {who: "B", epoch: 2}}
	for _, tc := range []struct {
		name     string
		read     map[string]int
		refused  []string
		sidecars []string
		want     []string
	}{
		{"clean", map[string]int{"a-1": 1, "a-2": 1, "b-1": 1, "a-3": 1}, []string{"late-a"}, []string{"A", "B"}, nil},
		{"an ack lost", map[string]int{"a-1": 1, "b-1": 1}, nil, []string{"A", "B"},
			[]string{"op a-2 acknowledged by A (epoch 0) is in the final lineage 0 times, want once"}},
		{"an ack twice", map[string]int{"a-1": 1, "a-2": 1, "b-1": 2}, nil, []string{"A", "B"},
			[]string{"op b-1 acknowledged by B (epoch 2) is in the final lineage 2 times, want once", "op b-1 appears 2 times in the lineage"}},
		{"an unacknowledged op twice", map[string]int{"a-1": 1, "a-2": 1, "b-1": 1, "x": 2}, nil, []string{"A", "B"},
			[]string{"op x appears 2 times in the lineage"}},
		{"a refused op read", map[string]int{"a-1": 1, "a-2": 1, "b-1": 1, "late-a": 1}, []string{"late-a", "late-b"}, []string{"A", "B"},
			[]string{"the refused append late-a made it into the lineage"}},
		{"a phase not exercised", map[string]int{"a-1": 1, "a-2": 1, "b-1": 1}, nil, []string{"A", "B", "C"},
			[]string{"no op was acknowledged by C: the run did not exercise its phase"}},
	} {
		by, got := lineageProblems(acked, tc.read, tc.refused, tc.sidecars)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems\n%q\nwant\n%q", tc.name, got, tc.want)
		}
		if by["A"] != 2 || by["B"] != 1 {
			t.Errorf("%s: acks by sidecar %v, want A 2, B 1", tc.name, by)
		}
	}
}
