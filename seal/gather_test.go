package seal

import (
	"reflect"
	"slices"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
)

func attrs(keys ...string) []blobstore.Attrs {
	var out []blobstore.Attrs
	for _, k := range keys {
		out = append(out, blobstore.Attrs{Key: k})
	}
	return out
}

func newShardState() *shardState {
	return &shardState{shard: "s", markers: map[int64]Marker{}, manifests: map[layout.TermGen]Manifest{}, files: map[layout.TermGen][]string{}}
}

// lin12: term 1 wrote 1..10, term 2 restored from 10 and still writes.
var lin12 = Lineage{Ranges: []Range{{Term: 1, From: 1, To: 10}, {Term: 2, From: 11, To: OpenTip}}, Complete: true}

func TestListingsParsed(t *testing.T) {
	fks := fenceKeysOf(attrs(layout.FenceKey(3), layout.FenceDir+"stray", layout.FenceKey(1)))
	if len(fks) != 2 || fks[0].Term != 3 || fks[1].Term != 1 || fks[0].Key != layout.FenceKey(3) {
		t.Fatalf("fenceKeysOf = %+v, want terms 3 and 1, the stray left out", fks)
	}
	if got := markerTermsOf(attrs(layout.MarkerKey(2), layout.SealDir+"junk", layout.MarkerKey(5))); !slices.Equal(got, []int64{2, 5}) {
		t.Fatalf("markerTermsOf = %v, want [2 5]", got)
	}
	if got := markerTermsOf(nil); got != nil {
		t.Fatalf("markerTermsOf(nil) = %v", got)
	}
}

func TestAddMarkers(t *testing.T) {
	st := newShardState()
	m2, m4 := Marker{Shard: "s", Term: 2}, Marker{Shard: "s", Term: 4}
	st.addMarkers([]int64{2, 3, 4, 5}, []*Marker{&m2, nil, &m4, nil}, []string{"", "bad body", "", ""})
	if st.top != 4 || len(st.markers) != 2 || st.markers[2] != m2 {
		t.Fatalf("top %d markers %v, want top 4 and two markers", st.top, st.markers)
	}
	// A marker gone (no reason) is left out; an unreadable one reported.
	want := []Object{{Key: layout.MarkerKey(3), Reason: "bad body"}}
	if !reflect.DeepEqual(st.badMarker, want) {
		t.Fatalf("badMarker = %+v, want %+v", st.badMarker, want)
	}
}

func TestAddTranslogAndOffLineage(t *testing.T) {
	st := newShardState()
	st.top, st.lin = 2, lin12
	st.addTranslog(attrs(
		layout.MDKey(1, 9),  // on the lineage
		layout.MDKey(1, 11), // term 1 past its cut: off the lineage
		layout.MDKey(2, 12), // the top term: never read
		layout.MDKey(3, 1),  // above the top: never read
		layout.DataKey(1, 11),
		layout.TranslogDir+"junk",
	))
	if len(st.mds) != 4 || len(st.data) != 1 || st.data[0] != (layout.TermGen{Term: 1, Gen: 11}) || st.dataKeys[0] != layout.DataKey(1, 11) {
		t.Fatalf("mds %+v data %+v", st.mds, st.data)
	}
	if got := st.offLineage(); !slices.Equal(got, []int{1}) {
		t.Fatalf("offLineage = %v, want [1] (term 1 generation 11)", got)
	}
}

func TestAddAndIndexCheckpoints(t *testing.T) {
	st := newShardState()
	st.lin = lin12
	st.addCheckpoints(attrs(
		layout.ManifestKey(1, 5),
		layout.ManifestKey(2, 12),
		layout.ManifestKey(3, 12), // term 3 is not on the chain
		layout.FilePrefix(2, 12)+"a",
		layout.FilePrefix(2, 12)+"b",
		layout.FilePrefix(4, 1)+"x", // a manifest that never landed
	))
	if len(st.ckpts) != 3 || !st.ckpts[0].OnLineage || !st.ckpts[1].OnLineage || st.ckpts[2].OnLineage {
		t.Fatalf("ckpts %+v: want 1/5 and 2/12 on the lineage, 3/12 not", st.ckpts)
	}
	if len(st.files[layout.TermGen{Term: 2, Gen: 12}]) != 2 || len(st.files[layout.TermGen{Term: 4, Gen: 1}]) != 1 {
		t.Fatalf("files %v", st.files)
	}
	st.ckpts[0].Err = "unreadable"
	st.indexCheckpoints()
	var order []string
	for _, c := range st.ckpts {
		order = append(order, c.Key)
	}
	if want := []string{layout.ManifestKey(3, 12), layout.ManifestKey(2, 12), layout.ManifestKey(1, 5)}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want newest generation first, the higher term first within one", order)
	}
	if _, ok := st.manifests[layout.TermGen{Term: 1, Gen: 5}]; ok || len(st.manifests) != 2 {
		t.Fatalf("manifests %v: want the two readable ones", st.manifests)
	}
}

func TestGCBase(t *testing.T) {
	ck := func(term, gen int64, on bool, err string) CheckpointInfo {
		return CheckpointInfo{Key: layout.ManifestKey(term, gen), Term: term, Gen: gen, OnLineage: on, Err: err}
	}
	all := []CheckpointInfo{ck(2, 30, true, ""), ck(3, 25, false, ""), ck(2, 20, true, "bad"), ck(2, 15, true, ""), ck(1, 8, true, ""), ck(1, 4, true, "")}
	complete := map[string]bool{}
	for _, c := range all {
		complete[c.Key] = true
	}
	delete(complete, layout.ManifestKey(1, 8))
	for _, tc := range []struct {
		name        string
		policy      GCPolicy
		complete    map[string]bool
		kept        []int64
		cut, oldest int64
	}{
		{"two kept: off-lineage, unreadable and incomplete skipped", GCPolicy{RetainCheckpoints: 2}, complete, []int64{30, 15}, 30, 15},
		{"three kept", GCPolicy{RetainCheckpoints: 3}, complete, []int64{30, 15, 4}, 30, 4},
		{"retained generations lower the cut", GCPolicy{RetainCheckpoints: 1, RetainGens: 7}, complete, []int64{30}, 23, 30},
		{"none complete: nothing kept, nothing cut", GCPolicy{RetainCheckpoints: 2}, map[string]bool{}, nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, cut, oldest := gcBase(GCInput{Checkpoints: all, Complete: tc.complete, Policy: tc.policy})
			var gens []int64
			for _, c := range kept {
				gens = append(gens, c.Gen)
			}
			if !slices.Equal(gens, tc.kept) || cut != tc.cut || oldest != tc.oldest {
				t.Fatalf("gcBase = %v cut %d oldest %d, want %v %d %d", gens, cut, oldest, tc.kept, tc.cut, tc.oldest)
			}
		})
	}
}

func TestMarkersNeeded(t *testing.T) {
	// Chain newest first: term 4 (21..), term 3 (11..20), term 1 (1..10).
	lin := Lineage{
		Chain:  []Marker{{Term: 4}, {Term: 3}, {Term: 1}},
		Ranges: []Range{{Term: 1, From: 1, To: 10}, {Term: 3, From: 11, To: 20}, {Term: 4, From: 21, To: OpenTip}},
	}
	for _, tc := range []struct {
		name        string
		kept        bool
		cut, oldest int64
		owner       int64
		want        int
	}{
		{"no checkpoint kept: every marker", false, 0, 0, 4, 3},
		{"a checkpoint in term 4's history", true, 25, 25, 4, 1},
		{"the oldest kept checkpoint in term 3's history", true, 25, 15, 4, 2},
		{"the translog kept reaches term 1", true, 5, 25, 4, 3},
		{"a checkpoint right at term 3's end", true, 25, 20, 4, 2},
		{"the owner's own term and above stay", true, 25, 25, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := markersNeeded(lin, tc.kept, tc.cut, tc.oldest, tc.owner); got != tc.want {
				t.Fatalf("markersNeeded = %d, want %d", got, tc.want)
			}
		})
	}
}
