package master

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/master/internal/alloc"
)

// ReplicaKind says where a replica's bytes live.
type ReplicaKind uint8

// Replica kinds.
const (
	MemoryReplica ReplicaKind = 1
	DiskReplica   ReplicaKind = 2
)

// ReplicaStatus is a replica's lifecycle state.
type ReplicaStatus uint8

// Replica states.
const (
	ReplicaProcessing ReplicaStatus = 1
	ReplicaComplete   ReplicaStatus = 2
	ReplicaRemoved    ReplicaStatus = 3
	ReplicaFailed     ReplicaStatus = 4
)

// replica is one copy of an object. Its fields are guarded by the object's
// stripe lock.
type replica struct {
	id     uint64
	seg    *segment // nil for a disk replica
	offset uint64
	size   uint64
	handle uint32 // allocator handle, valid only while the segment serves
	refcnt int32  // in-flight copy/move/offload readers
	kind   ReplicaKind
	status ReplicaStatus
}

// readable is the serving rule: complete and, for memory, with a valid
// endpoint. A segment restored from the standby model has no endpoint (nil)
// until ReMountSegment publishes the one its client just proved, so this is
// the invalid-endpoint check: one atomic load through the pointer the
// replica holds, which the read path loads anyway to return the endpoint.
// There is no recovery flag and no segment lookup.
func (r *replica) readable() bool {
	if r.status != ReplicaComplete {
		return false
	}
	return r.kind != MemoryReplica || (r.seg != nil && r.seg.endpoint.Load() != nil)
}

// evictableReplica is the one rule for whether memory pressure may drop a
// replica: a complete memory replica nobody is copying from, and readable.
// Candidate census, re-validation, the mutation, the operation-log
// prediction of what remains, offload-source choice, tenant-quota eviction
// and group eviction all call it and nothing else, so an unreadable replica
// (its segment not yet remounted after a failover) is never evicted,
// whatever its lease: dropping it frees no serviceable memory and may discard
// the only recoverable copy. Explicit Remove and UnmountSegment are lifecycle
// operations and do not consult it.
func evictableReplica(r *replica) bool {
	return r.kind == MemoryReplica && r.status == ReplicaComplete && r.refcnt == 0 && r.readable()
}

// object is the metadata of one (tenant, key). Structural fields are guarded
// by the stripe lock; lease and softPin are atomics so a read can extend them
// under the stripe's read lock.
type object struct {
	key      string
	tenant   *tenant
	client   *client
	size     uint64
	replicas []replica
	group    *group
	lease    atomic.Int64 // SteadyTime lease deadline
	softPin  atomic.Int64 // SteadyTime soft-pin deadline; 0 means none granted
	putStart int64        // wall-clock Unix ns: display only, never a lease input
	seq      uint64       // last operation-log sequence that described it
	dataType uint32
	// hardPinned is immutable after PutStart: the object is never evicted.
	hardPinned bool
	// softPinEnabled says the object takes part in soft pinning; whether a
	// soft-pin interval is active right now is softPin > now.
	softPinEnabled bool
}

// maxStore raises v to x if x is later: grants only ever extend.
func maxStore(v *atomic.Int64, x SteadyTime) {
	for {
		cur := v.Load()
		if SteadyTime(cur) >= x || v.CompareAndSwap(cur, int64(x)) {
			return
		}
	}
}

// GrantLease extends the lease to now+ttl and, for a soft-pin-enabled
// object, the soft pin to now+softTTL. The caller samples now once per
// logical operation.
func (o *object) GrantLease(now SteadyTime, ttl, softTTL time.Duration) {
	o.GrantLeaseUntil(now.Add(ttl), now.Add(softTTL))
}

// GrantLeaseUntil extends the lease to deadline and, for a soft-pin-enabled
// object, the soft pin to softDeadline. It never shortens either: a
// concurrent read or an earlier remount may already have granted more.
func (o *object) GrantLeaseUntil(deadline, softDeadline SteadyTime) {
	maxStore(&o.lease, deadline)
	if o.softPinEnabled {
		maxStore(&o.softPin, softDeadline)
	}
}

func (o *object) leaseDeadline() SteadyTime { return SteadyTime(o.lease.Load()) }

func (o *object) leaseExpired(now SteadyTime) bool { return o.leaseDeadline() <= now }

func (o *object) softPinActive(now SteadyTime) bool {
	return o.softPinEnabled && SteadyTime(o.softPin.Load()) > now
}

// memoryBytes is what the object charges to its tenant.
func (o *object) memoryBytes() uint64 {
	var n uint64
	for i := range o.replicas {
		if o.replicas[i].kind == MemoryReplica {
			n += o.replicas[i].size
		}
	}
	return n
}

type objectKey struct {
	tenant, key string
}

type stripe struct {
	mu      sync.RWMutex
	objects map[objectKey]*object
	idx     int      // position in Master.stripes
	_       [32]byte // keep neighbouring stripe locks off one cache line
}

type tenant struct {
	name    string
	quota   uint64 // 0: unlimited
	used    atomic.Uint64
	objects atomic.Int64
	puts    int // puts in progress (tenantForPut); guarded by the master's tenantsMu
}

// release returns n bytes of the tenant's usage.
func (t *tenant) release(n uint64) { t.used.Add(^(n - 1)) }

type client struct {
	id string
}

type groupKey struct {
	tenant, id string
}

// group ties objects that are read and evicted together. Lock order: a
// group's mu is taken before any stripe lock, and never while holding one.
type group struct {
	key     groupKey
	mu      sync.RWMutex
	members []*object
}

type segmentState uint8

const (
	// segmentServing: mounted (or remounted) by its client; placement and
	// reads may use it.
	segmentServing segmentState = 1
	// segmentAwaitingRemount: known from the standby model after a
	// failover; its replicas are unreadable and it has no allocator yet.
	segmentAwaitingRemount segmentState = 2
)

// segment is a client's memory region. id, name, client, base and size never
// change; state is guarded by Master.topo; alloc by mu.
type segment struct {
	id       uint64
	name     string
	client   *client
	base     uint64
	size     uint64
	endpoint atomic.Pointer[string]
	// owner is the client incarnation that mounted (or remounted) the
	// segment; eligibility serves it only while that incarnation is
	// Active, so a later incarnation never revives it.
	owner atomic.Pointer[ClientLivenessRecord]
	state segmentState
	// remountSlot is 1+index of the segment in the remount in progress, 0
	// otherwise; it lets the remount scan match replicas without a map.
	remountSlot int
	// replicas counts the memory replicas on the segment, so a remount can
	// size its vectors once instead of growing them over millions of
	// appends.
	replicas atomic.Int64

	mu    sync.Mutex
	alloc *alloc.Allocator
}

// countReplicas adds delta to the replica count of each memory replica's
// segment. Called where replicas enter or leave the object table.
func countReplicas(reps []replica, delta int64) {
	for i := range reps {
		if reps[i].kind == MemoryReplica && reps[i].seg != nil {
			reps[i].seg.replicas.Add(delta)
		}
	}
}

func (s *segment) endpointString() string {
	if p := s.endpoint.Load(); p != nil {
		return *p
	}
	return ""
}
