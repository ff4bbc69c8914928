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
// Writer's as layout.FencingKey, and every later Open runs the stored mode
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
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Options configure Open.
type Options struct {
	// Node is where this allocation runs, recorded in the fence key.
	Node string
	// Clock is the steady clock for the lease wait and backoff. Default:
	// the system's.
	Clock clock.Clock
	// Backoff bounds retries of requests without a definite answer.
	Backoff backoff.Policy
	// Parallelism caps concurrent reads and downloads of the seal and
	// the hydration (seal.Options.Parallelism). Default 32. The replay
	// reads ahead max(Parallelism, 64) generations.
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
	// Step is Open's Settings, Claim, LeaseWait, Seal, Resume, Hydrate,
	// Replay or OpenWriter, or RewriteFencing's RewriteSettings, Claim or
	// LeaseWait.
	Step  string
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

// stepError is the error of a failed Open or RewriteFencing at step: an
// *Error, or a *fence.FencedError as is.
func stepError(step, shard string, term int64, err error) error {
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Step: step, Shard: shard, Term: term, Err: err}
}

// defaults fills the steady clock, the backoff and the lease margin of
// Open and RewriteFencing: the system's clock, the default backoff, 1s.
func defaults(c *clock.Clock, b *backoff.Policy, margin *time.Duration) {
	if *c == nil {
		*c = clock.System()
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
	o := &opener{store: store, shard: shard, term: term, opts: opts, mode: restoreModeOf(opts),
		so:   seal.Options{Clock: opts.Clock, Backoff: opts.Backoff, Parallelism: opts.Parallelism, BarrierLead: opts.BarrierLead},
		want: seal.FencingOf(opts.Writer)}
	defer o.discardPrefetch()
	chain, err := o.claim(ctx, allocation)
	if err != nil {
		return nil, err
	}
	if err := o.waitOutLease(ctx, chain); err != nil {
		return nil, err
	}
	res, err := o.seal(ctx, chain)
	if err != nil {
		return nil, err
	}
	sh := &Shard{Chain: chain, Seal: res, Fencing: o.fencing}
	st, err := o.restore(ctx, sh)
	if err != nil {
		return nil, err
	}
	restore, lin := res.Marker.Restore, res.Lineage
	if err := checkReplayable(st.base, restore, lin, len(sh.Refused)); err != nil {
		if st.pf != nil {
			st.pf.stop()
		}
		return nil, o.fail("Replay", err)
	}
	if st.pf == nil {
		st.pf = o.prefetch(ctx, res, st.base+1)
	}
	sh.Replay, sh.NextSeqNo, err = st.pf.replay(ctx, shard, st.next, opts)
	if err != nil {
		return nil, o.fail("Replay", err)
	}
	wo := writerOptions(opts.Writer, o.fencing, chain.Shard(), chain.Term(), chain.Allocation(), restore, sh.NextSeqNo, opts.Clock)
	w, err := translog.Open(ctx, store, chain, wo)
	if err != nil {
		return nil, o.fail("OpenWriter", err)
	}
	sh.Writer = w
	return sh, nil
}
