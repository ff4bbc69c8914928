package seal

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// GCPolicy says how much history GC keeps.
type GCPolicy struct {
	// RetainCheckpoints is how many lineage checkpoints to keep, newest
	// first. Default 2; at least 1.
	RetainCheckpoints int
	// RetainGens keeps this many generations of translog below the
	// newest complete checkpoint. Default 0.
	RetainGens int64
	// RetainMarkers keeps this many chain markers beyond those the kept
	// checkpoints and translog need. Default 1.
	RetainMarkers int
}

func (p GCPolicy) withDefaults() GCPolicy {
	if p.RetainCheckpoints < 1 {
		p.RetainCheckpoints = 2
	}
	if p.RetainGens < 0 {
		p.RetainGens = 0
	}
	if p.RetainMarkers < 1 {
		p.RetainMarkers = 1
	}
	return p
}

// GCInput is what PlanGC decides on: the owner's lineage and every key read.
type GCInput struct {
	Owner   int64 // the term collecting; its own newest history stays
	Lineage Lineage
	MDs     []MDInfo
	Data    []layout.TermGen // every data object
	// Checkpoints are the manifests, newest gen first; Complete marks
	// those whose files were all listed with the manifest's sizes.
	Checkpoints []CheckpointInfo
	Complete    map[string]bool
	Files       map[layout.TermGen][]string // file keys by checkpoint
	Markers     []int64                     // every readable marker's term
	Policy      GCPolicy
}

// PlanGC decides what GC deletes. It never deletes a poison, an md or
// checkpoint it could not read, anything of the owner's term or above that
// is not below the translog cut, a marker the kept history needs, or
// anything at or above the newest complete checkpoint on the lineage.
func PlanGC(in GCInput) []Object {
	p := gcPlan{in: in, keptKey: map[string]bool{}}
	p.kept, p.cut, p.oldest = gcBase(in)
	for _, c := range p.kept {
		p.keptKey[c.Key] = true
	}
	p.translog()
	p.data()
	p.checkpoints()
	p.strayFiles()
	p.markers()
	return p.out
}

// gcPlan is PlanGC's state: the base it keeps and what it deletes so far,
// in the order it decides (md, data, checkpoints, stray files, markers).
type gcPlan struct {
	in      GCInput
	kept    []CheckpointInfo // the retained lineage checkpoints, newest first
	keptKey map[string]bool
	cut     int64 // md with gen <= cut on the lineage are deleted
	oldest  int64 // the oldest kept checkpoint's generation
	out     []Object
}

// gcBase picks the base: the newest complete lineage checkpoints, up to
// the retention, newest first. Translog at or below the newest one's
// generation minus RetainGens goes (cut); oldest is the oldest kept one's
// generation. Both are 0 when none is kept.
func gcBase(in GCInput) (kept []CheckpointInfo, cut, oldest int64) {
	for _, c := range in.Checkpoints {
		if c.Err == "" && c.OnLineage && in.Complete[c.Key] && len(kept) < in.Policy.RetainCheckpoints {
			kept = append(kept, c)
		}
	}
	if len(kept) > 0 {
		cut = kept[0].Gen - in.Policy.RetainGens
		oldest = kept[len(kept)-1].Gen
	}
	return kept, cut, oldest
}

func (p *gcPlan) isOrphan(term, gen int64) bool {
	return term < p.in.Owner && !p.in.Lineage.Contains(term, gen)
}

// translog deletes orphan md and lineage md at or below the cut.
func (p *gcPlan) translog() {
	lin := p.in.Lineage
	for _, md := range p.in.MDs {
		switch {
		case md.Err != "" || md.Poison:
			// Never a poison: a zombie's retried md create could then
			// land and complete an ack no restore point holds.
		case p.isOrphan(md.Term, md.Gen):
			p.out = append(p.out, Object{Key: md.Key, Reason: "orphan md (" + orphanReason(lin, md.Term) + ")"})
		case lin.Contains(md.Term, md.Gen) && md.Gen <= p.cut:
			p.out = append(p.out, Object{Key: md.Key, Reason: fmt.Sprintf("translog at or below generation %d, covered by a checkpoint", p.cut)})
		}
	}
}

// data deletes the payloads of what translog deletes, and keeps those of
// an unreadable md or a poison.
func (p *gcPlan) data() {
	mdKind := map[layout.TermGen]MDInfo{}
	for _, md := range p.in.MDs {
		mdKind[layout.TermGen{Term: md.Term, Gen: md.Gen}] = md
	}
	for _, d := range p.in.Data {
		md, hasMD := mdKind[d]
		key := layout.DataKey(d.Term, d.Gen)
		switch {
		case hasMD && (md.Err != "" || md.Poison):
			// Its md is unreadable, or a poison sits there: keep.
		case p.isOrphan(d.Term, d.Gen):
			p.out = append(p.out, Object{Key: key, Reason: "payload of an orphan generation"})
		case p.in.Lineage.Contains(d.Term, d.Gen) && d.Gen <= p.cut:
			p.out = append(p.out, Object{Key: key, Reason: fmt.Sprintf("translog payload at or below generation %d", p.cut)})
		}
	}
}

// checkpoints deletes orphan checkpoints and those older than the kept
// ones, each with its files.
func (p *gcPlan) checkpoints() {
	for _, c := range p.in.Checkpoints {
		switch {
		case c.Err != "" || p.keptKey[c.Key] || c.Term >= p.in.Owner && !c.OnLineage:
		case !c.OnLineage:
			p.dropCheckpoint(c, "orphan checkpoint ("+orphanReason(p.in.Lineage, c.Term)+")")
		case len(p.kept) > 0 && c.Gen < p.kept[len(p.kept)-1].Gen:
			p.dropCheckpoint(c, fmt.Sprintf("beyond the %d retained checkpoints", len(p.kept)))
		}
	}
}

func (p *gcPlan) dropCheckpoint(c CheckpointInfo, reason string) {
	p.out = append(p.out, Object{Key: c.Key, Reason: reason})
	for _, f := range p.in.Files[layout.TermGen{Term: c.Term, Gen: c.Gen}] {
		p.out = append(p.out, Object{Key: f, Reason: "file of " + c.Key})
	}
}

// strayFiles deletes the files of a lower term's checkpoint whose manifest
// never landed. A lower term's publish can no longer complete usefully:
// if its manifest lands after this, the missing files get it refused.
func (p *gcPlan) strayFiles() {
	hasManifest := map[layout.TermGen]bool{}
	for _, c := range p.in.Checkpoints {
		hasManifest[layout.TermGen{Term: c.Term, Gen: c.Gen}] = true
	}
	var strays []layout.TermGen
	for k := range p.in.Files {
		if !hasManifest[k] && k.Term < p.in.Owner {
			strays = append(strays, k)
		}
	}
	sort.Slice(strays, func(i, j int) bool { return strays[i].Less(strays[j]) })
	for _, k := range strays {
		for _, f := range p.in.Files[k] {
			p.out = append(p.out, Object{Key: f, Reason: "file of a checkpoint whose manifest never landed"})
		}
	}
}

// markers deletes the chain markers past those the kept history needs
// (markersNeeded) and the lower markers off the chain.
func (p *gcPlan) markers() {
	lin, owner := p.in.Lineage, p.in.Owner
	need := markersNeeded(lin, len(p.kept) > 0, p.cut, p.oldest, owner) + p.in.Policy.RetainMarkers
	onChain := map[int64]bool{}
	for i, m := range lin.Chain {
		onChain[m.Term] = true
		if i >= need {
			p.out = append(p.out, Object{Key: layout.MarkerKey(m.Term), Reason: "seal marker older than every kept checkpoint"})
		}
	}
	for _, t := range p.in.Markers {
		if t < owner && !onChain[t] {
			p.out = append(p.out, Object{Key: layout.MarkerKey(t), Reason: "seal marker off the chain (a successor that lost the race)"})
		}
	}
}

// markersNeeded is how many chain markers, newest first, the kept history
// needs: every one whose term's history reaches the oldest kept checkpoint
// or the translog kept, or is of the owner's term or above (all of them
// when no checkpoint is kept).
func markersNeeded(lin Lineage, kept bool, cut, oldest, owner int64) int {
	need := 0
	for i, m := range lin.Chain {
		r := lin.Ranges[len(lin.Ranges)-1-i]
		if !kept || r.To > cut || r.To >= oldest || m.Term >= owner {
			need = i + 1
		}
	}
	return need
}

func (st *shardState) planInput(owner int64, p GCPolicy) GCInput {
	in := GCInput{Owner: owner, Lineage: st.lin, MDs: st.mds, Data: st.data, Checkpoints: st.ckpts, Files: st.files, Policy: p, Complete: map[string]bool{}}
	for t := range st.markers {
		in.Markers = append(in.Markers, t)
	}
	sort.Slice(in.Markers, func(i, j int) bool { return in.Markers[i] > in.Markers[j] })
	for _, c := range st.ckpts {
		// Complete: the manifest read and as many files listed as it
		// names. Sizes are checked by Hydrate; a shorter listing means a
		// file is gone and the checkpoint cannot be a base.
		if c.Err == "" && len(st.files[layout.TermGen{Term: c.Term, Gen: c.Gen}]) == c.Files {
			in.Complete[c.Key] = true
		}
	}
	return in
}

// GCOptions configure GC.
type GCOptions struct {
	Options
	Policy GCPolicy
	// Freshness is how long a successful CAS proves ownership. Default
	// 10s. Deletions stop once it has run out.
	Freshness time.Duration
	// LastCAS is the owner's last successful CAS, when known; otherwise GC
	// proves ownership with a CAS of its own.
	LastCAS Proof
	// DryRun plans and reports without deleting (and without a CAS).
	DryRun bool
}

// GCResult is what GC planned and deleted.
type GCResult struct {
	Planned []Object
	Deleted []string
}

// GC deletes what PlanGC selects on behalf of the chain's term: orphans,
// translog below the newest complete checkpoint minus retention, and
// markers and checkpoints beyond retention. It runs only on the current
// owner after a successful CAS within the freshness interval; an
// unreadable fence skips GC (fail closed), and deletions stop when the
// interval runs out. Poisons are never deleted.
func GC(ctx context.Context, store *blobstore.Container, chain *fence.Chain, opts GCOptions) (*GCResult, error) {
	o := opts.Options.withDefaults()
	if opts.Freshness <= 0 {
		opts.Freshness = 10 * time.Second
	}
	s := storeIO{store: store, shard: chain.Shard(), opts: o}
	term := chain.Term()
	fail := func(key string, err error) (*GCResult, error) { return nil, wrapErr("GC", s.shard, key, term, err) }
	if err := chain.Err(); err != nil {
		return nil, err
	}
	proof := opts.LastCAS
	if !opts.DryRun && !fresh(o.Clock.Now(), proof, opts.Freshness) {
		sent := o.Clock.Now()
		if _, err := chain.Advance(ctx, chain.State().Record.Gen); err != nil {
			return fail(chain.Key(), fmt.Errorf("%w: the ownership CAS failed, nothing deleted: %w", ErrNotFresh, err))
		}
		proof = Proof{At: sent, Valid: true}
	}
	st, err := s.gather(ctx, false)
	if err != nil {
		return fail("", err)
	}
	if st.top != term {
		if st.top > term {
			return fail(layout.MarkerKey(st.top), fmt.Errorf("%w: term %d sealed the shard", ErrSuperseded, st.top))
		}
		return fail(layout.MarkerKey(term), fmt.Errorf("%w: this term has no seal marker; seal before collecting", fence.ErrInvalidArgument))
	}
	res := &GCResult{Planned: PlanGC(st.planInput(term, opts.Policy.withDefaults()))}
	if opts.DryRun {
		return res, nil
	}
	for _, ob := range res.Planned {
		if !fresh(o.Clock.Now(), proof, opts.Freshness) {
			return res, wrapErr("GC", s.shard, ob.Key, term, fmt.Errorf("%w: stopped after %d of %d deletions; run GC again", ErrNotFresh, len(res.Deleted), len(res.Planned)))
		}
		if err := s.delete(ctx, ob.Key); err != nil {
			return res, wrapErr("GC", s.shard, ob.Key, term, err)
		}
		res.Deleted = append(res.Deleted, ob.Key)
	}
	return res, nil
}
