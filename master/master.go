package master

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// OpKind names a durable state change.
type OpKind uint8

// Durable state changes. Lease grants are deliberately absent: they are
// process-local cache policy and never logged.
const (
	OpMountSegment OpKind = iota + 1
	OpUnmountSegment
	OpRemountSegment
	OpPutStart
	OpPutEnd
	OpPutRevoke
	OpRemove
	OpEvict
	OpRestoreSegment
	OpRestoreObject
	// OpNode records a sidecar node (registration, address, store,
	// drain).
	OpNode
	// OpAssignShard records a shard assignment after a change (assign,
	// takeover at a higher term, handoff start, end or cancel, unassign).
	OpAssignShard
	// OpLeader is the primary master's record of itself (its node name,
	// address and election timeout). It changes no state: its generation
	// proves the primary alive to standbys, and it tells them where the
	// primary serves.
	OpLeader
)

var opNames = [...]string{"", "MountSegment", "UnmountSegment", "ReMountSegment", "PutStart", "PutEnd", "PutRevoke", "Remove", "Evict", "RestoreSegment", "RestoreObject", "Node", "AssignShard", "Leader"}

func (k OpKind) String() string {
	if int(k) < len(opNames) && k > 0 {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", k)
}

// Op is one state change as a log records it: what changed, described in the
// standby wire model (no lease or soft-pin deadlines).
type Op struct {
	Kind   OpKind
	Tenant string
	Key    string
	Client string
	// Object is the object after the change (PutStart, PutEnd, Evict,
	// RestoreObject); for Evict it lists the replicas that remain.
	Object *masterv1.StandbyObject
	// Segment is the segment concerned (Mount, Unmount, Remount, Restore).
	Segment *masterv1.StandbySegment
	// Node is the sidecar node after the change (OpNode).
	Node *masterv1.NodeRecord
	// Shard is the shard assignment after the change (OpAssignShard).
	Shard *masterv1.ShardAssignment
	// Leader is the primary's record of itself (OpLeader).
	Leader *masterv1.MasterLeader
}

// Journal is the master's operation log. Record is called while the
// changed object's (or the topology's) lock is still held, so records of
// one key arrive in apply order, and before the change frees any memory, so
// no placement can hand out space whose release the log does not hold yet.
// Record must not block or call back into the Master; it returns the
// Ticket the operation's caller waits on, after releasing its locks, before
// it answers.
//
// A Journal acknowledges a prefix of what was recorded: once a ticket's
// Wait returns nil, every operation recorded before it is durable too. When
// the log fails, every pending and later ticket fails and the master must
// stop serving (its memory holds changes the log does not): the error
// wraps ErrFenced when a newer master took the log over, ErrLogFailed
// otherwise.
type Journal interface {
	Record(op *Op) Ticket
	// Sync returns a ticket for everything recorded so far.
	Sync() Ticket
	// Placement returns the ticket placement waits on before it hands
	// out memory: every change recorded so far that freed memory (see
	// FreesMemory) is durable, and the master still holds the log, so no
	// newer master can be handing out the same space.
	Placement() Ticket
}

// FreesMemory reports whether an operation of kind k returns memory that
// was durably assigned (a Remove, an eviction, an unmount): placement must
// not hand that space out before the log holds the change.
func FreesMemory(k OpKind) bool {
	return k == OpRemove || k == OpEvict || k == OpUnmountSegment
}

// Ticket is a recorded operation's way to durability.
type Ticket interface {
	// Wait returns nil once the operation (and every one recorded before
	// it) is durable, the log's error if it never will be, or the
	// context's error if ctx ends first (the outcome is then unknown: the
	// operation is applied here and still on its way to the log).
	Wait(ctx context.Context) error
}

// Offloader receives an object's memory replica to copy elsewhere before
// memory pressure drops the object's last memory replica. It is called with
// the object's stripe lock held: it must queue the work and return, and must
// not call back into the Master.
type Offloader interface {
	Offload(tenant, key string, source ReplicaInfo)
}

// Options wire a Master to its environment. Nil fields get defaults.
type Options struct {
	Clock     Clock
	Journal   Journal
	Offloader Offloader
	// Eligibility decides whether a client-owned resource may take new
	// work; default LivenessEligibility.
	Eligibility ServingEligibility
	Metrics     *Metrics
	// ExternalCleanup, when set, is the last step of every client
	// offboarding (after its segments and shards): cleanup outside the
	// master, retried with the job until it succeeds.
	ExternalCleanup func(ctx context.Context, job *ClientOffboardingJob) error
	// Logger receives liveness, offboarding and failover events.
	Logger *slog.Logger
}

// Master holds the metadata of every object, segment and client.
//
// Lock order: topo, then evictMu, then a group's mu, then stripe locks, then a
// segment's mu. The read path takes only one stripe's read lock (and then,
// with it released, its group's read lock).
type Master struct {
	cfg         Config
	clock       Clock
	journal     Journal
	offloader   Offloader
	eligibility ServingEligibility
	metrics     *Metrics
	log         *slog.Logger
	seed        maphash.Seed

	live            *Liveness
	offboarding     *offboarder
	fleet           *fleet
	externalCleanup func(ctx context.Context, job *ClientOffboardingJob) error
	stripes         []stripe

	// topo guards the segment set and every segment's state: shared by
	// operations that place or free replicas, exclusive for mount, unmount,
	// remount and restore.
	topo     sync.RWMutex
	segments map[uint64]*segment
	serving  []*segment // placement order
	cursor   atomic.Uint64

	evictMu sync.Mutex

	// cow is the complete snapshot being copied, if any: a change to a
	// stripe it has not copied yet copies the stripe first (preserve).
	cow atomic.Pointer[snapshotCopy]

	tenantsMu sync.Mutex
	tenants   map[string]*tenant
	clientsMu sync.Mutex
	clients   map[string]*client
	groupsMu  sync.Mutex
	groups    map[groupKey]*group

	nextReplicaID atomic.Uint64
	evicted       atomic.Uint64
	skipped       atomic.Uint64
	remounts      atomic.Uint64
	lastRemount   atomic.Pointer[RemountResult]
}

// New returns an empty master.
func New(cfg Config, opts Options) (*Master, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, &Error{Op: "New", Err: err, Hint: "fix the master configuration"}
	}
	m := &Master{
		cfg:         cfg,
		clock:       opts.Clock,
		journal:     opts.Journal,
		offloader:   opts.Offloader,
		eligibility: opts.Eligibility,
		metrics:     opts.Metrics,
		log:         opts.Logger,
		seed:        maphash.MakeSeed(),
		stripes:     make([]stripe, cfg.Shards),
		segments:    map[uint64]*segment{},
		tenants:     map[string]*tenant{},
		clients:     map[string]*client{},
		groups:      map[groupKey]*group{},
	}
	if m.clock == nil {
		m.clock = NewRealClock()
	}
	if m.eligibility == nil {
		m.eligibility = LivenessEligibility{}
	}
	if m.metrics == nil {
		m.metrics = NewMetrics(nil)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.externalCleanup = opts.ExternalCleanup
	m.live = newLiveness(cfg.Liveness, m.clock)
	m.offboarding = newOffboarder(m, cfg.Offboarding, m.log)
	m.fleet = newFleet(m)
	for i := range m.stripes {
		m.stripes[i].objects = map[objectKey]*object{}
		m.stripes[i].idx = i
	}
	return m, nil
}

// SetJournal attaches the operation log a restored or replayed master
// records its changes to from now on. It must be called before the master
// serves (a promotion attaches the log it just claimed).
func (m *Master) SetJournal(j Journal) { m.journal = j }

// Config returns the effective configuration.
func (m *Master) Config() Config { return m.cfg }

// Clock returns the master's clock.
func (m *Master) Clock() Clock { return m.clock }

func (m *Master) stripeFor(tenant, key string) *stripe {
	h := maphash.String(m.seed, key) ^ maphash.String(m.seed, tenant)*0x9e3779b97f4a7c15
	return &m.stripes[h%uint64(len(m.stripes))]
}

func (m *Master) tenantFor(name string) *tenant {
	m.tenantsMu.Lock()
	defer m.tenantsMu.Unlock()
	return lookupOrAdd(m.tenants, name, m.newTenant)
}

// newTenant is a tenant not in the table yet, with its configured quota.
func (m *Master) newTenant(name string) *tenant {
	return &tenant{name: name, quota: m.cfg.TenantQuotas[name]}
}

// tenantForPut is tenantFor for a put in progress, which donePut ends:
// the entry stays while a put may still charge it.
func (m *Master) tenantForPut(name string) *tenant {
	m.tenantsMu.Lock()
	defer m.tenantsMu.Unlock()
	t := lookupOrAdd(m.tenants, name, m.newTenant)
	t.puts++
	return t
}

// donePut ends a put of tenantForPut; a tenant no put is charging, with
// no object and no bytes (every put of it was refused), leaves the table,
// so refusals cost no memory. A later put makes it again, with the same
// configured quota.
func (m *Master) donePut(t *tenant) {
	m.tenantsMu.Lock()
	defer m.tenantsMu.Unlock()
	t.puts--
	if t.puts == 0 && t.objects.Load() == 0 && t.used.Load() == 0 && m.tenants[t.name] == t {
		delete(m.tenants, t.name)
	}
}

func (m *Master) clientFor(id string) *client {
	m.clientsMu.Lock()
	defer m.clientsMu.Unlock()
	return lookupOrAdd(m.clients, id, newClient)
}

func (m *Master) groupFor(k groupKey) *group {
	m.groupsMu.Lock()
	defer m.groupsMu.Unlock()
	return lookupOrAdd(m.groups, k, newGroup)
}

func newClient(id string) *client { return &client{id: id} }

func newGroup(k groupKey) *group { return &group{key: k} }

// lookupOrAdd returns m[k], first storing made(k) there when m holds none:
// the table of tenants, clients and groups each entry is made in.
func lookupOrAdd[K comparable, V any](m map[K]*V, k K, made func(K) *V) *V {
	v := m[k]
	if v == nil {
		v = made(k)
		m[k] = v
	}
	return v
}

// join adds o to g. Called with no stripe lock held.
func (m *Master) join(g *group, o *object) {
	g.mu.Lock()
	g.members = append(g.members, o)
	g.mu.Unlock()
}

// leave drops removed objects from their groups. Called with no shard or
// group lock held.
func (m *Master) leave(objs ...*object) {
	for _, o := range objs {
		g := o.group
		if g == nil {
			continue
		}
		g.mu.Lock()
		for i, x := range g.members {
			if x == o {
				g.members = append(g.members[:i], g.members[i+1:]...)
				break
			}
		}
		empty := len(g.members) == 0
		g.mu.Unlock()
		if empty {
			m.groupsMu.Lock()
			g.mu.RLock()
			if len(g.members) == 0 && m.groups[g.key] == g {
				delete(m.groups, g.key)
			}
			g.mu.RUnlock()
			m.groupsMu.Unlock()
		}
	}
}

// record hands op to the journal; nil without one.
func (m *Master) record(op *Op) Ticket {
	if m.journal == nil {
		return nil
	}
	return m.journal.Record(op)
}

// sync is a ticket for everything recorded so far; nil without a journal.
func (m *Master) sync() Ticket {
	if m.journal == nil {
		return nil
	}
	return m.journal.Sync()
}

// placement is the ticket a placement waits on; nil without a journal.
func (m *Master) placement() Ticket {
	if m.journal == nil {
		return nil
	}
	return m.journal.Placement()
}

// durable waits, with no lock held, for the tickets of a change before its
// caller answers: a change is acknowledged only once the log holds it. On
// failure it fills in e (the operation and object concerned) with the
// log's error and what the client should do next.
func durable(ctx context.Context, e *Error, tickets ...Ticket) error {
	for _, t := range tickets {
		if t == nil {
			continue
		}
		if err := t.Wait(ctx); err != nil {
			e.Err = err
			switch {
			case errors.Is(err, ErrFenced):
				e.Hint = "a newer master took over the operation log; this master acknowledges nothing more: send the request to the current master"
			case errors.Is(err, ErrLogFailed), errors.Is(err, ErrNotPrimary):
				e.Hint = "the change is not durable and this master stopped serving; retry against the restarted or promoted master"
			default:
				e.Hint = "the change was applied and is on its way to the operation log, its outcome unknown: check the object before retrying"
			}
			return e
		}
	}
	return nil
}

// standbyObject describes o in the standby wire model.
func standbyObject(o *object) *masterv1.StandbyObject { return standbyObjectWith(o, o.replicas) }

// standbyObjectWith describes o as if its replicas were reps.
func standbyObjectWith(o *object, reps []replica) *masterv1.StandbyObject {
	so := &masterv1.StandbyObject{
		Tenant:         o.tenant.name,
		Key:            o.key,
		ClientId:       o.client.id,
		Size:           o.size,
		DataType:       o.dataType,
		HardPinned:     o.hardPinned,
		SoftPinEnabled: o.softPinEnabled,
		LastSequenceId: o.seq,
	}
	if o.group != nil {
		so.GroupId = o.group.key.id
	}
	so.Replicas = make([]*masterv1.StandbyReplica, 0, len(reps))
	for i := range reps {
		r := &reps[i]
		sr := &masterv1.StandbyReplica{Id: r.id, Kind: masterv1.ReplicaKind(r.kind), Status: masterv1.ReplicaStatus(r.status), Offset: r.offset, Size: r.size}
		if r.seg != nil {
			sr.SegmentId = r.seg.id
		}
		so.Replicas = append(so.Replicas, sr)
	}
	return so
}

func standbySegment(s *segment) *masterv1.StandbySegment {
	return &masterv1.StandbySegment{Id: s.id, Name: s.name, ClientId: s.client.id, Base: s.base, Size: s.size}
}

// ReplicaInfo describes a replica to callers.
type ReplicaInfo struct {
	ID          uint64
	Kind        ReplicaKind
	Status      ReplicaStatus
	SegmentID   uint64
	SegmentName string
	Endpoint    string
	Offset      uint64
	Size        uint64
}

func (r *replica) info() ReplicaInfo {
	ri := ReplicaInfo{ID: r.id, Kind: r.kind, Status: r.status, Offset: r.offset, Size: r.size}
	if r.seg != nil {
		ri.SegmentID, ri.SegmentName, ri.Endpoint = r.seg.id, r.seg.name, r.seg.endpointString()
	}
	return ri
}

// TenantStats is one tenant's usage.
type TenantStats struct {
	Tenant  string
	Objects uint64
	Used    uint64
	Quota   uint64
}

// Stats is a point-in-time summary for operators.
type Stats struct {
	Objects                   uint64
	Segments                  uint64
	SegmentsAwaitingRemount   uint64
	Capacity                  uint64
	Used                      uint64
	EvictedObjects            uint64
	SkippedUnreadableReplicas uint64
	Remounts                  uint64
	LastRemount               RemountResult
	Tenants                   []TenantStats
}

// Stats counts objects stripe by stripe; it is an admin call, not a hot path.
func (m *Master) Stats() Stats {
	var st Stats
	for i := range m.stripes {
		sp := &m.stripes[i]
		sp.mu.RLock()
		st.Objects += uint64(len(sp.objects))
		sp.mu.RUnlock()
	}
	m.topo.RLock()
	st.Segments = uint64(len(m.segments))
	for _, s := range m.segments {
		if s.state == segmentAwaitingRemount {
			st.SegmentsAwaitingRemount++
		}
	}
	st.Capacity, st.Used = m.usageLocked()
	m.topo.RUnlock()
	st.EvictedObjects = m.evicted.Load()
	st.SkippedUnreadableReplicas = m.skipped.Load()
	st.Remounts = m.remounts.Load()
	if r := m.lastRemount.Load(); r != nil {
		st.LastRemount = *r
	}
	m.tenantsMu.Lock()
	for _, t := range m.tenants {
		st.Tenants = append(st.Tenants, TenantStats{Tenant: t.name, Objects: uint64(t.objects.Load()), Used: t.used.Load(), Quota: t.quota})
	}
	m.tenantsMu.Unlock()
	sort.Slice(st.Tenants, func(i, j int) bool { return st.Tenants[i].Tenant < st.Tenants[j].Tenant })
	return st
}

// usageLocked sums capacity and used bytes over serving segments. The
// caller holds topo.
func (m *Master) usageLocked() (capacity, used uint64) {
	for _, s := range m.serving {
		s.mu.Lock()
		capacity += s.size
		if s.alloc != nil {
			used += s.alloc.Used()
		}
		s.mu.Unlock()
	}
	return capacity, used
}

func (m *Master) wallNow() int64 { return m.clock.Wall().UnixNano() }

// durationMS converts for the API, rounding a positive remainder up so a
// live lease never reads as 0 ms.
func durationMS(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}
