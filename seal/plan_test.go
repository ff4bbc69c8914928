package seal

import (
	"testing"

	"github.com/shardfence/shardfence/layout"
)

// GCSafety over the pure plan: poisons, unreadable bodies, the owner's
// in-flight writes, a newer term's objects and everything at or above the
// kept checkpoint survive; orphans and history below the checkpoint go.
func TestPlanGCSafety(t *testing.T) {
	mk := func(term, rterm, rgen int64) Marker {
		m := Marker{Shard: "s", Term: term, Allocation: "a", Restore: RestorePoint{Term: rterm, Gen: rgen}}
		if rterm > 0 {
			m.Prev = layout.MarkerKey(rterm)
		}
		return m
	}
	// 1 wrote 1..4 (poisoned at 5 by 3); 2 lost the race (off the chain);
	// 3 restored (1,4) and writes on; checkpoint of 3 at gen 8.
	markers := map[int64]Marker{1: mk(1, 0, 0), 2: mk(2, 1, 4), 3: mk(3, 1, 4)}
	chain, complete := ChainFrom(markers, 3)
	lin, err := LineageOf("s", chain, complete, OpenTip)
	if err != nil {
		t.Fatal(err)
	}
	md := func(term, gen int64) MDInfo { return MDInfo{Key: layout.MDKey(term, gen), Term: term, Gen: gen} }
	poison := md(1, 5)
	poison.Poison, poison.Sealed = true, 3
	unreadable := md(2, 7)
	unreadable.Err = "corrupt"
	mds := []MDInfo{md(1, 1), md(1, 2), md(1, 3), md(1, 4), poison, md(1, 6), md(2, 5), unreadable, md(3, 5), md(3, 8), md(3, 9), md(4, 10)}
	in := GCInput{
		Owner: 3, Lineage: lin, MDs: mds,
		Data:        []layout.TermGen{{Term: 1, Gen: 2}, {Term: 1, Gen: 6}, {Term: 3, Gen: 10}, {Term: 2, Gen: 9}},
		Checkpoints: []CheckpointInfo{{Key: layout.ManifestKey(3, 8), Term: 3, Gen: 8, OnLineage: true, Files: 1}, {Key: layout.ManifestKey(2, 6), Term: 2, Gen: 6, Files: 1}},
		Complete:    map[string]bool{layout.ManifestKey(3, 8): true, layout.ManifestKey(2, 6): true},
		Files:       map[layout.TermGen][]string{{Term: 3, Gen: 8}: {layout.FilePrefix(3, 8) + "f"}, {Term: 2, Gen: 6}: {layout.FilePrefix(2, 6) + "f"}, {Term: 1, Gen: 3}: {layout.FilePrefix(1, 3) + "x"}, {Term: 3, Gen: 12}: {layout.FilePrefix(3, 12) + "y"}},
		Markers:     []int64{3, 2, 1},
		Policy:      GCPolicy{}.withDefaults(),
	}
	del := map[string]bool{}
	for _, o := range PlanGC(in) {
		del[o.Key] = true
	}
	mustGo := []string{
		layout.MDKey(1, 1), layout.MDKey(1, 4), layout.MDKey(3, 5), layout.MDKey(3, 8), // below the checkpoint at 8
		layout.MDKey(1, 6), layout.MDKey(2, 5), // orphans: past the cut, off the chain
		layout.DataKey(1, 2), layout.DataKey(1, 6), layout.DataKey(2, 9),
		layout.ManifestKey(2, 6), layout.FilePrefix(2, 6) + "f", // orphan checkpoint
		layout.FilePrefix(1, 3) + "x", // files of a manifest that never landed
		layout.MarkerKey(2),           // off the chain
	}
	mustStay := []string{
		poison.Key, unreadable.Key, // never a poison, never what cannot be read
		layout.MDKey(3, 9), layout.DataKey(3, 10), // the owner's history and in-flight payload
		layout.MDKey(4, 10),                                     // a newer term's
		layout.ManifestKey(3, 8), layout.FilePrefix(3, 8) + "f", // the restore point's checkpoint
		layout.FilePrefix(3, 12) + "y", // the owner's publish in progress
		layout.MarkerKey(3),
	}
	for _, k := range mustGo {
		if !del[k] {
			t.Errorf("GC keeps %q", k)
		}
	}
	for _, k := range mustStay {
		if del[k] {
			t.Errorf("GC deletes %q", k)
		}
	}
	// No complete checkpoint: nothing on the lineage goes, only orphans.
	in.Complete = map[string]bool{}
	for _, o := range PlanGC(in) {
		if p, ok := layout.ParseMDKey(o.Key); ok && lin.Contains(p.Term, p.Gen) {
			t.Errorf("GC without a complete checkpoint deletes lineage md %q", o.Key)
		}
	}
}
