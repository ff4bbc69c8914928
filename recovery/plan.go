package recovery

import (
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// The decisions of an Open, as pure functions over the options and what
// was read (the translog habit: pipeline.go decides, writer.go drives).
// Open (recovery.go and open.go) is the driver: it runs the claim, the
// seal, the downloads and the replay, and asks these what to do next.

// restoreMode is where an open takes the state its replay continues from.
type restoreMode int

const (
	// restoreReplay: no checkpoint; the whole lineage is replayed (no
	// Dir, Files, Lazy or Resume).
	restoreReplay restoreMode = iota
	// restoreResume: the caller holds the state up to Options.Resume.
	restoreResume
	// restoreLazy: the caller serves a checkpoint itself (Options.Lazy).
	restoreLazy
	// restoreHydrate: the newest acceptable lineage checkpoint is
	// downloaded to Options.Dir or Options.Files.
	restoreHydrate
)

func (m restoreMode) String() string {
	switch m {
	case restoreResume:
		return "resume"
	case restoreLazy:
		return "lazy"
	case restoreHydrate:
		return "hydrate"
	}
	return "replay"
}

// restoreModeOf picks the restore branch: Resume wins over Lazy, and Lazy
// over a Dir or Files.
func restoreModeOf(opts Options) restoreMode {
	switch {
	case opts.Resume != nil:
		return restoreResume
	case opts.Lazy != nil:
		return restoreLazy
	case opts.Dir != "" || opts.Files != nil:
		return restoreHydrate
	}
	return restoreReplay
}

// listsCheckpoints says whether the checkpoints are listed beside the
// seal's walk: only a branch that picks one needs them.
func (m restoreMode) listsCheckpoints() bool { return m == restoreLazy || m == restoreHydrate }

// prefetches says whether the checkpoint the seal's survey expects starts
// downloading beside the seal, and whether the newest candidate's manifest
// is read beside the marker's create: only when Open hydrates it itself.
func (m restoreMode) prefetches() bool { return m == restoreHydrate }

// needsLeaseWait says whether a successor waits out a lease after its
// sweep: in lease mode, unless the shard has no predecessor at all (no
// lower fence key was swept and the survey listed no lower seal marker).
func needsLeaseWait(f seal.Fencing, swept bool, lowerMarkers bool) bool {
	return !f.Disabled && f.Mode == translog.Lease && (swept || lowerMarkers)
}

// manifestAhead is the manifest read beside the marker's create: the
// newest candidate's at the restore point the marker records, unless the
// branch does not hydrate, the listing failed, the restore point is
// generation 0, there is no candidate, or the prefetch already fetches
// that one (prefetched). "" when none is read.
func manifestAhead(m restoreMode, listed []blobstore.Attrs, listErr error, lin seal.Lineage, restore seal.RestorePoint, prefetched *seal.CheckpointRef) string {
	if !m.prefetches() || listErr != nil || restore.Gen == 0 {
		return ""
	}
	cands := seal.CandidatesOf(listed, lin, restore.Gen)
	if len(cands) == 0 || (prefetched != nil && cands[0] == *prefetched) {
		return ""
	}
	return layout.ManifestKey(cands[0].Term, cands[0].Gen)
}

// lazyCandidates are the checkpoints a Lazy open is offered: the lineage
// checkpoints at or below the restore point, newest first; none (nil) for
// a restore point at generation 0.
func lazyCandidates(listed []blobstore.Attrs, lin seal.Lineage, restore seal.RestorePoint) []seal.CheckpointRef {
	if restore.Gen <= 0 {
		return nil
	}
	return seal.CandidatesOf(listed, lin, restore.Gen)
}

// expectedBase is the generation the hydration is expected to restore:
// the newest candidate's, 0 when there is none. The translog after it is
// read while the files download.
func expectedBase(cands []seal.CheckpointRef) int64 {
	if len(cands) == 0 {
		return 0
	}
	return cands[0].Gen
}

// checkResume refuses a Resume position off the sealed lineage: below
// generation 0, past the restore point, or at a generation the lineage
// holds in another term.
func checkResume(r Position, restore seal.RestorePoint, lin seal.Lineage) error {
	if r.Gen < 0 || r.Gen > restore.Gen || (r.Gen > 0 && !lin.Contains(r.Term, r.Gen)) {
		return fmt.Errorf("%w: generation %d of term %d, the restore point is generation %d of term %d", ErrResumeOffLineage, r.Gen, r.Term, restore.Gen, restore.Term)
	}
	return nil
}

// checkReplayable refuses a replay from base that needs generations below
// the oldest seal marker still stored: no term is left to read them from,
// and no checkpoint covers them (refused counts the checkpoints passed
// over).
func checkReplayable(base int64, restore seal.RestorePoint, lin seal.Lineage, refused int) error {
	if base < restore.Gen && base < lin.Base() {
		return fmt.Errorf("%w: generations %d..%d lie below the oldest seal marker still stored and no lineage checkpoint covers them (%d refused)", seal.ErrLineageTruncated, base+1, lin.Base(), refused)
	}
	return nil
}

// replayWindow is how many generations the replay reads ahead: at least
// 64, more with a larger Parallelism.
func replayWindow(parallelism int) int { return max(parallelism, 64) }

// writerOptions are the options of the writer an Open returns: the
// caller's, run under the shard's stored fencing, with the chain's
// identity (an unfenced writer takes it from there) and starting after the
// restore point at sequence number next.
func writerOptions(o translog.Options, f seal.Fencing, shard string, term int64, allocation string, restore seal.RestorePoint, next int64, clock clock.Clock) translog.Options {
	wo := f.Apply(o)
	wo.Shard, wo.Term, wo.Allocation = shard, term, allocation
	wo.StartGen, wo.StartSeqNo = restore.Gen+1, next
	if wo.Clock == nil {
		wo.Clock = clock
	}
	return wo
}

// hookSteps remembers which step of an Open each error a claim hook
// returned belongs to: the claim returns a hook's error as is, and its
// own (a failed LIST) as its own. The hooks run one at a time.
type hookSteps struct {
	errs  []error
	steps []string
}

// note records err (when set) as step's and returns it.
func (h *hookSteps) note(step string, err error) error {
	if err != nil {
		h.errs, h.steps = append(h.errs, err), append(h.steps, step)
	}
	return err
}

// stepOf names the step of an error the claim returned: the step of the
// latest hook error it wraps, else claim.
func (h *hookSteps) stepOf(err error, claim string) string {
	for i := len(h.errs) - 1; i >= 0; i-- {
		if errors.Is(err, h.errs[i]) {
			return h.steps[i]
		}
	}
	return claim
}
