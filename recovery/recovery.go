// Package recovery opens a shard for writes under a new term (the fencing
// protocol, section 4): claim the term's fence key, wait out a lease-mode
// predecessor, seal (lineage, poison, marker), hydrate the newest lineage
// checkpoint at or below the restore point, replay the translog after it in
// order, and open the writer at restore.gen + 1.
//
// A term never opens before its seal marker is stored, and the restore
// point is never read before every lower fence key is gone: after that no
// lower term can acknowledge a generation the restore point lacks. Every
// step before the writer opens only reads or writes create-if-absent
// objects the same term and allocation settle on retry, so a failed Open
// can be called again with the same term and allocation.
//
// The fencing mode (enabled or not, per-sync or lease, and the lease
// interval) is the shard's, not the caller's: the first Open stores
// Writer's as seal.FencingKey, and every later Open runs the stored mode
// and interval whatever it asked for (Shard.Fencing reports them), as read
// after its sweep. A successor therefore waits out a lease whenever the
// shard is in lease mode, with the lease its predecessors ran, unless the
// shard has no predecessor at all (the wait is fence.Chain.WaitOutLease,
// the protocol's only one, which RewriteFencing uses too). Only asking for fencing on an unfenced
// shard, or the reverse, is refused (seal.ErrFencingMismatch), before
// anything is claimed. RewriteFencing changes the stored fencing of a shard
// with no live owner, safely (docs/PROTOCOL.md).
package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/steady"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Options configure Open.
type Options struct {
	// Node is where this allocation runs, recorded in the fence key.
	Node string
	// Clock is the steady clock for the lease wait and backoff. Default:
	// the system's.
	Clock steady.Clock
	// Backoff bounds retries of requests without a definite answer.
	Backoff backoff.Policy
	// Parallelism caps concurrent reads and downloads. Default 32.
	Parallelism int
	// BarrierLead is the seal's (seal.Options.BarrierLead). Default 16.
	BarrierLead int

	// LeaseMargin is added to the lease interval a lease-mode successor
	// waits after its sweep (clock drift between steady clocks). Default
	// 1s. The wait applies when the shard's stored mode is Lease, with the
	// stored interval: every term of the shard runs that mode.
	LeaseMargin time.Duration

	// Dir receives the checkpoint's files. Empty, and Files nil: no
	// checkpoint is hydrated and the whole lineage is replayed.
	Dir string
	// Files, when set, receives the checkpoint's files instead of Dir
	// (seal.HydrateOptions.Into; a seal.MemFiles keeps them in memory).
	Files seal.FileSink
	// Apply receives the replayed generations in order. Nil: the
	// translog is read and verified but its ops are dropped.
	Apply func(ctx context.Context, b translog.Batch) error
	// Progress, when set, reports hydration and replay (serialized calls).
	Progress func(Progress)
	// HydrateChunkSize is seal.HydrateOptions.ChunkSize: a checkpoint
	// file larger than it is read in pieces of that size by concurrent
	// range GETs. Default 16 MiB; negative: one stream per file.
	HydrateChunkSize int64
	// AcceptCheckpoint, when set, judges each hydrated checkpoint before
	// it is used (seal.HydrateOptions.Accept): an error refuses it and the
	// next older lineage checkpoint is tried, with a longer replay.
	AcceptCheckpoint func(m seal.Manifest, paths []string) error
	// Lazy, when set, replaces hydration: after the seal, Open calls it
	// with the shard so far (Chain, Seal and Fencing set) and the lineage
	// checkpoints at or below the restore point, newest first (none for
	// a restore point at generation 0). It returns the checkpoint the
	// caller serves from the store itself (nil: none, the whole lineage
	// is replayed); Open replays the translog after it and opens the
	// writer. Dir and Files are unused then. An error aborts the open.
	// The sidecar's warm open answers its caller from here, while the
	// replay goes on.
	Lazy func(ctx context.Context, sh *Shard, cands []seal.CheckpointRef) (*seal.Manifest, error)
	// Resume, when set, says the caller already holds the shard's state up
	// to a generation of the lineage (a hot standby that tailed the log):
	// no checkpoint is hydrated and only the generations after it are
	// replayed. If the sealed lineage does not hold that generation (the
	// caller followed a history a successor cut off), Open fails with
	// ErrResumeOffLineage before opening, and may be called again with the
	// same term and allocation without Resume.
	Resume *Position

	// Writer configures the writer Open returns; Shard, Term,
	// Allocation, StartGen and StartSeqNo are set by Open, and the
	// fencing fields by the shard's stored settings (Writer's own only
	// create them at the shard's first Open).
	Writer translog.Options
}

// Position is a point of a shard's history: every op up to generation Gen
// of the lineage, which lies in term Term, and NextSeqNo the sequence
// number of the first op after it. Gen 0 is the empty history.
type Position struct {
	Term      int64
	Gen       int64
	NextSeqNo int64
}

// ErrResumeOffLineage: the position Open was asked to resume from is not
// on the lineage the seal resolved; the caller's state must be rebuilt.
var ErrResumeOffLineage = errors.New("resume position is not on the sealed lineage")

// Progress reports how far a recovery got.
type Progress struct {
	Phase string // "hydrate" or "replay"
	seal.Progress
	Gens      int64 // generations replayed
	GensTotal int64
}

// Replay sums what was replayed.
type Replay struct {
	From, To int64 // generations replayed, From..To (none when To < From)
	Ops      int64
	Bytes    int64
}

// Shard is an opened shard: the writer and the state it continues from.
type Shard struct {
	Writer *translog.Writer
	Chain  *fence.Chain
	Seal   *seal.Result
	// Fencing is the shard's stored fencing, which the writer runs.
	Fencing seal.Fencing
	// Checkpoint is the hydrated checkpoint, nil when none was used.
	Checkpoint *seal.Manifest
	// Files are where the checkpoint's files were put: local paths under
	// Options.Dir, or the names Options.Files took them under.
	Files []string
	// Refused lists checkpoints passed over and why.
	Refused   []seal.Refusal
	Replay    Replay
	NextSeqNo int64
}

// Restore is the restore point the shard opened at.
func (s *Shard) Restore() seal.RestorePoint { return s.Seal.Marker.Restore }

// Error names the shard, term and step of a failed recovery.
type Error struct {
	Step  string // Settings, Claim, LeaseWait, Seal, Hydrate, Replay, OpenWriter
	Shard string
	Term  int64
	Err   error
}

func (e *Error) Error() string {
	hint := ""
	if blobstore.IsRetryable(e.Err) {
		hint = "; retry Open with the same term and allocation"
	}
	return fmt.Sprintf("recovery of shard %q at term %d failed at %s: %v%s", e.Shard, e.Term, e.Step, e.Err, hint)
}

func (e *Error) Unwrap() error { return e.Err }

// defaults fills the steady clock, the backoff and the lease margin of
// Open and RewriteFencing: the system's clock, the default backoff, 1s.
func defaults(c *steady.Clock, b *backoff.Policy, margin *time.Duration) {
	if *c == nil {
		*c = steady.System()
	}
	*b = b.Or(backoff.Store())
	if *margin <= 0 {
		*margin = time.Second
	}
}

// Open claims term for allocation and opens the shard for writes. See the
// package comment for the steps. A *fence.FencedError means the grant is
// stale or another allocation holds the term; any other error leaves the
// store ready for a retry of the same call.
func Open(ctx context.Context, store *blobstore.Container, shard string, term int64, allocation string, opts Options) (*Shard, error) {
	defaults(&opts.Clock, &opts.Backoff, &opts.LeaseMargin)
	fail := func(step string, err error) (*Shard, error) {
		var fe *fence.FencedError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, &Error{Step: step, Shard: shard, Term: term, Err: err}
	}
	so := seal.Options{Clock: opts.Clock, Backoff: opts.Backoff, Parallelism: opts.Parallelism, BarrierLead: opts.BarrierLead}
	want := seal.FencingOf(opts.Writer)
	// The claim's rounds carry our reads (docs/PROTOCOL.md, section 4, "As
	// built: the claim's rounds"). Beside its first LIST, the settings
	// are read, so a refused mode fences nobody. Beside the LIST that
	// verifies the sweep: the read of the settings that counts (a shard's
	// first open creates them there) and the seal's first round.
	var (
		found   bool
		fencing seal.Fencing
		survey  *seal.Survey
		// The step each hook error belongs to: the claim returns a hook's
		// error as is, and its own errors (a failed LIST) as its own.
		hookErrs  []error
		hookSteps []string
		hookFail  = func(step string, err error) error {
			if err != nil {
				hookErrs, hookSteps = append(hookErrs, err), append(hookSteps, step)
			}
			return err
		}
	)
	hooks := fence.Hooks{
		Before: func(ctx context.Context) error {
			var err error
			_, found, err = seal.PeekFencing(ctx, store, shard, want, so)
			return hookFail("Settings", err)
		},
		Swept: func(ctx context.Context, swept []int64) error {
			var fErr, sErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Read after the sweep: that read is what this term runs
				// and waits for. Every predecessor that may still hold a
				// lease read the settings before its last CAS, which came
				// before our sweep, and a rewrite never lets a later read
				// see a shorter lease than a writer may still hold
				// (docs/PROTOCOL.md, "Rewriting the stored fencing").
				if found {
					fencing, fErr = seal.ShardFencing(ctx, store, shard, want, so)
				} else {
					fencing, fErr = seal.EnsureFencing(ctx, store, shard, want, so)
				}
			}()
			survey, sErr = seal.TakeSurvey(ctx, store, shard, term, swept, so)
			<-done
			if fErr != nil {
				return hookFail("Settings", fErr)
			}
			return hookFail("Seal", sErr)
		},
	}
	in, err := fence.NewInstance(store, shard, allocation, fence.WithClock(opts.Clock), fence.WithBackoff(opts.Backoff), fence.WithNode(opts.Node))
	if err != nil {
		return fail("Claim", err)
	}
	chain, err := in.ClaimWith(ctx, term, hooks)
	if err != nil {
		for i := len(hookErrs) - 1; i >= 0; i-- {
			if errors.Is(err, hookErrs[i]) {
				return fail(hookSteps[i], err)
			}
		}
		return fail("Claim", err)
	}
	// Wait out the lease a predecessor may hold: the incumbent acks
	// without a CAS only while its lease, started before our sweep, runs.
	// A shard with no predecessor has nothing to wait for: no lower fence
	// key was swept, and no lower term stored a seal marker, which every
	// term stores before its writer opens (GC keeps the newest). A lower
	// term that opens its writer after our sweep has no fence key left to
	// renew its lease with, so it acknowledges nothing. The markers are
	// listed after the sweep (the survey), so a concurrent first claimant
	// either shows up or is fenced.
	if !fencing.Disabled && fencing.Mode == translog.Lease {
		if len(chain.Predecessors()) > 0 || survey.LowerMarkers() {
			if err := chain.WaitOutLease(ctx, fencing.LeaseInterval+opts.LeaseMargin); err != nil {
				return fail("LeaseWait", err)
			}
			// The survey was read before the wait: the seal reads again.
			survey = nil
		}
	}
	// The checkpoints are listed beside the seal's walk (reads after the
	// sweep); the candidates are picked once the lineage is known.
	hydrating := opts.Resume == nil && (opts.Dir != "" || opts.Files != nil)
	var ckpts []blobstore.Attrs
	var ckptErr error
	ckptDone := make(chan struct{})
	if hydrating || (opts.Resume == nil && opts.Lazy != nil) {
		go func() {
			defer close(ckptDone)
			ckpts, ckptErr = seal.ListCheckpoints(ctx, store, shard, so)
		}()
	} else {
		close(ckptDone)
	}
	// The checkpoint the survey expects to be the first candidate
	// downloads beside the seal's walk and marker (its manifest GET beside
	// the walk's first round, its files beside the marker's create):
	// reads of immutable, checksummed objects, used only if it is the
	// first candidate of the lineage the seal returns (seal.Hydrate
	// decides, HydrateOptions.Prefetch), its files removed otherwise.
	var pre *seal.Prefetch
	if hydrating && opts.Lazy == nil {
		if ref, ok := survey.Checkpoint(); ok {
			po := seal.HydrateOptions{Options: so, Into: opts.Files, ChunkSize: opts.HydrateChunkSize}
			if opts.Progress != nil {
				po.Progress = func(p seal.Progress) { opts.Progress(Progress{Phase: "hydrate", Progress: p}) }
			}
			pre = seal.PrefetchCheckpoint(ctx, store, shard, ref, opts.Dir, po)
		}
	}
	preTaken := false
	defer func() {
		if !preTaken {
			pre.Discard()
		}
	}()
	// Otherwise (no prefetch, or it fetches another checkpoint than the
	// first candidate), beside the marker's create, the newest candidate's
	// manifest is read (the restore point is known by then); used only if
	// it is still the first candidate once the seal returns.
	var manifests map[string]blobstore.Object
	readManifest := func(ctx context.Context, lin seal.Lineage, restore seal.RestorePoint) {
		<-ckptDone
		if !hydrating || opts.Lazy != nil || ckptErr != nil || restore.Gen == 0 {
			return
		}
		cands := seal.CandidatesOf(ckpts, lin, restore.Gen)
		if len(cands) == 0 || (pre != nil && cands[0] == pre.Ref()) {
			return
		}
		key := seal.ManifestKey(cands[0].Term, cands[0].Gen)
		if obj, err := store.Get(ctx, key); err == nil {
			manifests = map[string]blobstore.Object{key: obj}
		}
	}
	res, err := seal.SealWith(ctx, store, chain, survey, so, readManifest)
	<-ckptDone
	if err != nil {
		return fail("Seal", err)
	}
	sh := &Shard{Chain: chain, Seal: res, Fencing: fencing}
	restore := res.Marker.Restore
	lin := res.Lineage
	base, next := int64(0), int64(0)
	window := opts.Parallelism
	if window <= 0 {
		window = 32
	}
	window = max(window, 64)
	prefetch := func(from int64) *prefetcher {
		return startPrefetch(ctx, store, shard, lin, restore.Term, res.MDs, from, restore.Gen, window, opts)
	}
	var pf *prefetcher
	if r := opts.Resume; r != nil {
		if r.Gen < 0 || r.Gen > restore.Gen || (r.Gen > 0 && !lin.Contains(r.Term, r.Gen)) {
			return fail("Resume", fmt.Errorf("%w: generation %d of term %d, the restore point is generation %d of term %d", ErrResumeOffLineage, r.Gen, r.Term, restore.Gen, restore.Term))
		}
		base, next = r.Gen, r.NextSeqNo
	} else if opts.Lazy != nil {
		if ckptErr != nil {
			return fail("Hydrate", ckptErr)
		}
		var cands []seal.CheckpointRef
		if restore.Gen > 0 {
			cands = seal.CandidatesOf(ckpts, lin, restore.Gen)
		}
		m, err := opts.Lazy(ctx, sh, cands)
		if err != nil {
			return fail("Hydrate", err)
		}
		if m != nil {
			sh.Checkpoint = m
			base, next = m.Gen, m.NextSeqNo
		}
	} else if hydrating && restore.Gen > 0 {
		if ckptErr != nil {
			return fail("Hydrate", ckptErr)
		}
		cands := seal.CandidatesOf(ckpts, lin, restore.Gen)
		// Read the translog after the newest candidate while its files
		// download; a refused candidate means replaying from further back.
		expected := int64(0)
		if len(cands) > 0 {
			expected = cands[0].Gen
		}
		pf = prefetch(expected + 1)
		ho := seal.HydrateOptions{Options: so, Candidates: cands, Accept: opts.AcceptCheckpoint, Into: opts.Files, Manifests: manifests, Prefetch: pre, ChunkSize: opts.HydrateChunkSize}
		preTaken = true
		if opts.Progress != nil {
			ho.Progress = func(p seal.Progress) { opts.Progress(Progress{Phase: "hydrate", Progress: p}) }
		}
		h, err := seal.Hydrate(ctx, store, shard, lin, restore.Gen, opts.Dir, ho)
		if err != nil {
			pf.stop()
			return fail("Hydrate", err)
		}
		sh.Refused = h.Refused
		if h.Manifest != nil {
			sh.Checkpoint, sh.Files = h.Manifest, h.Paths
			base, next = h.Manifest.Gen, h.Manifest.NextSeqNo
		}
		if base != expected {
			pf.stop()
			pf = nil
		}
	}
	if base < restore.Gen && base < lin.Base() {
		if pf != nil {
			pf.stop()
		}
		// Generations below the oldest marker still stored have no term
		// to read them from, and no checkpoint covers them.
		return fail("Replay", fmt.Errorf("%w: generations %d..%d lie below the oldest seal marker still stored and no lineage checkpoint covers them (%d refused)", seal.ErrLineageTruncated, base+1, lin.Base(), len(sh.Refused)))
	}
	if pf == nil {
		pf = prefetch(base + 1)
	}
	sh.Replay, next, err = pf.replay(ctx, shard, next, opts)
	if err != nil {
		return fail("Replay", err)
	}
	sh.NextSeqNo = next
	wo := fencing.Apply(opts.Writer)
	// From the chain: an unfenced writer takes its identity from here.
	wo.Shard, wo.Term, wo.Allocation = chain.Shard(), chain.Term(), chain.Allocation()
	wo.StartGen, wo.StartSeqNo = restore.Gen+1, next
	if wo.Clock == nil {
		wo.Clock = opts.Clock
	}
	w, err := translog.Open(ctx, store, chain, wo)
	if err != nil {
		return fail("OpenWriter", err)
	}
	sh.Writer = w
	return sh, nil
}
