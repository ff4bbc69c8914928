package seal

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// Result is what a seal established for its term.
type Result struct {
	// Marker is the term's marker as stored.
	Marker Marker
	// Lineage is the inherited history, its newest range ending at the
	// restore gen.
	Lineage Lineage
	// Reused: the marker was written by an earlier attempt of the same
	// allocation (an Open retried after a failure before opening).
	Reused bool
	// Found is how the walk met the poison: "created" (this seal cut the
	// lineage), "found" (another successor had cut it there), "" for a
	// new shard or a reused marker.
	Found string
	// MDs are the lineage term's md read by the walk, by generation, so
	// the replay need not read them again.
	MDs map[int64]translog.MD
}

// Restore is the restore point the term opens at.
func (r *Result) Restore() RestorePoint { return r.Marker.Restore }

// Survey is a seal's first round of reads (step 1 of the plan): the LIST of
// seal/ and, beside it, the marker, md listing and checkpoint listing of the
// likeliest lineage term. A claim takes it beside its verifying LIST
// (fence.Hooks.Swept), so the seal starts one round trip early.
type Survey struct {
	term       int64
	guess      int64
	items      []blobstore.Attrs
	guessed    *Marker
	guessGens  []int64
	guessCkpts []blobstore.Attrs
}

// TakeSurvey reads the seal's first round for term, whose claim deleted the
// fence keys of predecessors. It must run only once every delete of the
// claim's sweep was acknowledged (the restore point is never read before),
// and it counts only if the sweep then proves complete: SealWith checks that
// the survey matches the claimed chain.
func TakeSurvey(ctx context.Context, store *blobstore.Container, shard string, term int64, predecessors []int64, opts Options) (*Survey, error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	plan := newSealPlan(shard, "", term, predecessors)
	sv := &Survey{term: term, guess: plan.guess}
	err := parallel(ctx, 4, 4, func(ctx context.Context, i int) error {
		var err error
		switch {
		case i == 0:
			sv.items, err = s.list(ctx, layout.MarkerPrefix)
		case plan.guess == 0:
		case i == 1:
			sv.guessed, err = s.readMarker(ctx, plan.guess)
		case i == 2:
			sv.guessGens, err = s.gens(ctx, plan.guess)
		default:
			sv.guessCkpts, err = s.list(ctx, layout.ManifestTermPrefix(plan.guess))
		}
		return err
	})
	if err != nil {
		return nil, wrapErr("Seal", shard, layout.SealDir, term, err)
	}
	return sv, nil
}

// LowerMarkers reports whether the survey listed a seal marker of a term
// below its own (seal.LowerMarkers, from the survey's LIST); false for a
// nil survey.
func (sv *Survey) LowerMarkers() bool {
	if sv == nil {
		return false
	}
	for _, a := range sv.items {
		if t, ok := layout.ParseMarkerKey(a.Key); ok && t < sv.term {
			return true
		}
	}
	return false
}

// Seal resolves the lineage the claimed chain's term inherits, poisons the
// first missing generation of the lineage term, and writes the term's seal
// marker (protocol section 4 step 6, section 5). The chain must have
// completed its claim: the lineage is read only after every lower fence key
// is gone, so no lower term can acknowledge anything past what is read. A
// marker of a higher term means the grant is stale: the chain is fenced.
// Seal is idempotent for the same term and allocation as long as the term
// was not opened for writes.
func Seal(ctx context.Context, store *blobstore.Container, chain *fence.Chain, opts Options) (*Result, error) {
	return SealWith(ctx, store, chain, nil, opts, nil)
}

// SealWith is Seal continuing from a survey taken for the chain's claim
// (TakeSurvey). A nil survey, or one taken for another term or another
// set of predecessors, is taken again first. beside, when set, runs
// beside the marker's create with the lineage and restore point the
// marker records (recovery.Open reads the checkpoint manifest there); the
// marker may still be refused, or an earlier attempt's may win, so it must
// only read.
func SealWith(ctx context.Context, store *blobstore.Container, chain *fence.Chain, sv *Survey, opts Options, beside func(ctx context.Context, lin Lineage, restore RestorePoint)) (*Result, error) {
	s := storeIO{store: store, shard: chain.Shard(), opts: opts.withDefaults()}
	term := chain.Term()
	if err := chain.Err(); err != nil {
		return nil, err
	}
	plan := newSealPlan(s.shard, chain.Allocation(), term, chain.Predecessors())
	// Step 1: the LIST of seal/ and the read-ahead of the guess, all of it
	// after the sweep.
	if sv == nil || sv.term != term || sv.guess != plan.guess {
		var err error
		if sv, err = TakeSurvey(ctx, store, s.shard, term, chain.Predecessors(), opts); err != nil {
			return nil, err
		}
	}
	// Step 2: the lineage term.
	if t, key := plan.listed(sv.items); t > 0 {
		return nil, chain.Fence(t, fmt.Sprintf("stale term: term %d already sealed the shard (marker %q)", t, key))
	}
	r, err := s.readLineage(ctx, &plan, sv)
	if err != nil {
		return nil, wrapErr("Seal", s.shard, layout.SealDir, term, err)
	}
	if m, ok := r.markers[term]; ok {
		return s.reopen(ctx, chain, m, r.markers)
	}
	// Step 3: walk the lineage term.
	wk, err := s.walkLineage(ctx, &plan, r)
	if err != nil {
		return nil, err
	}
	// Step 4: the marker, with the caller's reads beside it.
	want := plan.marker(wk.prev, wk.w)
	stored, err := s.markerBeside(ctx, chain, want, func(ctx context.Context) {
		if beside != nil {
			beside(ctx, wk.lin, want.Restore)
		}
	})
	if err != nil {
		return nil, err
	}
	if stored != want {
		// An earlier attempt of this allocation wrote the marker first
		// (it saw other markers then): its restore point holds.
		r.markers[term] = stored
		return s.reopen(ctx, chain, stored, r.markers)
	}
	res := &Result{Marker: stored, Lineage: wk.lin}
	if wk.w != nil {
		res.Found, res.MDs = wk.w.how, wk.w.mds
	}
	return res, nil
}

// lineageReads are step 2's reads of the lineage term: every listed
// marker (or, when the survey's read-ahead is the lineage term's, its
// marker now and the older ones beside the walk's first round: also), the
// lineage term's md listing and its checkpoints.
type lineageReads struct {
	markers map[int64]Marker
	gens    []int64
	ckpts   []blobstore.Attrs
	also    func(ctx context.Context) error
	older   map[int64]Marker // read by also
}

// readLineage carries out step 2 of plan: the survey's read-ahead is
// used when it is the lineage term's (sealPlan.guessed), else the reads
// are sent now.
func (s storeIO) readLineage(ctx context.Context, plan *sealPlan, sv *Survey) (*lineageReads, error) {
	r := &lineageReads{}
	if plan.guessed(sv.guessed) {
		r.markers, r.gens, r.ckpts = map[int64]Marker{plan.top: *sv.guessed}, sv.guessGens, sv.guessCkpts
		r.also = func(ctx context.Context) error {
			var err error
			r.older, err = s.readMarkers(ctx, plan.others())
			return err
		}
		return r, nil
	}
	top := plan.top
	err := parallel(ctx, 3, 3, func(ctx context.Context, i int) error {
		var err error
		switch {
		case i == 0:
			r.markers, err = s.readMarkers(ctx, plan.terms)
		case top == 0:
		case i == 1:
			r.gens, err = s.gens(ctx, top)
		default:
			r.ckpts, err = s.list(ctx, layout.ManifestTermPrefix(top))
		}
		return err
	})
	return r, err
}

// walked is what step 3 found: the lineage term's marker, the walk of its
// md (nil for a new shard) and the lineage it cut.
type walked struct {
	prev Marker
	w    *walk
	lin  Lineage
}

// walkLineage carries out step 3 of plan: walk the lineage term from
// where the plan starts it, then follow the marker chain down from it.
func (s storeIO) walkLineage(ctx context.Context, plan *sealPlan, r *lineageReads) (walked, error) {
	top, term := plan.top, plan.term
	wk := walked{lin: Lineage{Complete: true}}
	if top == 0 {
		return wk, nil
	}
	var ok bool
	if wk.prev, ok = r.markers[top]; !ok {
		return wk, wrapErr("Seal", s.shard, layout.MarkerKey(top), term, blobstore.Unavailable(errors.New("the newest seal marker vanished between LIST and GET")))
	}
	wk.w = newWalk(top, plan.walkFrom(wk.prev, r.ckpts), term, r.gens)
	wk.w.lead = int64(s.opts.BarrierLead)
	if err := s.walk(ctx, wk.w, r.also); err != nil {
		return wk, wrapErr("Seal", s.shard, layout.MDTermPrefix(top), term, err)
	}
	for t, m := range r.older {
		r.markers[t] = m
	}
	chainMs, complete := ChainFrom(r.markers, top)
	var err error
	if wk.lin, err = LineageOf(s.shard, chainMs, complete, wk.w.cut); err != nil {
		return wk, wrapErr("Seal", s.shard, layout.MarkerKey(top), term, err)
	}
	return wk, nil
}

// markerBeside creates want's marker (writeMarker) with beside running
// next to it, and returns once both ended.
func (s storeIO) markerBeside(ctx context.Context, chain *fence.Chain, want Marker, beside func(ctx context.Context)) (Marker, error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		beside(ctx)
	}()
	stored, err := s.writeMarker(ctx, chain, want)
	<-done
	return stored, err
}

// readMarker GETs the marker of term; nil when there is none.
func (s storeIO) readMarker(ctx context.Context, term int64) (*Marker, error) {
	key := layout.MarkerKey(term)
	obj, found, err := s.get(ctx, key)
	if err != nil || !found {
		return nil, err
	}
	m, err := DecodeMarker(s.shard, key, obj.Body)
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// gens lists the generations of term that have an md, ascending.
func (s storeIO) gens(ctx context.Context, term int64) ([]int64, error) {
	var gens []int64
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		gens, err = translog.NewReader(s.store, s.shard).Gens(ctx, term)
		return err
	})
	return gens, err
}

// readMarkers GETs the markers of terms in parallel. A marker listed but
// gone when read was collected meanwhile and is left out.
func (s storeIO) readMarkers(ctx context.Context, terms []int64) (map[int64]Marker, error) {
	out := make([]*Marker, len(terms))
	err := parallel(ctx, s.opts.Parallelism, len(terms), func(ctx context.Context, i int) error {
		var err error
		out[i], err = s.readMarker(ctx, terms[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	markers := make(map[int64]Marker, len(terms))
	for _, m := range out {
		if m != nil {
			markers[m.Term] = *m
		}
	}
	return markers, nil
}

// walk carries out w: the first poison and the md of the prefix go out
// together (the poison and also first, so they never wait for a slot
// behind the reads), then one poison at a time until the walk ends. also,
// when set, runs beside the first round (reads the caller needs later).
func (s storeIO) walk(ctx context.Context, w *walk, also func(ctx context.Context) error) error {
	lo, hi := w.prefix()
	prefix := make([]translog.MD, max(0, hi-lo+1))
	gen := w.next
	var first settle.Verdict[translog.MD]
	err := parallel(ctx, s.opts.Parallelism, len(prefix)+2, func(ctx context.Context, i int) error {
		var err error
		switch i {
		case 0:
			first, err = s.poison(ctx, w.tl, gen, w.term)
		case 1:
			if also != nil {
				err = also(ctx)
			}
		default:
			prefix[i-2], err = s.readMD(ctx, w.tl, lo+int64(i-2))
		}
		return err
	})
	if err != nil {
		return err
	}
	if w.readPrefix(prefix); !w.done {
		w.poisonSettled(first)
	}
	for !w.done {
		if gen, ok := w.barrierAt(); ok {
			v, err := s.poison(ctx, w.tl, gen, w.term)
			if err != nil {
				return err
			}
			if w.barrierSettled(gen, v); w.barrier == 0 {
				continue
			}
			lo, hi := w.fill()
			mds := make([]translog.MD, max(0, hi-lo+1))
			found := make([]bool, len(mds))
			err = parallel(ctx, s.opts.Parallelism, len(mds), func(ctx context.Context, i int) error {
				var err error
				mds[i], found[i], err = s.readMDMaybe(ctx, w.tl, lo+int64(i))
				return err
			})
			if err != nil {
				return err
			}
			w.readFill(mds, found)
			continue
		}
		v, err := s.poison(ctx, w.tl, w.next, w.term)
		if err != nil {
			return err
		}
		w.poisonSettled(v)
	}
	return nil
}

// readMDMaybe reads and decodes one md, retrying store trouble; found is
// false when there is none.
func (s storeIO) readMDMaybe(ctx context.Context, term, gen int64) (translog.MD, bool, error) {
	key := layout.MDKey(term, gen)
	obj, found, err := s.get(ctx, key)
	if err != nil || !found {
		return translog.MD{}, false, err
	}
	md, err := translog.DecodeMD(s.shard, key, obj.Body)
	return md, err == nil, err
}

// poison creates the poison of (tl, gen) and settles it: Created (it
// landed now), Adopt (a poison is there: ours from a lost response, or
// another successor's), Lost (the lineage term's md landed first: it is on
// the lineage), or Resend (a create with an unknown outcome did not land).
func (s storeIO) poison(ctx context.Context, tl, gen, term int64) (settle.Verdict[translog.MD], error) {
	key := layout.MDKey(tl, gen)
	body, err := translog.EncodePoison(s.shard, tl, gen, term)
	if err != nil {
		return settle.Verdict[translog.MD]{}, err
	}
	step := settle.Step[translog.MD]{
		Key: key, Body: body,
		Decode: func(b []byte) (translog.MD, error) { return translog.DecodeMD(s.shard, key, b) },
		Ours: func(md translog.MD) (bool, string) {
			return md.Kind == translog.KindPoison, "the lineage term's md landed first"
		},
	}
	var v settle.Verdict[translog.MD]
	err = s.retry(ctx, func(ctx context.Context) error {
		var err error
		v, err = create(ctx, s, step)
		return err
	})
	return v, err
}

// readMD reads and decodes one md, retrying store trouble.
func (s storeIO) readMD(ctx context.Context, term, gen int64) (translog.MD, error) {
	key := layout.MDKey(term, gen)
	obj, found, err := s.get(ctx, key)
	if err != nil {
		return translog.MD{}, err
	}
	if !found {
		return translog.MD{}, fmt.Errorf("%w: no md for generation %d of term %d (key %q)", translog.ErrMissingGen, gen, term, key)
	}
	return translog.DecodeMD(s.shard, key, obj.Body)
}

// writeMarker creates want's marker and returns what the key holds: want,
// or an earlier attempt of the same allocation. Another allocation's
// marker for the term fences the chain.
func (s storeIO) writeMarker(ctx context.Context, chain *fence.Chain, want Marker) (Marker, error) {
	key := layout.MarkerKey(want.Term)
	body, err := want.Encode()
	if err != nil {
		return Marker{}, wrapErr("Seal", s.shard, key, want.Term, err)
	}
	var stored Marker
	var fenced error
	step := settle.Step[Marker]{
		Key: key, Body: body,
		Decode: func(b []byte) (Marker, error) { return DecodeMarker(s.shard, key, b) },
		Ours: func(m Marker) (bool, string) {
			return m.Allocation == want.Allocation, fmt.Sprintf("term %d was sealed by allocation %q", want.Term, m.Allocation)
		},
	}
	err = s.retry(ctx, func(ctx context.Context) error {
		v, err := create(ctx, s, step)
		switch v.Action {
		case settle.Created:
			stored = want
		case settle.Adopt:
			// An earlier attempt of this allocation.
			stored = v.Held
		case settle.Resend:
			return errResend("seal marker")
		case settle.Lost:
			fenced = chain.Fence(0, v.Reason)
			return fenced
		}
		return err
	})
	if fenced != nil {
		return Marker{}, fenced
	}
	return stored, wrapErr("Seal", s.shard, key, want.Term, err)
}

// reopen continues a term this allocation sealed before. Safe only if the
// term never opened for writes: a write of its own may still be in flight,
// and a term cannot poison its own lineage.
func (s storeIO) reopen(ctx context.Context, chain *fence.Chain, own Marker, markers map[int64]Marker) (*Result, error) {
	term := chain.Term()
	key := layout.MarkerKey(term)
	if own.Allocation != chain.Allocation() {
		return nil, chain.Fence(0, fmt.Sprintf("term %d was sealed by allocation %q", term, own.Allocation))
	}
	if g := chain.State().Record.Gen; g > own.Restore.Gen {
		return nil, wrapErr("Seal", s.shard, chain.Key(), term, fmt.Errorf("%w: the fence key commits generation %d, past the restore point %d", ErrTermAlreadyOpen, g, own.Restore.Gen))
	}
	gens, err := s.gens(ctx, term)
	if err != nil {
		return nil, wrapErr("Seal", s.shard, layout.MDTermPrefix(term), term, err)
	}
	if len(gens) > 0 {
		return nil, wrapErr("Seal", s.shard, layout.MDKey(term, gens[0]), term, fmt.Errorf("%w: generation %d of this term was written", ErrTermAlreadyOpen, gens[0]))
	}
	chainMs, complete := ChainFrom(markers, own.Restore.Term)
	lin, err := LineageOf(s.shard, chainMs, complete, own.Restore.Gen)
	if err != nil {
		return nil, wrapErr("Seal", s.shard, key, term, err)
	}
	return &Result{Marker: own, Lineage: lin, Reused: true}, nil
}
