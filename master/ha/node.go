package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Role is what a master process does with the operation log.
type Role int

// Roles, as the HA API reports them.
const (
	RoleOpening Role = Role(masterv1.MasterRole_MASTER_ROLE_OPENING)
	RoleStandby Role = Role(masterv1.MasterRole_MASTER_ROLE_STANDBY)
	RolePrimary Role = Role(masterv1.MasterRole_MASTER_ROLE_PRIMARY)
	RoleFenced  Role = Role(masterv1.MasterRole_MASTER_ROLE_FENCED)
	RoleFailed  Role = Role(masterv1.MasterRole_MASTER_ROLE_FAILED)
)

func (r Role) String() string {
	switch r {
	case RoleOpening:
		return "opening"
	case RoleStandby:
		return "standby"
	case RolePrimary:
		return "primary"
	case RoleFenced:
		return "fenced"
	case RoleFailed:
		return "failed"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ShardPrefix starts the id of every master's log shard
// (layout.MasterShardPrefix).
const ShardPrefix = layout.MasterShardPrefix

// ShardID is the id of the shard holding cluster's operation log and
// snapshots: "master-<cluster>". A cluster name follows the rules of a
// shard id (layout.CheckName): 1 to 128 characters of A-Z a-z 0-9 . _ -,
// not starting with '.' or '-'.
func ShardID(cluster string) (string, error) {
	if err := layout.CheckName(cluster); err != nil {
		return "", fmt.Errorf("%w: cluster name %q %v (use 1-%d characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-')", master.ErrInvalidArgument, cluster, err, layout.MaxNameLen)
	}
	return ShardPrefix + cluster, nil
}

// Options configure a Node.
type Options struct {
	// Store is the store's root; the log lives under ShardID(Cluster)/.
	Store   *blobstore.Container
	Cluster string
	// Standby starts the node as a hot standby: it tails the log with
	// reads only and claims nothing until promoted.
	Standby bool
	// Node names this process in fence keys, for operators.
	Node string

	// Config and MasterOptions build every master the node restores
	// (MasterOptions.Journal is the node's own).
	Config        master.Config
	MasterOptions master.Options

	// Clock is the steady clock of the store protocol (backoff,
	// freshness). Default: the system's.
	Clock   fence.Clock
	Backoff fence.Backoff
	// Dir receives snapshot files while they are encoded or hydrated.
	// Default: the system's temporary directory.
	Dir string
	// SnapshotFormat is what snapshots are written in (v2 by default).
	SnapshotFormat master.SnapshotFormat
	// SnapshotInterval takes a complete snapshot this often while primary
	// (when the log moved since the last one); 0 only on request.
	SnapshotInterval time.Duration
	// Retain is what GC keeps after each snapshot.
	Retain seal.GCPolicy
	// Freshness is how long a fence CAS proves ownership for a snapshot's
	// publication and GC. Default 10s.
	Freshness time.Duration
	// PollInterval is how often a caught-up standby looks for new
	// entries. Default 100ms.
	PollInterval time.Duration
	// MaxLag is the lag a standby may have and still report ready.
	// Default 10s.
	MaxLag time.Duration
	// FenceCheckInterval is how often an idle primary lists the fence keys
	// to learn it was superseded, so a paused or partitioned master turns
	// not-ready without waiting for a write. Default 1s.
	FenceCheckInterval time.Duration
	// AllocationLease is how long a proof that this master holds the log
	// (a successful fence CAS, or a listing of the fence keys with no
	// higher term) lets it hand out memory (PutStart); past it, placement
	// proves ownership again first. A new term hands out nothing until
	// AllocationLease + AllocationLeaseMargin after its claim, so a
	// predecessor that has not learnt it lost the log has stopped placing
	// by then and two masters never place into the same free space.
	// Defaults 2s and 1s (the margin covers steady clocks running at
	// slightly different rates).
	AllocationLease       time.Duration
	AllocationLeaseMargin time.Duration
	// Writer tunes the log writer (inline limit, pipeline, backoff); its
	// fencing is always per-sync with the concurrent ack order.
	Writer  translog.Options
	Metrics *Metrics
	Log     *slog.Logger
}

// Node runs one master process over the operation log: as primary (it
// holds the log's term, appends every change and serves), as hot standby
// (it tails the log and serves nothing) or, once superseded, fenced.
type Node struct {
	opts  Options
	shard string
	store *blobstore.Container
	alloc string
	log   *slog.Logger
	reqs  chan request

	serving atomic.Pointer[servingState]

	mu       sync.Mutex
	role     Role
	m        *master.Master
	sh       *recovery.Shard
	oplog    *oplog
	term     int64
	err      error
	claim    int64 // a term claimed by a promotion that did not open yet
	tail     *tailer
	lastSnap snapshotInfo
	// stopLiveness stops the liveness monitor of the primary.
	stopLiveness context.CancelFunc
}

type request struct {
	promote bool
	ctx     context.Context
	out     chan result
}

type result struct {
	promote  PromoteResult
	snapshot SnapshotResult
	err      error
}

type snapshotInfo struct {
	key string
	gen int64
	pos recovery.Position
}

// New validates opts and returns a node; Run does the work.
func New(opts Options) (*Node, error) {
	shard, err := ShardID(opts.Cluster)
	if err != nil {
		return nil, err
	}
	if opts.Store == nil {
		return nil, fmt.Errorf("%w: no store", master.ErrInvalidArgument)
	}
	store, err := blobstore.Sub(opts.Store, shard)
	if err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = fence.SystemClock()
	}
	if opts.Backoff == (fence.Backoff{}) {
		opts.Backoff = fence.DefaultBackoff()
	}
	if opts.Dir == "" {
		opts.Dir = os.TempDir()
	}
	if opts.Freshness <= 0 {
		opts.Freshness = 10 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	if opts.MaxLag <= 0 {
		opts.MaxLag = 10 * time.Second
	}
	if opts.FenceCheckInterval <= 0 {
		opts.FenceCheckInterval = time.Second
	}
	if opts.AllocationLease <= 0 {
		opts.AllocationLease = 2 * time.Second
	}
	if opts.AllocationLeaseMargin <= 0 {
		opts.AllocationLeaseMargin = time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.MasterOptions.Metrics == nil {
		opts.MasterOptions.Metrics = master.NewMetrics(nil)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Node == "" {
		opts.Node, _ = os.Hostname()
	}
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return nil, err
	}
	node := strings.Map(func(r rune) rune {
		if r == '|' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, opts.Node)
	if len(node) > 64 {
		node = node[:64]
	}
	alloc := "master-" + node + "-" + hex.EncodeToString(suffix)
	if node == "" {
		alloc = "master-" + hex.EncodeToString(suffix)
	}
	n := &Node{opts: opts, shard: shard, store: store, alloc: alloc, reqs: make(chan request),
		log: opts.Log.With("cluster", opts.Cluster, "shard", shard), role: RoleOpening}
	if opts.Standby {
		n.role = RoleStandby
	}
	n.publishLocked()
	return n, nil
}

// Shard is the id of the log's shard.
func (n *Node) Shard() string { return n.shard }

// newMaster builds an empty master with the node's configuration.
func (n *Node) newMaster() (*master.Master, error) {
	mo := n.opts.MasterOptions
	mo.Journal = nil
	return master.New(n.opts.Config, mo)
}

// Serving returns the master to serve object requests with, or why this
// process must not serve them: ErrNotPrimary (a standby, or still
// opening), ErrFenced or ErrLogFailed. A standby's master (for Stats) is
// returned along with ErrNotPrimary when it has one. It is one atomic
// load: every request calls it.
func (n *Node) Serving() (*master.Master, error) {
	s := n.serving.Load()
	if s == nil {
		return nil, fmt.Errorf("%w: this master of cluster %q is still opening its operation log; retry shortly", master.ErrNotPrimary, n.opts.Cluster)
	}
	return s.m, s.err
}

type servingState struct {
	m   *master.Master
	err error
}

// publishLocked makes the role, master and error visible to Serving. The
// caller holds n.mu.
func (n *Node) publishLocked() {
	s := &servingState{m: n.m}
	switch n.role {
	case RolePrimary:
	case RoleFenced, RoleFailed:
		s.err = n.err
	case RoleStandby:
		s.err = fmt.Errorf("%w: this master of cluster %q is a hot standby; send requests to the primary, or promote this one", master.ErrNotPrimary, n.opts.Cluster)
	default:
		s.err = fmt.Errorf("%w: this master of cluster %q is still opening its operation log; retry shortly", master.ErrNotPrimary, n.opts.Cluster)
	}
	n.serving.Store(s)
}

// Ready reports nil when the node is what its role promises: a primary
// still holding its term, or a standby within its lag bound.
func (n *Node) Ready() error {
	st := n.Status()
	switch st.Role {
	case RolePrimary:
		// A primary that cannot prove it still holds the log (the store
		// does not answer the fence listing) refuses every change until
		// it can; it is not ready meanwhile. The fence check proves it
		// again every FenceCheckInterval.
		n.mu.Lock()
		lg := n.oplog
		n.mu.Unlock()
		if lg != nil {
			if err := lg.Unproven(); err != nil {
				return fmt.Errorf("primary of cluster %q, not serving: %v", n.opts.Cluster, err)
			}
		}
		return nil
	case RoleStandby:
		if !st.Bootstrapped {
			return fmt.Errorf("standby of cluster %q: still loading the log", n.opts.Cluster)
		}
		if st.Lag > n.opts.MaxLag {
			return fmt.Errorf("standby of cluster %q: %v behind the log, more than the %v bound", n.opts.Cluster, st.Lag.Round(time.Millisecond), n.opts.MaxLag)
		}
		return nil
	case RoleFenced:
		return fmt.Errorf("fenced: %v", st.Err)
	case RoleFailed:
		return fmt.Errorf("failed: %v", st.Err)
	}
	return fmt.Errorf("master of cluster %q: opening its operation log", n.opts.Cluster)
}

// Status is a point-in-time view of the node.
type Status struct {
	Role         Role
	Cluster      string
	Shard        string
	Term         int64
	Position     recovery.Position // acknowledged (primary) or applied (standby)
	Bootstrapped bool
	LagEntries   int64
	Lag          time.Duration
	Err          error
	LastSnapshot string
	SnapshotGen  int64
}

// Status reports the node's role, term and position.
func (n *Node) Status() Status {
	n.mu.Lock()
	st := Status{Role: n.role, Cluster: n.opts.Cluster, Shard: n.shard, Term: n.term, Err: n.err,
		LastSnapshot: n.lastSnap.key, SnapshotGen: n.lastSnap.gen}
	lg, tl := n.oplog, n.tail
	n.mu.Unlock()
	if lg != nil {
		st.Position, _ = lg.Acked()
	}
	if tl != nil && st.Role == RoleStandby {
		st.Position, st.Bootstrapped, st.LagEntries, st.Lag = tl.status(n.opts.Clock)
	}
	return st
}

func (n *Node) setRole(r Role, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.role, n.err = r, err
	n.publishLocked()
}

// Run does the node's work until ctx ends: a primary opens the log (claim
// at the next term, which fences any previous master, then the newest good
// snapshot and the log after it) and serves; a standby loads the newest
// snapshot, tails the log, and becomes primary when promoted. It returns
// nil when ctx ends, or the error that stopped the node for good.
func (n *Node) Run(ctx context.Context) error {
	defer n.shutdown()
	if n.opts.Standby {
		promoted, err := n.runStandby(ctx)
		if !promoted {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	} else {
		for {
			err := n.openPrimary(ctx, false)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			if !retryable(err) {
				n.setRole(RoleFailed, fmt.Errorf("%w: %w", master.ErrLogFailed, err))
				n.log.Error("master could not open its operation log", "err", err)
				return err
			}
			n.log.Warn("opening the operation log failed; retrying", "err", err)
			if fence.Sleep(ctx, n.opts.Clock, time.Second) != nil {
				return nil
			}
		}
	}
	n.runPrimary(ctx)
	return nil
}

// retryable: store trouble, not a verdict about the log.
func retryable(err error) bool {
	var fe *fence.FencedError
	if errors.As(err, &fe) || errors.Is(err, fence.ErrCorruptBody) || errors.Is(err, fence.ErrUnknownVersion) ||
		errors.Is(err, fence.ErrForeignShard) || errors.Is(err, master.ErrEntryMalformed) ||
		errors.Is(err, master.ErrEntryVersion) || errors.Is(err, master.ErrEntryKind) ||
		errors.Is(err, seal.ErrLineageTruncated) || errors.Is(err, seal.ErrTermAlreadyOpen) ||
		errors.Is(err, blobstore.ErrPreconditionsNotEnforced) || errors.Is(err, master.ErrInvalidArgument) ||
		errors.Is(err, master.ErrSegmentNotFound) || errors.Is(err, master.ErrSegmentExists) {
		return false
	}
	return true
}

// nextTerm is one above every term the shard's fence keys and seal markers
// name.
func (n *Node) nextTerm(ctx context.Context) (int64, error) {
	var top int64
	for _, prefix := range []string{fence.Dir, seal.MarkerPrefix} {
		var items []blobstore.Attrs
		err := fence.Retry(ctx, n.opts.Clock, n.opts.Backoff, func(ctx context.Context) error {
			var err error
			items, err = blobstore.ListAll(ctx, n.store, prefix)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("list %s of %s: %w", prefix, n.shard, err)
		}
		for _, it := range items {
			if t, ok := fence.ParseKey(it.Key); ok {
				top = max(top, t)
			}
			if t, ok := seal.ParseMarkerKey(it.Key); ok {
				top = max(top, t)
			}
		}
	}
	return top + 1, nil
}

// openPrimary claims the log at the next term (or the term an earlier
// attempt of this promotion claimed) and opens it. With resume, the
// standby's master continues from its position and only what it had not
// applied is replayed; otherwise (or when its position is no longer on the
// lineage) a fresh master is built from the newest snapshot that restores
// and the log after it.
func (n *Node) openPrimary(ctx context.Context, resume bool) error {
	n.mu.Lock()
	term := n.claim
	n.mu.Unlock()
	if term == 0 {
		var err error
		if term, err = n.nextTerm(ctx); err != nil {
			return err
		}
		n.mu.Lock()
		n.claim = term
		n.mu.Unlock()
	}
	ro := recovery.Options{Node: n.opts.Node, Clock: n.opts.Clock, Backoff: n.opts.Backoff, Parallelism: 8, Writer: n.writerOptions()}
	var cur *master.Master
	ro.Apply = func(_ context.Context, b translog.Batch) error { return applyBatch(cur, b) }
	var sh *recovery.Shard
	var err error
	if resume {
		n.mu.Lock()
		tl := n.tail
		n.mu.Unlock()
		if tl != nil && tl.bootstrapped {
			cur = tl.m
			pos := tl.position()
			ro.Resume = &pos
			// The standby's position moves with what is replayed, so a
			// retry after a failure part-way resumes where this one got.
			ro.Apply = func(_ context.Context, b translog.Batch) error {
				if err := applyBatch(cur, b); err != nil {
					return err
				}
				tl.mu.Lock()
				tl.pos = recovery.Position{Term: b.Term, Gen: b.Gen, NextSeqNo: b.FirstSeqNo + int64(len(b.Ops))}
				tl.mu.Unlock()
				return nil
			}
			sh, err = recovery.Open(ctx, n.store, n.shard, term, n.alloc, ro)
			// A generation missing after the standby's position was
			// collected below a newer snapshot (the old primary's GC can
			// land while the promotion reads): the snapshot holds it, and
			// the rebuild fails on its own if a generation it needs is
			// missing for any other reason.
			if errors.Is(err, recovery.ErrResumeOffLineage) || errors.Is(err, seal.ErrLineageTruncated) || errors.Is(err, translog.ErrMissingGen) {
				n.log.Warn("the standby's position is not on the sealed lineage; rebuilding from the newest snapshot", "term", pos.Term, "gen", pos.Gen, "err", err)
				sh, err = nil, nil
			} else if err != nil {
				return err
			}
			ro.Resume = nil
			ro.Apply = func(_ context.Context, b translog.Batch) error { return applyBatch(cur, b) }
		}
	}
	if sh == nil {
		dir, err := os.MkdirTemp(n.opts.Dir, "shardfence-master-restore-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if cur, err = n.newMaster(); err != nil {
			return err
		}
		ro.Dir = dir
		ro.AcceptCheckpoint = func(m seal.Manifest, paths []string) error {
			cand, err := n.restoreCandidate(ctx, m, paths)
			if err != nil {
				n.log.Warn("complete snapshot refused; trying an older one", "checkpoint", m.Key(), "err", err)
				return err
			}
			cur = cand
			return nil
		}
		sh, err = recovery.Open(ctx, n.store, n.shard, term, n.alloc, ro)
		if err != nil {
			return err
		}
		n.opts.Metrics.candidateFallbacks.Add(float64(len(sh.Refused)))
	}
	restore := sh.Restore()
	pos := recovery.Position{Term: restore.Term, Gen: restore.Gen, NextSeqNo: sh.NextSeqNo}
	lg := newOplog(sh.Writer, sh.Chain, n.opts.Clock, oplogOptions{
		from: pos, maxBytes: int(n.syncLimit()), metrics: n.opts.Metrics, onFail: n.onLogFail,
		lease: n.opts.AllocationLease, notBefore: sh.Chain.SweptAt() + int64(n.opts.AllocationLease+n.opts.AllocationLeaseMargin),
	})
	cur.SetJournal(lg)
	// Every client the restored state names starts a fresh Active window:
	// the old master's windows are not carried over.
	restoredClients := cur.RestoreLiveness()
	n.mu.Lock()
	n.m, n.sh, n.oplog, n.term, n.claim = cur, sh, lg, term, 0
	n.role, n.err, n.tail = RolePrimary, nil, nil
	n.publishLocked()
	if sh.Checkpoint != nil {
		n.lastSnap = snapshotInfo{key: sh.Checkpoint.Key(), gen: sh.Checkpoint.Gen, pos: recovery.Position{Term: sh.Checkpoint.Term, Gen: sh.Checkpoint.Gen, NextSeqNo: sh.Checkpoint.NextSeqNo}}
	}
	n.mu.Unlock()
	n.opts.Metrics.term.Set(float64(term))
	st := cur.Stats()
	n.log.Info("master is primary", "term", term, "allocation", n.alloc, "restore_term", restore.Term, "restore_gen", restore.Gen,
		"replayed_gens", max(0, sh.Replay.To-sh.Replay.From+1), "objects", st.Objects, "segments_awaiting_remount", st.SegmentsAwaitingRemount,
		"restored_clients", restoredClients)
	return nil
}

func (n *Node) writerOptions() translog.Options {
	w := n.opts.Writer
	w.FencingDisabled, w.FencingMode, w.AckOrder = false, translog.PerSync, translog.Concurrent
	if w.Backoff == (fence.Backoff{}) {
		w.Backoff = n.opts.Backoff
	}
	return w
}

// syncLimit is the most entry bytes one append carries.
func (n *Node) syncLimit() int64 {
	limit := n.opts.Writer.MaxSyncBytes
	if limit <= 0 {
		limit = 16 << 20
	}
	return limit / 2
}

// onLogFail turns the node fenced or failed when an append fails for good.
func (n *Node) onLogFail(err error) {
	n.mu.Lock()
	stop := n.stopLiveness
	n.mu.Unlock()
	if stop != nil {
		// A master that stopped serving judges no client: its monitor
		// would only commit transitions it can no longer log.
		stop()
	}
	role := RoleFailed
	if errors.Is(err, master.ErrFenced) {
		role = RoleFenced
	}
	n.setRole(role, err)
	n.opts.Metrics.term.Set(0)
	n.log.Error("master stops serving: its operation log failed", "role", role.String(), "err", err)
}

// runPrimary serves requests, takes snapshots and watches the fence until
// ctx ends.
func (n *Node) runPrimary(ctx context.Context) {
	var snapTick <-chan time.Time
	if n.opts.SnapshotInterval > 0 {
		t := time.NewTicker(n.opts.SnapshotInterval)
		defer t.Stop()
		snapTick = t.C
	}
	fenceTick := time.NewTicker(n.opts.FenceCheckInterval)
	defer fenceTick.Stop()
	// The liveness monitor (and its offboarding executor) runs while this
	// node is primary; it drains when the node stops or stops serving.
	liveCtx, stopLive := context.WithCancel(ctx)
	n.mu.Lock()
	m := n.m
	n.stopLiveness = stopLive
	n.mu.Unlock()
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		m.RunLiveness(liveCtx)
	}()
	defer func() {
		stopLive()
		<-liveDone
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-n.reqs:
			if req.promote {
				req.out <- result{err: fmt.Errorf("%w: this master is %s, not a standby", master.ErrInvalidArgument, n.Status().Role)}
				continue
			}
			res, err := n.snapshot(req.ctx, true)
			req.out <- result{snapshot: res, err: err}
		case <-snapTick:
			if _, err := n.snapshot(ctx, false); err != nil && ctx.Err() == nil {
				n.log.Warn("complete snapshot not published", "err", err)
				if errors.Is(err, seal.ErrSuperseded) {
					// The publish gate saw a higher term: the fence
					// check fences the log now instead of at its tick.
					n.checkFence(ctx)
				}
			}
		case <-fenceTick.C:
			n.checkFence(ctx)
		}
	}
}

// checkFence lists the fence keys: a higher term means a newer master
// claimed the log, and this one is fenced at once instead of at its next
// append; none refreshes the proof of ownership placement relies on.
func (n *Node) checkFence(ctx context.Context) {
	n.mu.Lock()
	lg, role := n.oplog, n.role
	n.mu.Unlock()
	if role != RolePrimary || lg == nil {
		return
	}
	_ = lg.prove(ctx)
}

func (n *Node) shutdown() {
	n.mu.Lock()
	lg := n.oplog
	n.mu.Unlock()
	if lg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lg.Close(ctx); err != nil && !errors.Is(err, translog.ErrClosed) {
		n.log.Warn("closing the operation log", "err", err)
	}
}

// PromoteResult reports a promotion.
type PromoteResult struct {
	Term                    int64
	RestoreGen              int64
	ReplayedGens            int64
	Duration                time.Duration
	Objects                 uint64
	SegmentsAwaitingRemount uint64
}

// Promote makes a standby the primary (see masterv1.MasterHAService).
func (n *Node) Promote(ctx context.Context) (PromoteResult, error) {
	out := make(chan result, 1)
	select {
	case n.reqs <- request{promote: true, ctx: ctx, out: out}:
	case <-ctx.Done():
		return PromoteResult{}, ctx.Err()
	}
	select {
	case r := <-out:
		return r.promote, r.err
	case <-ctx.Done():
		return PromoteResult{}, ctx.Err()
	}
}

// promote runs on the Run goroutine, between two tail steps.
func (n *Node) promote(ctx context.Context) (PromoteResult, error) {
	start := time.Now()
	n.setRole(RoleOpening, nil)
	if err := n.openPrimary(ctx, true); err != nil {
		n.setRole(RoleStandby, nil)
		return PromoteResult{}, err
	}
	d := time.Since(start)
	n.opts.Metrics.promotionSeconds.Set(d.Seconds())
	n.mu.Lock()
	sh, m, term := n.sh, n.m, n.term
	n.mu.Unlock()
	st := m.Stats()
	return PromoteResult{Term: term, RestoreGen: sh.Restore().Gen, ReplayedGens: max(0, sh.Replay.To-sh.Replay.From+1),
		Duration: d, Objects: st.Objects, SegmentsAwaitingRemount: st.SegmentsAwaitingRemount}, nil
}

// Snapshot takes a complete snapshot now (primary only).
func (n *Node) Snapshot(ctx context.Context) (SnapshotResult, error) {
	out := make(chan result, 1)
	select {
	case n.reqs <- request{ctx: ctx, out: out}:
	case <-ctx.Done():
		return SnapshotResult{}, ctx.Err()
	}
	select {
	case r := <-out:
		return r.snapshot, r.err
	case <-ctx.Done():
		return SnapshotResult{}, ctx.Err()
	}
}

// applyBatch decodes every entry of a generation before applying any, so
// an entry this build cannot read stops the replay with nothing of its
// generation applied.
func applyBatch(m *master.Master, b translog.Batch) error {
	ops := make([]*master.Op, len(b.Ops))
	for i, raw := range b.Ops {
		op, err := master.DecodeEntry(raw)
		if err != nil {
			return fmt.Errorf("entry %d (sequence number %d) of generation %d, term %d: %w", i, b.FirstSeqNo+int64(i), b.Gen, b.Term, err)
		}
		ops[i] = op
	}
	ctx := context.Background()
	for i, op := range ops {
		if err := m.ReplayStandby(ctx, op); err != nil {
			return fmt.Errorf("entry %d (sequence number %d) of generation %d, term %d: %w", i, b.FirstSeqNo+int64(i), b.Gen, b.Term, err)
		}
	}
	return nil
}
