package ha

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// tailer is a hot standby's view of the log: the master it applies to, the
// lineage it follows and how far it got. It only reads the store.
//
// It applies generations strictly in order and only those whose md exists:
// any md of the lineage term present when a successor seals is part of the
// successor's restore point (the seal includes every contiguous md it
// finds and poisons the first gap), so what a standby applied is never
// lost by a later promotion. The one exception, a successor that sealed
// from an older lineage while a competing term was still writing, shows as
// a new lineage that does not hold the standby's position; the standby then
// reloads from the newest snapshot.
type tailer struct {
	m            *master.Master
	lin          seal.Lineage
	top          int64 // newest marker term on the lineage
	bootstrapped bool

	mu  sync.Mutex
	pos recovery.Position
	// caughtUp is the steady time the standby last held everything it
	// had seen of the log (a look that found nothing new, or an apply
	// that reached the tip last read).
	caughtUp      int64
	tipSeq        int64 // the log's next sequence number as last seen
	tipLooked     int64
	markersLooked int64
}

func (t *tailer) status(clock clock.Clock) (pos recovery.Position, boot bool, entries int64, lag time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tipSeq > t.pos.NextSeqNo {
		entries = t.tipSeq - t.pos.NextSeqNo
		if t.caughtUp > 0 {
			lag = time.Duration(clock.Now() - t.caughtUp)
		}
	}
	return t.pos, t.bootstrapped, entries, lag
}

func (t *tailer) position() recovery.Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pos
}

// runStandby tails the log until promoted or elected (true) or ctx ends.
// A log it cannot apply stops it for good (the node turns failed); store
// trouble is retried.
func (n *Node) runStandby(ctx context.Context) (bool, error) {
	var fatal error
	for {
		if fatal == nil {
			if elected, err := n.maybeElect(ctx); elected {
				return true, nil
			} else if err != nil && ctx.Err() == nil {
				n.log.Warn("standby: the election's claim failed; trying again", "err", err)
			}
			progressed, err := n.standbyStep(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return false, nil
			case err != nil && !retryable(err):
				fatal = fmt.Errorf("%w: the standby cannot apply the log: %w", master.ErrLogFailed, err)
				n.setRole(RoleFailed, fatal)
				n.log.Error("standby stopped: the log cannot be applied", "err", err)
			case err != nil:
				n.log.Warn("standby: reading the log failed; retrying", "err", err)
			}
			if progressed {
				select {
				case req := <-n.reqs:
					if done, err := n.standbyRequest(ctx, req, fatal); done {
						return true, err
					}
				default:
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return false, nil
		case req := <-n.reqs:
			if done, err := n.standbyRequest(ctx, req, fatal); done {
				return true, err
			}
		case <-n.opts.Clock.After(n.opts.PollInterval):
		}
	}
}

// standbyRequest answers a request made to a standby; done when promoted.
func (n *Node) standbyRequest(ctx context.Context, req request, fatal error) (bool, error) {
	if !req.promote {
		req.out <- result{err: fmt.Errorf("%w: a standby takes no snapshot; the primary does", master.ErrNotPrimary)}
		return false, nil
	}
	if fatal != nil {
		req.out <- result{err: fmt.Errorf("the standby cannot be promoted from its own state (%w); restart it as primary, which rebuilds from the store", fatal)}
		return false, nil
	}
	// Not bound to the caller: once the claim has fenced the old primary,
	// finishing the promotion is what restores service, whether or not
	// the caller is still waiting.
	res, err := n.promote(ctx, 0)
	req.out <- result{promote: res, err: err}
	return err == nil, nil
}

// standbyStep bootstraps the tailer if needed, then applies the next
// generation if it exists. It reports whether it applied something.
func (n *Node) standbyStep(ctx context.Context) (bool, error) {
	n.mu.Lock()
	t := n.tail
	n.mu.Unlock()
	if t == nil || !t.bootstrapped {
		if err := n.bootstrap(ctx); err != nil {
			return false, err
		}
		return true, nil
	}
	pos := t.position()
	g := pos.Gen + 1
	term, ok := t.lin.TermOf(g)
	if !ok {
		return false, n.refreshLineage(ctx, t)
	}
	r := translog.NewReader(n.store, n.shard)
	b, err := r.ReadBatch(ctx, term, g)
	switch {
	case errors.Is(err, translog.ErrMissingGen), errors.Is(err, translog.ErrPoisoned):
		return false, n.waitForGen(ctx, t, g, errors.Is(err, translog.ErrPoisoned))
	case err != nil:
		return false, err
	}
	if b.FirstSeqNo != pos.NextSeqNo {
		return false, &fence.BodyError{Shard: n.shard, Key: layout.MDKey(term, g), Err: fence.ErrCorruptBody,
			Detail: fmt.Sprintf("first sequence number %d, the standby's history ends before %d", b.FirstSeqNo, pos.NextSeqNo)}
	}
	leader, err := applyBatch(t.m, b)
	if err != nil {
		return false, err
	}
	n.opts.Metrics.standbyApplied.Add(float64(len(b.Ops)))
	// A generation seen for the first time was written after its append
	// was sent: a sign of the primary's life (election.go).
	now := n.opts.Clock.Now()
	n.mu.Lock()
	n.elect.SawTerm(term, now)
	n.elect.Alive(now)
	if leader != nil {
		n.elect.PrimaryTimeout(time.Duration(leader.GetElectionTimeoutMs()) * time.Millisecond)
	}
	n.mu.Unlock()
	if leader != nil {
		n.learnLeader(master.Leader{Node: leader.GetNode(), Addr: leader.GetAddr(), Term: term})
	}
	n.lookAtTip(ctx, t, false)
	t.mu.Lock()
	t.pos = recovery.Position{Term: term, Gen: g, NextSeqNo: b.FirstSeqNo + int64(len(b.Ops))}
	if t.pos.NextSeqNo >= t.tipSeq {
		t.caughtUp = n.opts.Clock.Now()
	}
	t.mu.Unlock()
	n.publishLag(t)
	return true, nil
}

// waitForGen is what a standby does when the next generation is not
// there: caught up, or the lineage moved on (a new term sealed it; a
// poison says so at once, otherwise the markers are listed once a second),
// or GC collected it below a newer snapshot: a lineage checkpoint at or
// above it proves it was acknowledged, so its md existed, and only GC
// removes an md; the standby then reloads from that snapshot.
func (n *Node) waitForGen(ctx context.Context, t *tailer, g int64, poisoned bool) error {
	now := n.opts.Clock.Now()
	t.mu.Lock()
	t.caughtUp = now
	due := poisoned || time.Duration(now-t.markersLooked) >= time.Second
	if due {
		t.markersLooked = now
	}
	t.mu.Unlock()
	n.publishLag(t)
	if due {
		top, err := n.topMarker(ctx)
		if err != nil {
			return err
		}
		if top > t.top {
			return n.refreshLineage(ctx, t)
		}
	}
	n.lookAtTip(ctx, t, false)
	t.mu.Lock()
	past := t.tipSeq > t.pos.NextSeqNo
	t.mu.Unlock()
	if past {
		newer, err := n.hasCheckpointAtOrAbove(ctx, t, g)
		if err != nil {
			return err
		}
		if newer {
			n.log.Warn("standby fell behind the log's collection; reloading from the newest snapshot", "gen", g)
			return n.rebuild(ctx)
		}
	}
	return nil
}

// lookAtTip reads the newest md of the lineage's newest term, at most once a
// second (or at once when force), for the lag metrics.
func (n *Node) lookAtTip(ctx context.Context, t *tailer, force bool) {
	now := n.opts.Clock.Now()
	t.mu.Lock()
	due := force || time.Duration(now-t.tipLooked) >= time.Second
	if due {
		t.tipLooked = now
	}
	t.mu.Unlock()
	if !due {
		n.publishLag(t)
		return
	}
	page, err := n.store.List(ctx, layout.MDTermPrefix(t.top), "", 1)
	if err == nil && len(page.Items) == 1 {
		if p, ok := layout.ParseMDKey(page.Items[0].Key); ok {
			if md, err := translog.NewReader(n.store, n.shard).ReadMD(ctx, p.Term, p.Gen); err == nil && md.Kind == translog.KindSync {
				t.mu.Lock()
				t.tipSeq = max(t.tipSeq, md.FirstSeqNo+md.OpCount)
				t.mu.Unlock()
			}
		}
	}
	n.publishLag(t)
}

func (n *Node) publishLag(t *tailer) {
	_, _, entries, lag := t.status(n.opts.Clock)
	n.opts.Metrics.standbyLagEntries.Set(float64(entries))
	n.opts.Metrics.standbyLagSeconds.Set(lag.Seconds())
}

// topMarker is the newest seal marker's term.
func (n *Node) topMarker(ctx context.Context) (int64, error) {
	items, err := blobstore.ListAll(ctx, n.store, layout.MarkerPrefix)
	if err != nil {
		return 0, err
	}
	var top int64
	for _, it := range items {
		if t, ok := layout.ParseMarkerKey(it.Key); ok {
			top = max(top, t)
		}
	}
	return top, nil
}

// refreshLineage re-reads the lineage after a new term sealed. A position
// the new lineage holds carries on; one it cut off means the standby
// applied a history no successor kept, and it reloads.
func (n *Node) refreshLineage(ctx context.Context, t *tailer) error {
	rep, err := seal.Inspect(ctx, n.store, n.shard, n.sealOptions())
	if err != nil {
		return err
	}
	if len(rep.Markers) == 0 {
		return nil
	}
	pos := t.position()
	if pos.Gen > 0 && !rep.Lineage.Contains(pos.Term, pos.Gen) {
		n.log.Warn("standby: the log's new lineage does not hold what it applied; reloading from the newest snapshot",
			"term", pos.Term, "gen", pos.Gen, "new_term", rep.Markers[0].Term)
		return n.rebuild(ctx)
	}
	t.lin, t.top = rep.Lineage, rep.Markers[0].Term
	n.sawTerm(t.top)
	return nil
}

// sawTerm tells the election of a term seen in the log: a new one is a
// new primary's claim (a sign of life), whose leader entry is not read
// yet.
func (n *Node) sawTerm(term int64) {
	n.mu.Lock()
	fresh := n.elect.SawTerm(term, n.opts.Clock.Now())
	n.mu.Unlock()
	if l := n.leader.Load(); fresh && (l == nil || l.Term < term) {
		n.leader.Store(&master.Leader{})
	}
}

func (n *Node) sealOptions() seal.Options {
	return seal.Options{Clock: n.opts.Clock, Backoff: n.opts.Backoff, Parallelism: 8}
}

// hasCheckpointAtOrAbove reports whether a lineage checkpoint at or above
// gen exists.
func (n *Node) hasCheckpointAtOrAbove(ctx context.Context, t *tailer, gen int64) (bool, error) {
	items, err := blobstore.ListAll(ctx, n.store, layout.ManifestPrefix)
	if err != nil {
		return false, err
	}
	for _, it := range items {
		if p, ok := layout.ParseManifestKey(it.Key); ok && p.Gen >= gen && t.lin.HasCheckpoint(p.Term, p.Gen) {
			return true, nil
		}
	}
	return false, nil
}

func (n *Node) rebuild(ctx context.Context) error {
	n.opts.Metrics.standbyRebuilds.Inc()
	n.mu.Lock()
	n.tail = nil
	n.mu.Unlock()
	return n.bootstrap(ctx)
}

// loadedLocked: the standby holds the log again. A node that stepped down
// (fenced, or its log failed) is a standby from here on; the election
// counts from here, so a standby that just loaded gives the primary a
// whole timeout to show a sign of life. The caller holds n.mu.
func (n *Node) loadedLocked() {
	if n.role == RoleFenced || n.role == RoleFailed {
		n.role, n.err = RoleStandby, nil
		n.log.Info("the master that stepped down is a standby again", "reason", n.steppedDown)
	}
	n.elect.Alive(n.opts.Clock.Now())
	n.publishLocked()
}

// maybeElect claims the log when the election says the primary is gone:
// no sign of its life for the election timeout (plus this standby's random
// share). It first looks once more: a term above the one it watched is
// another master's claim, a new generation the primary's renewal, and
// either puts the election off. The claim is at exactly one above the
// highest term seen, so of several standbys that try at once only one
// wins (the fence key's create-if-absent decides); the others stay
// standbys and tail the winner. It reports whether this node is primary.
func (n *Node) maybeElect(ctx context.Context) (bool, error) {
	n.mu.Lock()
	t := n.tail
	due, auto := n.elect.Until(n.opts.Clock.Now())
	n.mu.Unlock()
	if !auto || due > 0 || t == nil || !t.bootstrapped {
		return false, nil
	}
	top, err := n.topTerm(ctx)
	if err != nil {
		return false, err
	}
	n.mu.Lock()
	newer := n.elect.SawTerm(top, n.opts.Clock.Now())
	term := max(top, n.elect.term) + 1
	n.mu.Unlock()
	if newer {
		n.log.Info("standby: a newer master claimed the operation log; following it", "term", top)
		return false, nil
	}
	if progressed, err := n.standbyStep(ctx); progressed || err != nil {
		return false, err
	}
	n.mu.Lock()
	d := n.elect.Timeout()
	n.mu.Unlock()
	n.log.Warn("standby: no sign of the primary's life for the election timeout; claiming the operation log", "term", term, "election_timeout", d)
	start := n.opts.Clock.Now()
	res, err := n.promote(ctx, term)
	if err != nil {
		n.mu.Lock()
		n.claim = 0
		// Lost (another master claimed first, or a higher term is
		// there), or the store failed: either way wait a whole timeout
		// again; a lost claim shows its winner as a new term.
		n.elect.Alive(n.opts.Clock.Now())
		n.mu.Unlock()
		if errors.Is(err, fence.ErrFenced) {
			n.log.Info("standby: another master won the election; following it", "term", term, "err", err)
			return false, nil
		}
		return false, err
	}
	n.opts.Metrics.elections.Inc()
	n.log.Warn("elected: this master is the primary", "term", res.Term, "restore_gen", res.RestoreGen, "replayed_gens", res.ReplayedGens,
		"duration_ms", time.Duration(n.opts.Clock.Now()-start).Milliseconds())
	return true, nil
}

// bootstrap loads the newest lineage snapshot that restores (falling back
// to older ones) into a fresh master, ready to tail the log after it.
func (n *Node) bootstrap(ctx context.Context) error {
	rep, err := seal.Inspect(ctx, n.store, n.shard, n.sealOptions())
	if err != nil {
		return err
	}
	m, err := n.newMaster()
	if err != nil {
		return err
	}
	t := &tailer{m: m}
	if len(rep.Markers) == 0 {
		// A log no primary opened yet: start from nothing.
		t.bootstrapped = true
		n.mu.Lock()
		n.tail, n.m = t, m
		n.loadedLocked()
		n.mu.Unlock()
		n.log.Info("standby tailing an empty log")
		return nil
	}
	t.lin, t.top = rep.Lineage, rep.Markers[0].Term
	var cands []seal.CheckpointRef
	for _, c := range rep.Checkpoints {
		if c.OnLineage && c.Err == "" {
			cands = append(cands, seal.CheckpointRef{Term: c.Term, Gen: c.Gen})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].Gen != cands[j].Gen {
			return cands[i].Gen > cands[j].Gen
		}
		return cands[i].Term > cands[j].Term
	})
	if len(cands) > 0 {
		dir, err := os.MkdirTemp(n.opts.Dir, "shardfence-standby-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		h, err := seal.Hydrate(ctx, n.store, n.shard, t.lin, math.MaxInt64, dir, seal.HydrateOptions{
			Options: n.sealOptions(), Candidates: cands,
			Accept: func(mf seal.Manifest, paths []string) error {
				cand, err := n.restoreCandidate(ctx, mf, paths)
				if err != nil {
					n.log.Warn("complete snapshot refused; trying an older one", "checkpoint", mf.Key(), "err", err)
					return err
				}
				t.m = cand
				return nil
			},
		})
		if err != nil {
			return err
		}
		n.opts.Metrics.candidateFallbacks.Add(float64(len(h.Refused)))
		if h.Manifest != nil {
			t.pos = recovery.Position{Term: h.Manifest.Term, Gen: h.Manifest.Gen, NextSeqNo: h.Manifest.NextSeqNo}
			n.mu.Lock()
			n.lastSnap = snapshotInfo{key: h.Manifest.Key(), gen: h.Manifest.Gen, pos: t.pos}
			n.mu.Unlock()
		}
	}
	if t.pos.Gen < t.lin.Base() {
		return fmt.Errorf("%w: the log's oldest stored generation is %d and no snapshot restores at or above it", seal.ErrLineageTruncated, t.lin.Base()+1)
	}
	t.bootstrapped = true
	n.mu.Lock()
	n.tail, n.m = t, t.m
	n.loadedLocked()
	n.mu.Unlock()
	n.sawTerm(t.top)
	st := t.m.Stats()
	n.log.Info("standby loaded", "snapshot_gen", t.pos.Gen, "objects", st.Objects, "segments", st.Segments)
	return nil
}
