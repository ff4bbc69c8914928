package seal

import (
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// The seal's order of steps, decided by hand from what a seal would read:
// no store, no goroutine.

func keys(ks ...string) []blobstore.Attrs {
	var out []blobstore.Attrs
	for _, k := range ks {
		out = append(out, blobstore.Attrs{Key: k})
	}
	return out
}

func TestSealPlanNamesTheLineageTerm(t *testing.T) {
	for _, c := range []struct {
		name      string
		preds     []int64
		listed    []string
		found     *Marker // the read-ahead of the guess
		stale     int64
		top       int64
		own       bool
		guessHeld bool
		others    []int64
	}{
		{name: "new shard", listed: nil},
		{name: "stray keys are ignored", listed: []string{"seal/readme", layout.MarkerKey(0)}},
		{name: "the swept predecessor is the lineage term", preds: []int64{3}, listed: []string{layout.MarkerKey(3), layout.MarkerKey(1)},
			found: &Marker{Term: 3}, top: 3, guessHeld: true, others: []int64{1}},
		{name: "the guess is the highest predecessor below the term", preds: []int64{2, 3, 9}, listed: []string{layout.MarkerKey(3)},
			found: &Marker{Term: 3}, top: 3, guessHeld: true},
		{name: "a newer marker than the guess", preds: []int64{2}, listed: []string{layout.MarkerKey(3), layout.MarkerKey(2)},
			found: &Marker{Term: 2}, top: 3, others: []int64{2}},
		{name: "the guess left no marker", preds: []int64{3}, listed: []string{layout.MarkerKey(1)}, top: 1},
		{name: "the guess's marker was not found", preds: []int64{3}, listed: []string{layout.MarkerKey(3)}, top: 3, others: nil},
		{name: "our own marker: an earlier attempt", preds: []int64{3}, listed: []string{layout.MarkerKey(5), layout.MarkerKey(3)},
			found: &Marker{Term: 3}, top: 3, own: true, others: []int64{5}},
		{name: "a higher marker: a stale grant", preds: []int64{3}, listed: []string{layout.MarkerKey(6), layout.MarkerKey(3)}, stale: 6},
	} {
		p := newSealPlan("s", "a5", 5, c.preds)
		stale, key := p.listed(keys(c.listed...))
		if stale != c.stale || (stale > 0) != (key != "") {
			t.Errorf("%s: stale %d (%q), want %d", c.name, stale, key, c.stale)
			continue
		}
		if stale > 0 {
			continue
		}
		if p.top != c.top || p.own != c.own || p.guessed(c.found) != c.guessHeld {
			t.Errorf("%s: top %d own %v guess held %v, want %d %v %v", c.name, p.top, p.own, p.guessed(c.found), c.top, c.own, c.guessHeld)
		}
		if got := p.others(); len(got) != len(c.others) || (len(got) > 0 && got[0] != c.others[0]) {
			t.Errorf("%s: others %v, want %v", c.name, got, c.others)
		}
	}
}

func TestSealPlanWalkStartsAtTheNewestCheckpoint(t *testing.T) {
	p := newSealPlan("s", "a5", 5, nil)
	p.listed(keys(layout.MarkerKey(3)))
	prev := Marker{Term: 3, Restore: RestorePoint{Term: 2, Gen: 10}}
	if from := p.walkFrom(prev, nil); from != 10 {
		t.Fatalf("without checkpoints the walk starts at the restore gen: %d", from)
	}
	ckpts := keys(layout.ManifestKey(3, 14), layout.ManifestKey(3, 12), layout.ManifestKey(2, 40), "checkpoint/ckpt__junk")
	if from := p.walkFrom(prev, ckpts); from != 14 {
		t.Fatalf("the walk starts at the lineage term's newest checkpoint, not another term's: %d", from)
	}
	if from := p.walkFrom(prev, keys(layout.ManifestKey(3, 4))); from != 10 {
		t.Fatalf("a checkpoint below the restore gen does not move the start: %d", from)
	}
}

func poisonMD(tl, gen, by int64) translog.MD {
	return translog.MD{Kind: translog.KindPoison, Term: tl, Gen: gen, SealedBy: by}
}

func syncMDAt(tl, gen int64) translog.MD {
	return translog.MD{Kind: translog.KindSync, Term: tl, Gen: gen}
}

// The walk of lineage term 3 for successor term 5, from generation 10.
func verdict(a settle.Action, md translog.MD) settle.Verdict[translog.MD] {
	return settle.Verdict[translog.MD]{Action: a, Held: md}
}

func TestWalkFindsTheCut(t *testing.T) {
	for _, c := range []struct {
		name     string
		gens     []int64 // md listed for term 3
		prefix   func(lo, hi int64) []translog.MD
		poisons  []settle.Verdict[translog.MD] // answers to the poisons, in order
		wantLo   int64
		wantHi   int64
		firstAt  int64
		cut      int64
		how      string
		included []int64
		sent     int // poisons the walk asked for
	}{
		{name: "nothing after the start: poison the next generation", gens: []int64{9, 10}, wantLo: 11, wantHi: 10, firstAt: 11,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Created, translog.MD{})}, cut: 10, how: "created", sent: 1},
		{name: "a contiguous prefix, then a gap", gens: []int64{11, 12, 14}, wantLo: 11, wantHi: 12, firstAt: 13,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Created, translog.MD{})}, cut: 12, how: "created", included: []int64{11, 12}, sent: 1},
		{name: "the lineage term's md lands before the poison", gens: []int64{11}, wantLo: 11, wantHi: 11, firstAt: 12,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Lost, syncMDAt(3, 12)), verdict(settle.Lost, syncMDAt(3, 13)), verdict(settle.Created, translog.MD{})},
			cut:     13, how: "created", included: []int64{11, 12, 13}, sent: 3},
		{name: "another successor's poison at the gap", gens: nil, wantLo: 11, wantHi: 10, firstAt: 11,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Adopt, poisonMD(3, 11, 4))}, cut: 10, how: "found", sent: 1},
		{name: "our own poison from a lost response", gens: nil, wantLo: 11, wantHi: 10, firstAt: 11,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Adopt, poisonMD(3, 11, 5))}, cut: 10, how: "created", sent: 1},
		{name: "a poison that did not land is sent again", gens: nil, wantLo: 11, wantHi: 10, firstAt: 11,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Resend, translog.MD{}), verdict(settle.Created, translog.MD{})}, cut: 10, how: "created", sent: 2},
		{name: "a poison inside the prefix ends the walk there, whatever ours did", gens: []int64{11, 12, 13},
			prefix: func(lo, hi int64) []translog.MD {
				return []translog.MD{syncMDAt(3, 11), poisonMD(3, 12, 4), syncMDAt(3, 13)}
			}, wantLo: 11, wantHi: 13, firstAt: 14,
			poisons: []settle.Verdict[translog.MD]{verdict(settle.Created, translog.MD{})}, cut: 11, how: "found", included: []int64{11}, sent: 1},
	} {
		w := newWalk(3, 10, 5, c.gens)
		lo, hi := w.prefix()
		if lo != c.wantLo || hi != c.wantHi || w.next != c.firstAt {
			t.Errorf("%s: prefix %d..%d, first poison at %d; want %d..%d at %d", c.name, lo, hi, w.next, c.wantLo, c.wantHi, c.firstAt)
			continue
		}
		var prefix []translog.MD
		if c.prefix != nil {
			prefix = c.prefix(lo, hi)
		} else {
			for g := lo; g <= hi; g++ {
				prefix = append(prefix, syncMDAt(3, g))
			}
		}
		sent := 1
		if w.readPrefix(prefix); !w.done {
			w.poisonSettled(c.poisons[0])
		}
		for !w.done && sent < len(c.poisons) {
			w.poisonSettled(c.poisons[sent])
			sent++
		}
		if !w.done || w.cut != c.cut || w.how != c.how || sent != c.sent || w.poisoned != layout.MDKey(3, c.cut+1) {
			t.Errorf("%s: done %v cut %d (%s, %q) after %d poisons; want cut %d (%s) after %d", c.name, w.done, w.cut, w.how, w.poisoned, sent, c.cut, c.how, c.sent)
		}
		if len(w.mds) != len(c.included) {
			t.Errorf("%s: %d md on the lineage, want %v", c.name, len(w.mds), c.included)
		}
		for _, g := range c.included {
			if _, ok := w.mds[g]; !ok {
				t.Errorf("%s: generation %d not on the lineage", c.name, g)
			}
		}
	}
}

func TestSealPlanMarker(t *testing.T) {
	p := newSealPlan("s", "a5", 5, nil)
	if m := p.marker(Marker{}, nil); m != (Marker{Shard: "s", Term: 5, Allocation: "a5"}) {
		t.Fatalf("new shard: %+v", m)
	}
	p.listed(keys(layout.MarkerKey(3)))
	prev := Marker{Term: 3, Restore: RestorePoint{Term: 2, Gen: 10, MDKey: layout.MDKey(2, 10)}}
	w := &walk{tl: 3, cut: 10, poisoned: layout.MDKey(3, 11)}
	m := p.marker(prev, w)
	if m.Restore != (RestorePoint{Term: 3, Gen: 10, MDKey: layout.MDKey(2, 10)}) || m.Poisoned != layout.MDKey(3, 11) || m.Prev != layout.MarkerKey(3) {
		t.Fatalf("nothing written since the lineage term's restore: the restore md stays the older term's: %+v", m)
	}
	w.cut = 12
	if m := p.marker(prev, w); m.Restore.MDKey != layout.MDKey(3, 12) {
		t.Fatalf("restore md %q, want the lineage term's gen 12", m.Restore.MDKey)
	}
}

// A walk that keeps losing the race for next places a barrier poison
// further up (doubling the distance while the writer's md is there too),
// reads up to it in one round, and poisons from the first gap; with no gap
// the barrier is the cut.
func TestSealPlanWalkBarrier(t *testing.T) {
	lose := func(w *walk) { w.poisonSettled(verdict(settle.Lost, syncMDAt(3, w.next))) }
	read := func(lo, hi int64, gap int64) ([]translog.MD, []bool) {
		var mds []translog.MD
		var found []bool
		for g := lo; g <= hi; g++ {
			mds, found = append(mds, syncMDAt(3, g)), append(found, g != gap)
		}
		return mds, found
	}
	for _, c := range []struct {
		name     string
		gap      int64 // 0: none below the barrier
		cut      int64
		how      string
		included int
	}{
		{name: "a gap below the barrier", gap: 20, cut: 19, how: "created", included: 9},
		{name: "no gap: the barrier cuts", gap: 0, cut: 13 + 2*barrierLead - 1, how: "created", included: 2 + 2*barrierLead},
	} {
		w := newWalk(3, 10, 5, nil) // next 11
		if _, ok := w.barrierAt(); ok {
			t.Fatalf("%s: a barrier before any lost poison", c.name)
		}
		lose(w)
		if _, ok := w.barrierAt(); ok {
			t.Fatalf("%s: a barrier after one lost poison", c.name)
		}
		lose(w) // next 13
		gen, ok := w.barrierAt()
		if !ok || gen != 13+barrierLead {
			t.Fatalf("%s: barrier at %d (%v), want %d", c.name, gen, ok, 13+barrierLead)
		}
		w.barrierSettled(gen, verdict(settle.Lost, syncMDAt(3, gen)))
		if gen, ok = w.barrierAt(); !ok || gen != 13+2*barrierLead {
			t.Fatalf("%s: after the writer's md at the barrier, retry at %d (%v), want %d", c.name, gen, ok, 13+2*barrierLead)
		}
		w.barrierSettled(gen, verdict(settle.Created, translog.MD{}))
		lo, hi := w.fill()
		if lo != 13 || hi != gen-1 {
			t.Fatalf("%s: fill %d..%d", c.name, lo, hi)
		}
		w.readFill(read(lo, hi, c.gap))
		if c.gap != 0 {
			if w.done || w.next != c.gap {
				t.Fatalf("%s: after the fill done %v next %d, want the gap %d poisoned next", c.name, w.done, w.next, c.gap)
			}
			w.poisonSettled(verdict(settle.Created, translog.MD{}))
		}
		if !w.done || w.cut != c.cut || w.how != c.how || w.poisoned != layout.MDKey(3, c.cut+1) || len(w.mds) != c.included {
			t.Fatalf("%s: done %v cut %d (%s, %q), %d md; want cut %d (%s), %d md", c.name, w.done, w.cut, w.how, w.poisoned, len(w.mds), c.cut, c.how, c.included)
		}
	}
}
