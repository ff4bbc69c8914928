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
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/defaults"
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
	// reads only and claims nothing until promoted or elected. Without
	// it, a node claims the log at once when elections are off or the log
	// is new; otherwise it starts as a standby and is elected when no
	// primary shows a sign of life.
	Standby bool
	// Node names this process in fence keys and leader entries, for
	// operators and clients.
	Node string
	// Advertise is the URL this master serves its API on, as sidecars,
	// the CLI and other masters reach it. The primary writes it into its
	// leader entries; every other master redirects requests there.
	Advertise string
	// ElectionTimeout turns on elections: a standby that sees no sign of
	// the primary's life (a new log generation or term) for this long,
	// plus a random share of up to a fifth of it, claims the log by
	// itself; the primary appends a leader entry every third of it and
	// answers nothing once no append it sent in the last nine tenths of it
	// was acknowledged. 0: no elections (only promote makes a primary)
	// and no leadership lease. Every master of a cluster should use the
	// same value; a standby waits the longer of its own and the one the
	// primary announces.
	ElectionTimeout time.Duration
	// ElectionSeed seeds the random share of the election wait; 0 draws
	// one.
	ElectionSeed uint64

	// Config and MasterOptions build every master the node restores
	// (MasterOptions.Journal is the node's own).
	Config        master.Config
	MasterOptions master.Options

	// Clock is the steady clock of the store protocol (backoff,
	// freshness). Default: the system's.
	Clock   clock.Clock
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
	// lost is closed when the primary's log fails (fenced, lapsed or
	// failed): the primary steps down.
	lost chan struct{}
	// elect is the standby's election bookkeeping.
	elect *Elector
	// steppedDown is why this node last stopped being primary.
	steppedDown error
	// leader is the primary as this node knows it (itself while
	// primary); nil when unknown.
	leader atomic.Pointer[master.Leader]
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
		opts.Clock = clock.System()
	}
	if opts.Backoff == (fence.Backoff{}) {
		opts.Backoff = fence.DefaultBackoff()
	}
	if opts.Dir == "" {
		opts.Dir = os.TempDir()
	}
	defaults.Positive(&opts.Freshness, 10*time.Second)
	defaults.Positive(&opts.PollInterval, 100*time.Millisecond)
	defaults.Positive(&opts.MaxLag, 10*time.Second)
	defaults.Positive(&opts.FenceCheckInterval, time.Second)
	defaults.Positive(&opts.AllocationLease, 2*time.Second)
	defaults.Positive(&opts.AllocationLeaseMargin, time.Second)
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
	if opts.ElectionTimeout < 0 {
		return nil, fmt.Errorf("%w: election timeout %v is negative", master.ErrInvalidArgument, opts.ElectionTimeout)
	}
	if opts.ElectionSeed == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		for _, c := range b {
			opts.ElectionSeed = opts.ElectionSeed<<8 | uint64(c)
		}
	}
	n := &Node{opts: opts, shard: shard, store: store, alloc: alloc, reqs: make(chan request),
		log: opts.Log.With("cluster", opts.Cluster, "shard", shard), role: RoleOpening}
	n.elect = NewElector(opts.ElectionTimeout, opts.ElectionSeed, opts.Clock.Now())
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
//
// A refusal is a *master.RedirectError naming the primary when this node
// knows it, so clients go there at once; a primary whose leadership lease
// ran out refuses too (see Options.ElectionTimeout).
func (n *Node) Serving() (*master.Master, error) {
	s := n.serving.Load()
	if s == nil {
		return nil, fmt.Errorf("%w: this master of cluster %q is still opening its operation log; retry shortly", master.ErrNotPrimary, n.opts.Cluster)
	}
	if s.err != nil {
		return s.m, n.redirect(s.err)
	}
	if s.lg != nil {
		if err := s.lg.Leased(); err != nil {
			return s.m, n.redirect(err)
		}
		if err := s.lg.Quiet(); err != nil {
			return s.m, n.redirect(err)
		}
	}
	return s.m, nil
}

// redirect wraps a refusal with the primary this node knows of; a leader
// record of this node itself is no place to send anyone.
func (n *Node) redirect(err error) error {
	return &master.RedirectError{Err: err, Leader: n.otherLeader()}
}

func (n *Node) otherLeader() master.Leader {
	l := n.leader.Load()
	if l == nil || (l.Node == n.opts.Node && l.Addr == n.opts.Advertise) {
		return master.Leader{}
	}
	return *l
}

// Leader returns the primary as this node knows it: itself while it is
// primary and its leadership lease holds, else the master its log's newest
// leader entry names (the zero Leader when it knows of none).
func (n *Node) Leader() master.Leader {
	if s := n.serving.Load(); s != nil && s.err == nil && s.lg != nil && s.lg.Leased() == nil && s.lg.Quiet() == nil {
		if l := n.leader.Load(); l != nil {
			return *l
		}
	}
	return n.otherLeader()
}

// learnLeader records the primary a leader entry of term names; a term
// seen without its leader entry yet makes the primary unknown.
func (n *Node) learnLeader(l master.Leader) {
	if cur := n.leader.Load(); cur != nil && cur.Term > l.Term {
		return
	}
	n.leader.Store(&l)
}

type servingState struct {
	m   *master.Master
	err error
	lg  *oplog // the primary's log, whose lease Serving checks
}

// publishLocked makes the role, master and error visible to Serving. The
// caller holds n.mu.
func (n *Node) publishLocked() {
	s := &servingState{m: n.m}
	switch n.role {
	case RolePrimary:
		s.lg = n.oplog
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
			if err := lg.Leased(); err != nil {
				return fmt.Errorf("primary of cluster %q, not serving: %v", n.opts.Cluster, err)
			}
			if err := lg.Quiet(); err != nil {
				return fmt.Errorf("primary of cluster %q, not serving yet: %v", n.opts.Cluster, err)
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
	// Leader is the primary as this node knows it (Node.Leader).
	Leader master.Leader
	// Node and Addr are this master's name and advertised URL.
	Node, Addr string
	// ElectionTimeout is how long a standby waits without a sign of the
	// primary's life (0: it never claims by itself); ElectionIn, on a
	// standby, how long until it would claim (negative: due).
	ElectionTimeout time.Duration
	ElectionIn      time.Duration
	// SteppedDown is why this node last stopped being primary (nil if it
	// never did).
	SteppedDown error
}

// Status reports the node's role, term and position.
func (n *Node) Status() Status {
	n.mu.Lock()
	st := Status{Role: n.role, Cluster: n.opts.Cluster, Shard: n.shard, Term: n.term, Err: n.err,
		LastSnapshot: n.lastSnap.key, SnapshotGen: n.lastSnap.gen, Node: n.opts.Node, Addr: n.opts.Advertise,
		ElectionTimeout: n.elect.Timeout(), SteppedDown: n.steppedDown}
	if n.role == RoleStandby {
		st.ElectionIn, _ = n.elect.Until(n.opts.Clock.Now())
	}
	lg, tl := n.oplog, n.tail
	n.mu.Unlock()
	st.Leader = n.Leader()
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
// snapshot, tails the log, and becomes primary when promoted or elected. A
// primary that loses the log (fenced by a newer master, its leadership
// lapsed, or its log failed) steps down and carries on as a standby. It
// returns nil when ctx ends, or the error that stopped the node for good.
func (n *Node) Run(ctx context.Context) error {
	defer n.shutdown()
	claim := !n.opts.Standby
	if claim && n.opts.ElectionTimeout > 0 {
		// With elections, a master started as primary claims at once
		// only a log no master opened yet; otherwise a primary may be
		// serving, and this one is elected if none shows a sign of life.
		top, err := n.topTermRetrying(ctx)
		if err != nil {
			return nil
		}
		if claim = top == 0; !claim {
			n.setRole(RoleStandby, nil)
			n.log.Info("the operation log has a primary already, or had one: starting as a standby, elected if it shows no sign of life", "term", top, "election_timeout", n.opts.ElectionTimeout)
		}
	}
	for {
		if claim {
			err := n.openPrimaryRetrying(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil && n.opts.ElectionTimeout > 0 && errors.Is(err, fence.ErrFenced):
				// Another master claimed the new log first: follow it.
				n.setRole(RoleStandby, nil)
				n.log.Info("another master claimed the operation log first; following it as a standby", "err", err)
				claim = false
				continue
			case err != nil:
				n.setRole(RoleFailed, fmt.Errorf("%w: %w", master.ErrLogFailed, err))
				n.log.Error("master could not open its operation log", "err", err)
				return err
			}
		} else {
			promoted, err := n.runStandby(ctx)
			if !promoted {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		n.runPrimary(ctx)
		if ctx.Err() != nil {
			return nil
		}
		n.stepDown()
		claim = false
	}
}

// openPrimaryRetrying opens the log as primary, retrying store trouble.
func (n *Node) openPrimaryRetrying(ctx context.Context) error {
	for {
		err := n.openPrimary(ctx, false, 0)
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
		n.log.Warn("opening the operation log failed; retrying", "err", err)
		if clock.Sleep(ctx, n.opts.Clock, time.Second) != nil {
			return ctx.Err()
		}
	}
}

// topTermRetrying is the log's highest term, retrying store trouble
// until ctx ends.
func (n *Node) topTermRetrying(ctx context.Context) (int64, error) {
	for {
		top, err := n.topTerm(ctx)
		if err == nil || ctx.Err() != nil {
			return top, err
		}
		n.log.Warn("listing the operation log's terms failed; retrying", "err", err)
		if err := clock.Sleep(ctx, n.opts.Clock, time.Second); err != nil {
			return 0, err
		}
	}
}

// stepDown ends this node's time as primary: its log is closed (it failed
// already), its memory dropped, and it tails the log as a standby of
// whichever master holds it, reporting fenced (or failed) and not ready
// until it has loaded the log again.
func (n *Node) stepDown() {
	n.mu.Lock()
	lg, term, why, role := n.oplog, n.term, n.err, n.role
	n.mu.Unlock()
	if lg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = lg.Close(ctx)
		cancel()
	}
	if role == RolePrimary {
		// runPrimary ended without a failure of the log (not expected):
		// say so rather than carry on as if fenced.
		role, why = RoleFailed, fmt.Errorf("%w: the primary stopped serving", master.ErrLogFailed)
	}
	n.mu.Lock()
	n.oplog, n.sh, n.tail, n.m, n.term, n.claim = nil, nil, nil, nil, 0, 0
	n.role, n.err, n.steppedDown = role, why, why
	n.elect = NewElector(n.opts.ElectionTimeout, n.opts.ElectionSeed+uint64(term), n.opts.Clock.Now())
	n.elect.SawTerm(term, n.opts.Clock.Now())
	n.publishLocked()
	n.mu.Unlock()
	n.opts.Metrics.stepDowns.Inc()
	n.log.Warn("master stepped down: it reloads the log and follows the new primary as a standby", "term", term, "reason", why)
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
	top, err := n.topTerm(ctx)
	if err != nil {
		return 0, err
	}
	return top + 1, nil
}

// topTerm is the highest term the shard's fence keys and seal markers
// name (0 for a log no master opened).
func (n *Node) topTerm(ctx context.Context) (int64, error) {
	var top int64
	for _, prefix := range []string{layout.FenceDir, layout.MarkerPrefix} {
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
			if t, ok := layout.ParseFenceKey(it.Key); ok {
				top = max(top, t)
			}
			if t, ok := layout.ParseMarkerKey(it.Key); ok {
				top = max(top, t)
			}
		}
	}
	return top, nil
}

// openPrimary claims the log at term (0: the term an earlier attempt of
// this promotion claimed, else the next one) and opens it. With resume, the
// standby's master continues from its position and only what it had not
// applied is replayed; otherwise (or when its position is no longer on the
// lineage) a fresh master is built from the newest snapshot that restores
// and the log after it.
func (n *Node) openPrimary(ctx context.Context, resume bool, term int64) error {
	claimed := n.opts.Clock.Now() // the claim is sent after this: the leadership lease starts here
	term, err := n.primaryTerm(ctx, term)
	if err != nil {
		return err
	}
	p := &primaryOpen{ro: recovery.Options{Node: n.opts.Node, Clock: n.opts.Clock, Backoff: n.opts.Backoff, Parallelism: 8, Writer: n.writerOptions()}}
	p.ro.Apply = p.apply
	// observed is the last generation this standby had read when it
	// claimed (-1: it claimed without tailing), life when it last saw a
	// sign of the primary's life.
	observed := int64(-1)
	n.mu.Lock()
	life := n.elect.life
	n.mu.Unlock()
	var sh *recovery.Shard
	if resume {
		if sh, observed, err = n.resumePrimary(ctx, term, p); err != nil {
			return err
		}
	}
	if sh == nil {
		dir, err := os.MkdirTemp(n.opts.Dir, "shardfence-master-restore-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if sh, err = n.rebuildPrimary(ctx, term, dir, p); err != nil {
			return err
		}
	}
	n.becomePrimary(p.cur, sh, term, claimed, observed, life)
	return nil
}

// primaryOpen is one attempt of openPrimary: the recovery options, and
// the master the log is replayed into (Apply is apply unless the standby
// resumes).
type primaryOpen struct {
	ro  recovery.Options
	cur *master.Master
}

func (p *primaryOpen) apply(_ context.Context, b translog.Batch) error {
	_, err := applyBatch(p.cur, b)
	return err
}

// primaryTerm is the term openPrimary claims: term if set, else the one an
// earlier attempt of this promotion claimed, else the next one (recorded
// for the attempts after this one).
func (n *Node) primaryTerm(ctx context.Context, term int64) (int64, error) {
	n.mu.Lock()
	if term == 0 {
		term = n.claim
	}
	n.mu.Unlock()
	if term != 0 {
		return term, nil
	}
	term, err := n.nextTerm(ctx)
	if err != nil {
		return 0, err
	}
	n.mu.Lock()
	n.claim = term
	n.mu.Unlock()
	return term, nil
}

// resumePrimary opens the log with the standby's master continuing from
// its position, replaying only what it had not applied. It returns a nil
// shard (and no error) when there is nothing to resume or the position is
// no longer on the lineage: the caller rebuilds then. observed is the
// generation the standby had read (-1: none).
func (n *Node) resumePrimary(ctx context.Context, term int64, p *primaryOpen) (sh *recovery.Shard, observed int64, err error) {
	n.mu.Lock()
	tl := n.tail
	n.mu.Unlock()
	if tl == nil || !tl.bootstrapped {
		return nil, -1, nil
	}
	p.cur = tl.m
	pos := tl.position()
	p.ro.Resume = &pos
	// The standby's position moves with what is replayed, so a retry
	// after a failure part-way resumes where this one got.
	p.ro.Apply = func(ctx context.Context, b translog.Batch) error {
		if err := p.apply(ctx, b); err != nil {
			return err
		}
		tl.mu.Lock()
		tl.pos = recovery.Position{Term: b.Term, Gen: b.Gen, NextSeqNo: b.FirstSeqNo + int64(len(b.Ops))}
		tl.mu.Unlock()
		return nil
	}
	sh, err = recovery.Open(ctx, n.store, n.shard, term, n.alloc, p.ro)
	// A generation missing after the standby's position was collected
	// below a newer snapshot (the old primary's GC can land while the
	// promotion reads): the snapshot holds it, and the rebuild fails on
	// its own if a generation it needs is missing for any other reason.
	if errors.Is(err, recovery.ErrResumeOffLineage) || errors.Is(err, seal.ErrLineageTruncated) || errors.Is(err, translog.ErrMissingGen) {
		n.log.Warn("the standby's position is not on the sealed lineage; rebuilding from the newest snapshot", "term", pos.Term, "gen", pos.Gen, "err", err)
		sh, err = nil, nil
	} else if err != nil {
		return nil, pos.Gen, err
	}
	p.ro.Resume = nil
	p.ro.Apply = p.apply
	return sh, pos.Gen, nil
}

// rebuildPrimary opens the log with a fresh master built from the newest
// snapshot that restores (downloaded into dir) and the log after it.
func (n *Node) rebuildPrimary(ctx context.Context, term int64, dir string, p *primaryOpen) (*recovery.Shard, error) {
	var err error
	if p.cur, err = n.newMaster(); err != nil {
		return nil, err
	}
	p.ro.Dir = dir
	p.ro.AcceptCheckpoint = func(m seal.Manifest, paths []string) error {
		cand, err := n.restoreCandidate(ctx, m, paths)
		if err != nil {
			n.log.Warn("complete snapshot refused; trying an older one", "checkpoint", m.Key(), "err", err)
			return err
		}
		p.cur = cand
		return nil
	}
	sh, err := recovery.Open(ctx, n.store, n.shard, term, n.alloc, p.ro)
	if err != nil {
		return nil, err
	}
	n.opts.Metrics.candidateFallbacks.Add(float64(len(sh.Refused)))
	return sh, nil
}

// becomePrimary makes cur, opened as sh at term, this node's primary
// master: its journal the log from the restore point on, every client it
// names a fresh liveness window, and the node's role, leader record and
// last snapshot published.
func (n *Node) becomePrimary(cur *master.Master, sh *recovery.Shard, term, claimed, observed, life int64) {
	restore := sh.Restore()
	pos := recovery.Position{Term: restore.Term, Gen: restore.Gen, NextSeqNo: sh.NextSeqNo}
	lg := newOplog(sh.Writer, sh.Chain, n.opts.Clock, oplogOptions{
		from: pos, maxBytes: int(n.syncLimit()), metrics: n.opts.Metrics, onFail: n.onLogFail,
		lease: n.opts.AllocationLease, notBefore: sh.Chain.SweptAt() + int64(n.opts.AllocationLease+n.opts.AllocationLeaseMargin),
		leadership: LeaseFor(n.opts.ElectionTimeout), claimed: claimed, quietUntil: n.quietUntil(sh, observed, life),
	})
	cur.SetJournal(lg)
	// Every client the restored state names starts a fresh Active window:
	// the old master's windows are not carried over.
	restoredClients := cur.RestoreLiveness()
	n.mu.Lock()
	n.m, n.sh, n.oplog, n.term, n.claim = cur, sh, lg, term, 0
	n.role, n.err, n.tail = RolePrimary, nil, nil
	n.lost = make(chan struct{})
	n.leader.Store(&master.Leader{Node: n.opts.Node, Addr: n.opts.Advertise, Term: term})
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
}

// quietUntil is when a new primary may start answering, so that two
// masters never answer at once. The old primary's leadership lease runs
// from the send time of an acknowledged append: for a generation the
// standby saw, no later than its last sign of life (life); for one it did
// not see (its md landed after the standby's last read, its fence CAS
// before the claim's sweep), no later than the sweep. The new primary
// answers once the latest of these leases, plus the drift margin, has run
// out. An election claims only after a whole timeout without a sign of
// life, so after one it answers at once unless the restore point holds an
// unseen generation; a promote by hand right after a sign of life waits
// up to the timeout.
func (n *Node) quietUntil(sh *recovery.Shard, observed, life int64) int64 {
	return QuietUntil(n.opts.ElectionTimeout, observed, life, sh.Restore().Gen, sh.Chain.SweptAt(), n.opts.Clock.Now())
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
	n.mu.Lock()
	n.role, n.err = role, err
	n.publishLocked()
	if n.lost != nil {
		close(n.lost)
		n.lost = nil
	}
	n.mu.Unlock()
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
	// The leader entry: at once, so standbys learn where this primary
	// serves, then every renewal interval, so an idle log still shows
	// standbys a new generation (a busy one carries it in a batch it
	// writes anyway).
	renewTick := time.NewTicker(RenewEvery(n.opts.ElectionTimeout))
	defer renewTick.Stop()
	n.renew()
	// The liveness monitor (and its offboarding executor) runs while this
	// node is primary; it drains when the node stops or stops serving.
	liveCtx, stopLive := context.WithCancel(ctx)
	n.mu.Lock()
	m, lost := n.m, n.lost
	n.stopLiveness = stopLive
	n.mu.Unlock()
	if lost == nil {
		return // the log failed before it served
	}
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
		case <-lost:
			return
		case <-renewTick.C:
			n.renew()
		case req := <-n.reqs:
			if req.promote {
				// Also the answer to the second of two promotions sent
				// together: the first made this master primary.
				req.out <- result{err: fmt.Errorf("%w: this master is already the primary, at term %d (an earlier promote, perhaps one sent at the same time, or an election made it primary); nothing was done", master.ErrInvalidArgument, n.Status().Term)}
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

// renew records a leader entry: it carries this master's name, address
// and election timeout to the standbys, and its generation renews the
// leadership lease and shows standbys the primary is alive. Its ticket is
// not waited for: a failed append fails the log and the node steps down.
func (n *Node) renew() {
	n.mu.Lock()
	lg := n.oplog
	n.mu.Unlock()
	if lg == nil {
		return
	}
	lg.Record(&master.Op{Kind: master.OpLeader, Leader: &masterv1.MasterLeader{
		Node: n.opts.Node, Addr: n.opts.Advertise, ElectionTimeoutMs: uint64(n.opts.ElectionTimeout.Milliseconds()),
	}})
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
func (n *Node) promote(ctx context.Context, term int64) (PromoteResult, error) {
	start := time.Now()
	n.mu.Lock()
	was := n.role
	n.mu.Unlock()
	n.setRole(RoleOpening, nil)
	if err := n.openPrimary(ctx, true, term); err != nil {
		n.setRole(was, nil)
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
// generation applied. It returns the generation's last leader entry, if
// any (they change no state).
func applyBatch(m *master.Master, b translog.Batch) (*masterv1.MasterLeader, error) {
	ops := make([]*master.Op, len(b.Ops))
	for i, raw := range b.Ops {
		op, err := master.DecodeEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %d (sequence number %d) of generation %d, term %d: %w", i, b.FirstSeqNo+int64(i), b.Gen, b.Term, err)
		}
		ops[i] = op
	}
	ctx := context.Background()
	var leader *masterv1.MasterLeader
	for i, op := range ops {
		if op.Kind == master.OpLeader {
			leader = op.Leader
			continue
		}
		if err := m.ReplayStandby(ctx, op); err != nil {
			return nil, fmt.Errorf("entry %d (sequence number %d) of generation %d, term %d: %w", i, b.FirstSeqNo+int64(i), b.Gen, b.Term, err)
		}
	}
	return leader, nil
}
