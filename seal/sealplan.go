package seal

import (
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// sealPlan is the order of a seal's steps, decided from what was read.
// Seal (seal.go) is its driver: it runs the reads and creates each step
// asks for, in parallel where the plan allows, and hands the results
// back; the plan does no I/O.
//
//  1. LIST seal/ and, beside it, read ahead the marker, md listing and
//     checkpoints of the likeliest lineage term: the highest predecessor
//     whose fence key the claim swept (guess).
//  2. The LIST names the lineage term (top): the newest marker below ours;
//     a higher one is a stale grant (listed). When top is the guess and
//     ours is not listed, the read-ahead is the lineage term's (guessed)
//     and the older markers are read beside the walk; else every listed
//     marker, top's md listing and its checkpoints are read now, and a
//     marker of our own term means an earlier attempt: reopen.
//  3. Walk top from its starting point (walkFrom, then walk): read the
//     contiguous md, poison the first missing generation.
//  4. Create the term's marker (marker); one of our own term already there
//     means an earlier attempt of this allocation: reopen.
type sealPlan struct {
	shard string
	alloc string
	term  int64
	guess int64   // the predecessor read ahead in step 1; 0 for none
	terms []int64 // every listed marker's term, ours included
	top   int64   // the lineage term; 0 for a new shard
	own   bool    // a marker of our term is listed
}

func newSealPlan(shard, alloc string, term int64, predecessors []int64) sealPlan {
	p := sealPlan{shard: shard, alloc: alloc, term: term}
	for _, t := range predecessors {
		if t < term {
			p.guess = max(p.guess, t)
		}
	}
	return p
}

// listed takes the LIST of seal/. A marker above the term is a stale
// grant: its term and key are returned and the seal must stop (stale > 0).
func (p *sealPlan) listed(items []blobstore.Attrs) (stale int64, key string) {
	for _, it := range items {
		t, ok := layout.ParseMarkerKey(it.Key)
		if !ok {
			continue
		}
		if t > p.term {
			return t, it.Key
		}
		p.terms = append(p.terms, t)
		p.own = p.own || t == p.term
		if t < p.term {
			p.top = max(p.top, t)
		}
	}
	return 0, ""
}

// guessed reports whether the read-ahead of step 1 is the lineage term's:
// the LIST agrees the guess is the newest marker below ours, its marker
// was found, and ours is not listed.
func (p *sealPlan) guessed(m *Marker) bool {
	return p.top > 0 && p.top == p.guess && m != nil && !p.own
}

// others are the listed terms besides the lineage term: their markers
// only shape the lineage below the cut.
func (p *sealPlan) others() []int64 {
	var out []int64
	for _, t := range p.terms {
		if t != p.top {
			out = append(out, t)
		}
	}
	return out
}

// walkFrom is where the walk of the lineage term starts: the later of its
// marker's restore gen and its newest checkpoint. GC deletes translog at
// or below a complete checkpoint, so those md may be gone and would look
// like a gap; a checkpoint is published only for acknowledged generations,
// which every successor's restore point holds, so nothing at or below it
// can be a gap.
func (p *sealPlan) walkFrom(prev Marker, ckpts []blobstore.Attrs) int64 {
	from := prev.Restore.Gen
	for _, it := range ckpts {
		if c, ok := layout.ParseManifestKey(it.Key); ok && c.Term == p.top {
			from = max(from, c.Gen)
		}
	}
	return from
}

// marker is the term's seal marker: an empty restore point for a new
// shard, else the restore point the walk w of the lineage term found
// (prev is the lineage term's marker), the poison that cut it and the
// previous marker.
func (p *sealPlan) marker(prev Marker, w *walk) Marker {
	m := Marker{Shard: p.shard, Term: p.term, Allocation: p.alloc}
	if p.top == 0 {
		return m
	}
	m.Restore = RestorePoint{Term: p.top, Gen: w.cut, MDKey: prev.Restore.MDKey}
	if w.cut > prev.Restore.Gen {
		m.Restore.MDKey = layout.MDKey(p.top, w.cut)
	}
	m.Poisoned, m.Prev = w.poisoned, layout.MarkerKey(p.top)
	return m
}

// walk finds where lineage term tl ends for successor term: the md after
// from are read, the first missing generation is poisoned, a real md found
// there is included and the next one poisoned, and a poison (ours from a
// lost response, or another successor's) ends the walk (docs/PROTOCOL.md,
// section 5). The first poison is sent while the prefix is read: if the
// prefix holds another successor's poison, the cut is there and our poison
// further up is one more never-acknowledged md past it.
//
// A writer still appending can win the race for next again and again (a
// poison costs a create and a read, its md one create), and an unfenced or
// observe-mode writer never stops on its own. After chaseLimit lost
// poisons the walk places a barrier: a poison lead generations above next
// (the lead doubles while the writer's md is found there too). The writer
// cannot acknowledge past a poison, nor create beyond it, so the walk then
// reads next up to the barrier in one round, includes what is there, and
// poisons from the first gap; it ends at the barrier at the latest.
type walk struct {
	tl, term int64
	from     int64
	next     int64 // the generation the next poison goes to
	mds      map[int64]translog.MD

	lost       int    // poisons at next the lineage term's md beat
	barrier    int64  // generation of the barrier poison; 0 while none
	barrierHow string // "created" or "found", as for the walk's end
	lead       int64  // how far above next the next barrier attempt goes

	done     bool
	cut      int64  // the last generation of the lineage term's history
	poisoned string // the poison's key
	how      string // "created": this seal cut the lineage; "found": another successor had
}

// newWalk starts a walk of tl from from; gens lists tl's md.
func newWalk(tl, from, term int64, gens []int64) *walk {
	k := ContiguousAfter(gens, from)
	return &walk{tl: tl, term: term, from: from, next: k + 1, mds: make(map[int64]translog.MD, k-from+1), lead: barrierLead}
}

// chaseLimit is how many poisons the lineage term's md may beat before the
// walk places a barrier; barrierLead is the barrier's first distance above
// next (more than a writer's md creates in flight, translog.MaxPipeline's
// default of 4, and create-only's check window of 8).
const (
	chaseLimit  = 2
	barrierLead = 16
)

// barrierAt says where to place the barrier now: ok once chaseLimit
// poisons were lost and no barrier stands.
func (w *walk) barrierAt() (gen int64, ok bool) {
	if w.done || w.barrier != 0 || w.lost < chaseLimit {
		return 0, false
	}
	return w.next + w.lead, true
}

// barrierSettled takes the verdict on the barrier poison at gen: a poison
// there (ours, or another successor's) is the barrier; the lineage term's
// md there means the writer got that far: try twice as far up.
func (w *walk) barrierSettled(gen int64, v settle.Verdict[translog.MD]) {
	switch v.Action {
	case settle.Created:
		w.barrier, w.barrierHow = gen, "created"
	case settle.Adopt:
		w.barrier, w.barrierHow = gen, "found"
		if v.Held.SealedBy == w.term {
			w.barrierHow = "created"
		}
	case settle.Lost:
		w.lead *= 2
	}
}

// fill is the range to read once the barrier stands: next up to the
// generation below it.
func (w *walk) fill() (lo, hi int64) { return w.next, w.barrier - 1 }

// readFill takes what the fill read, in order from next (found false: no
// md there): the lineage term's md are included up to the first gap, where
// the walk poisons next; a poison ends the walk below it, and with no gap
// the barrier does.
func (w *walk) readFill(mds []translog.MD, found []bool) {
	defer func() {
		if !w.done && w.next == w.barrier {
			w.end(w.barrier-1, w.barrierHow)
		}
	}()
	for i, md := range mds {
		if !found[i] {
			return
		}
		if md.Kind == translog.KindPoison {
			how := "found"
			if md.SealedBy == w.term {
				how = "created"
			}
			w.end(md.Gen-1, how)
			return
		}
		w.mds[md.Gen] = md
		w.next = md.Gen + 1
	}
}

// prefix is the range of md to read beside the first poison: from+1 up to
// the generation before it (empty when lo > hi).
func (w *walk) prefix() (lo, hi int64) { return w.from + 1, w.next - 1 }

// readPrefix takes the md of the prefix, in order: a poison among them
// ends the walk there.
func (w *walk) readPrefix(mds []translog.MD) {
	for _, md := range mds {
		if md.Kind == translog.KindPoison {
			w.end(md.Gen-1, "found")
			return
		}
		w.mds[md.Gen] = md
	}
}

// poisonSettled takes the verdict on the poison at next: it landed now,
// a poison is there (ours, or another successor's), the lineage term's md
// landed first (included: the walk goes on), or it did not land (send it
// again).
func (w *walk) poisonSettled(v settle.Verdict[translog.MD]) {
	switch v.Action {
	case settle.Created:
		w.end(w.next-1, "created")
	case settle.Adopt:
		how := "found"
		if v.Held.SealedBy == w.term {
			how = "created"
		}
		w.end(w.next-1, how)
	case settle.Lost:
		w.mds[w.next] = v.Held
		w.next++
		w.lost++
	}
}

func (w *walk) end(cut int64, how string) {
	w.done, w.cut, w.poisoned, w.how = true, cut, layout.MDKey(w.tl, cut+1), how
}
