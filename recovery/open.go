package recovery

import (
	"context"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/seal"
)

// opener is the driver of one Open: it carries out the steps in the order
// the package comment gives, runs the reads that go beside them, and asks
// plan.go what to do where there is a choice.
type opener struct {
	store *blobstore.Container
	shard string
	term  int64
	opts  Options
	mode  restoreMode
	so    seal.Options
	want  seal.Fencing // the fencing the caller asked for

	// Set by the claim's Swept hook (its last run is the one that counts).
	fencing seal.Fencing
	survey  *seal.Survey

	ckpts    checkpointList
	pre      *seal.Prefetch
	preTaken bool // seal.Hydrate took pre over; else Open discards it
	// manifests is the newest candidate's manifest, read beside the
	// marker's create (manifestAhead).
	manifests map[string]blobstore.Object
}

// fail names the step of a failed open; a fencing error goes out as is.
func (o *opener) fail(step string, err error) error {
	return stepError(step, o.shard, o.term, err)
}

// claim claims the term. The claim's rounds carry our reads
// (docs/PROTOCOL.md, section 4, "As built: the claim's rounds"). Beside
// its first LIST, the settings are read, so a refused mode fences nobody.
// Beside the LIST that verifies the sweep: the read of the settings that
// counts (a shard's first open creates them there) and the seal's first
// round.
func (o *opener) claim(ctx context.Context, allocation string) (*fence.Chain, error) {
	var found bool
	var steps hookSteps
	hooks := fence.Hooks{
		Before: func(ctx context.Context) error {
			var err error
			_, found, err = seal.PeekFencing(ctx, o.store, o.shard, o.want, o.so)
			return steps.note("Settings", err)
		},
		Swept: func(ctx context.Context, swept []int64) error {
			fErr, sErr := o.afterSweep(ctx, found, swept)
			if fErr != nil {
				return steps.note("Settings", fErr)
			}
			return steps.note("Seal", sErr)
		},
	}
	in, err := fence.NewInstance(o.store, o.shard, allocation, fence.WithClock(o.opts.Clock), fence.WithBackoff(o.opts.Backoff), fence.WithNode(o.opts.Node))
	if err != nil {
		return nil, o.fail("Claim", err)
	}
	chain, err := in.ClaimWith(ctx, o.term, hooks)
	if err != nil {
		return nil, o.fail(steps.stepOf(err, "Claim"), err)
	}
	return chain, nil
}

// afterSweep reads the settings and takes the seal's survey, side by side.
// The settings are read after the sweep: that read is what this term runs
// and waits for. Every predecessor that may still hold a lease read the
// settings before its last CAS, which came before our sweep, and a rewrite
// never lets a later read see a shorter lease than a writer may still hold
// (docs/PROTOCOL.md, "Rewriting the stored fencing"). found says the
// settings exist (else the shard's first open creates them).
func (o *opener) afterSweep(ctx context.Context, found bool, swept []int64) (fErr, sErr error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if found {
			o.fencing, fErr = seal.ShardFencing(ctx, o.store, o.shard, o.want, o.so)
		} else {
			o.fencing, fErr = seal.EnsureFencing(ctx, o.store, o.shard, o.want, o.so)
		}
	}()
	o.survey, sErr = seal.TakeSurvey(ctx, o.store, o.shard, o.term, swept, o.so)
	<-done
	return fErr, sErr
}

// waitOutLease waits out the lease a predecessor may hold: the incumbent
// acks without a CAS only while its lease, started before our sweep, runs.
// A shard with no predecessor has nothing to wait for: no lower fence key
// was swept, and no lower term stored a seal marker, which every term
// stores before its writer opens (GC keeps the newest). A lower term that
// opens its writer after our sweep has no fence key left to renew its
// lease with, so it acknowledges nothing. The markers are listed after the
// sweep (the survey), so a concurrent first claimant either shows up or is
// fenced.
func (o *opener) waitOutLease(ctx context.Context, chain *fence.Chain) error {
	if !needsLeaseWait(o.fencing, len(chain.Predecessors()) > 0, o.survey.LowerMarkers()) {
		return nil
	}
	if err := chain.WaitOutLease(ctx, o.fencing.LeaseInterval+o.opts.LeaseMargin); err != nil {
		return o.fail("LeaseWait", err)
	}
	// The survey was read before the wait: the seal reads again.
	o.survey = nil
	return nil
}

// seal seals the term. The checkpoints are listed beside the seal's walk
// (reads after the sweep); the candidates are picked once the lineage is
// known. The checkpoint the survey expects to be the first candidate
// downloads beside the seal's walk and marker (its manifest GET beside the
// walk's first round, its files beside the marker's create): reads of
// immutable, checksummed objects, used only if it is the first candidate
// of the lineage the seal returns (seal.Hydrate decides,
// HydrateOptions.Prefetch), its files removed otherwise. Else, beside the
// marker's create, the newest candidate's manifest is read (the restore
// point is known by then); used only if it is still the first candidate
// once the seal returns.
func (o *opener) seal(ctx context.Context, chain *fence.Chain) (*seal.Result, error) {
	if o.mode.listsCheckpoints() {
		o.ckpts.start(ctx, o.store, o.shard, o.so)
	} else {
		o.ckpts.skip()
	}
	if o.mode.prefetches() {
		if ref, ok := o.survey.Checkpoint(); ok {
			o.pre = seal.PrefetchCheckpoint(ctx, o.store, o.shard, ref, o.opts.Dir, o.hydrateOptions())
		}
	}
	res, err := seal.SealWith(ctx, o.store, chain, o.survey, o.so, o.readManifest)
	o.ckpts.wait()
	if err != nil {
		return nil, o.fail("Seal", err)
	}
	return res, nil
}

// readManifest runs beside the marker's create (seal.SealWith's beside).
func (o *opener) readManifest(ctx context.Context, lin seal.Lineage, restore seal.RestorePoint) {
	o.ckpts.wait()
	var prefetched *seal.CheckpointRef
	if o.pre != nil {
		ref := o.pre.Ref()
		prefetched = &ref
	}
	key := manifestAhead(o.mode, o.ckpts.items, o.ckpts.err, lin, restore, prefetched)
	if key == "" {
		return
	}
	if obj, err := o.store.Get(ctx, key); err == nil {
		o.manifests = map[string]blobstore.Object{key: obj}
	}
}

// discardPrefetch removes the prefetched checkpoint unless the hydration
// took it over.
func (o *opener) discardPrefetch() {
	if !o.preTaken {
		o.pre.Discard()
	}
}

// hydrateOptions are the options of the checkpoint's download: the
// prefetch's, to which the hydration adds its candidates.
func (o *opener) hydrateOptions() seal.HydrateOptions {
	ho := seal.HydrateOptions{Options: o.so, Into: o.opts.Files, ChunkSize: o.opts.HydrateChunkSize}
	if o.opts.Progress != nil {
		ho.Progress = func(p seal.Progress) { o.opts.Progress(Progress{Phase: "hydrate", Progress: p}) }
	}
	return ho
}

// replayStart is where the replay continues from: the state up to generation
// base, with next the sequence number after it, and a prefetch of the
// translog after base when one already runs.
type replayStart struct {
	base, next int64
	pf         *prefetcher
}

// restore takes the state the replay continues from, by the branch the
// options pick (restoreModeOf).
func (o *opener) restore(ctx context.Context, sh *Shard) (replayStart, error) {
	res := sh.Seal
	restore := res.Marker.Restore
	switch o.mode {
	case restoreResume:
		r := o.opts.Resume
		if err := checkResume(*r, restore, res.Lineage); err != nil {
			return replayStart{}, o.fail("Resume", err)
		}
		return replayStart{base: r.Gen, next: r.NextSeqNo}, nil
	case restoreLazy:
		if o.ckpts.err != nil {
			return replayStart{}, o.fail("Hydrate", o.ckpts.err)
		}
		m, err := o.opts.Lazy(ctx, sh, lazyCandidates(o.ckpts.items, res.Lineage, restore))
		if err != nil {
			return replayStart{}, o.fail("Hydrate", err)
		}
		if m == nil {
			return replayStart{}, nil
		}
		sh.Checkpoint = m
		return replayStart{base: m.Gen, next: m.NextSeqNo}, nil
	case restoreHydrate:
		if restore.Gen > 0 {
			return o.hydrate(ctx, sh)
		}
	}
	return replayStart{}, nil
}

// hydrate downloads the newest acceptable lineage checkpoint at or below
// the restore point. The translog after the newest candidate is read while
// its files download; a refused candidate means replaying from further
// back (the prefetch is stopped, and the replay starts its own).
func (o *opener) hydrate(ctx context.Context, sh *Shard) (replayStart, error) {
	if o.ckpts.err != nil {
		return replayStart{}, o.fail("Hydrate", o.ckpts.err)
	}
	res := sh.Seal
	restore, lin := res.Marker.Restore, res.Lineage
	cands := seal.CandidatesOf(o.ckpts.items, lin, restore.Gen)
	expected := expectedBase(cands)
	st := replayStart{pf: o.prefetch(ctx, res, expected+1)}
	ho := o.hydrateOptions()
	ho.Candidates, ho.Accept, ho.Manifests, ho.Prefetch = cands, o.opts.AcceptCheckpoint, o.manifests, o.pre
	o.preTaken = true
	h, err := seal.Hydrate(ctx, o.store, o.shard, lin, restore.Gen, o.opts.Dir, ho)
	if err != nil {
		st.pf.stop()
		return replayStart{}, o.fail("Hydrate", err)
	}
	sh.Refused = h.Refused
	if h.Manifest != nil {
		sh.Checkpoint, sh.Files = h.Manifest, h.Paths
		st.base, st.next = h.Manifest.Gen, h.Manifest.NextSeqNo
	}
	if st.base != expected {
		st.pf.stop()
		st.pf = nil
	}
	return st, nil
}

// prefetch starts reading the lineage's translog from generation from up
// to the restore point, ahead of its replay.
func (o *opener) prefetch(ctx context.Context, res *seal.Result, from int64) *prefetcher {
	restore := res.Marker.Restore
	return startPrefetch(ctx, o.store, o.shard, res.Lineage, restore.Term, res.MDs, from, restore.Gen, replayWindow(o.opts.Parallelism), o.opts)
}

// checkpointList is the LIST of the shard's checkpoints, run beside the
// seal; wait returns once it ended (at once when it was skipped).
type checkpointList struct {
	done  chan struct{}
	items []blobstore.Attrs
	err   error
}

func (c *checkpointList) start(ctx context.Context, store *blobstore.Container, shard string, so seal.Options) {
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		c.items, c.err = seal.ListCheckpoints(ctx, store, shard, so)
	}()
}

func (c *checkpointList) skip() {
	c.done = make(chan struct{})
	close(c.done)
}

func (c *checkpointList) wait() { <-c.done }
