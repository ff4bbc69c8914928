package master

import (
	"context"
	"errors"
	"fmt"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/master/internal/alloc"
)

// RestoreResult reports a standby restore.
type RestoreResult struct {
	Segments int
	Objects  int
	// Dropped counts objects left out because no replica was complete:
	// an in-progress put cannot be recovered, its client must put again.
	Dropped int
}

// RestoreStandby rebuilds objects and segments from the standby model after
// a promotion. The model has no deadlines, so restored objects start with
// none; hard pin and soft-pin enabled are kept. Memory replicas come back
// unreadable, on segments awaiting remount: reads leave them out, eviction
// never selects them, and ReMountSegment later grants the recovery lease and
// makes them readable. Disk replicas are readable at once.
//
// The restore is all or nothing: the whole input is validated before any of
// it is applied, and nothing changes on error.
func (m *Master) RestoreStandby(ctx context.Context, segs []*masterv1.StandbySegment, objs []*masterv1.StandbyObject) (RestoreResult, error) {
	fail := func(tenant, key string, seg uint64, err error, hint string) (RestoreResult, error) {
		return RestoreResult{}, &Error{Op: "RestoreStandby", Tenant: tenant, Key: key, Segment: seg, Err: err, Hint: hint}
	}
	if err := ctx.Err(); err != nil {
		return fail("", "", 0, err, "")
	}
	m.topo.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			m.topo.Unlock()
		}
	}()

	fresh := make(map[uint64]*masterv1.StandbySegment, len(segs))
	for _, s := range segs {
		switch {
		case s.GetId() == 0 || s.GetSize() == 0 || s.GetClientId() == "":
			return fail("", "", s.GetId(), fmt.Errorf("%w: segment needs an id, a size and a client", ErrInvalidArgument), "the standby payload is malformed")
		case m.segments[s.GetId()] != nil || fresh[s.GetId()] != nil:
			return fail("", "", s.GetId(), ErrSegmentExists, "restore into a master that does not know the segment yet")
		}
		fresh[s.GetId()] = s
	}
	seen := make(map[objectKey]struct{}, len(objs))
	for _, so := range objs {
		if err := validateObjectRef("RestoreStandby", so.GetTenant(), so.GetKey()); err != nil {
			return RestoreResult{}, err
		}
		k := objectKey{so.GetTenant(), so.GetKey()}
		if _, dup := seen[k]; dup {
			return fail(k.tenant, k.key, 0, ErrDuplicateBatchObject, "the standby payload lists the object twice")
		}
		seen[k] = struct{}{}
		sp := m.stripeFor(k.tenant, k.key)
		sp.mu.RLock()
		_, exists := sp.objects[k]
		sp.mu.RUnlock()
		if exists {
			return fail(k.tenant, k.key, 0, ErrObjectExists, "restore into an empty master")
		}
		for _, r := range so.GetReplicas() {
			if r.GetKind() != masterv1.ReplicaKind_REPLICA_KIND_MEMORY {
				continue
			}
			if err := m.checkRestoredSegment(fresh[r.GetSegmentId()] != nil, r.GetSegmentId()); err != nil {
				return fail(k.tenant, k.key, r.GetSegmentId(), err, "the standby payload must describe every segment it places replicas on, and they must await remount")
			}
			if r.GetSize() == 0 || r.GetOffset()+r.GetSize() < r.GetOffset() {
				return fail(k.tenant, k.key, r.GetSegmentId(), fmt.Errorf("%w: replica range %d+%d", ErrInvalidArgument, r.GetOffset(), r.GetSize()), "the standby payload is malformed")
			}
		}
	}

	var t Ticket
	for _, s := range segs {
		seg := &segment{id: s.GetId(), name: s.GetName(), client: m.clientFor(s.GetClientId()), base: s.GetBase(), size: s.GetSize(), state: segmentAwaitingRemount}
		m.segments[seg.id] = seg
		t = m.record(&Op{Kind: OpRestoreSegment, Client: s.GetClientId(), Segment: s})
	}
	res := RestoreResult{Segments: len(segs)}
	for _, so := range objs {
		o := m.restoredObject(so)
		if o == nil {
			res.Dropped++
			continue
		}
		sp := m.stripeFor(so.GetTenant(), so.GetKey())
		sp.mu.Lock()
		m.preserve(sp)
		sp.objects[objectKey{so.GetTenant(), so.GetKey()}] = o
		countReplicas(o.replicas, 1)
		o.tenant.used.Add(o.memoryBytes())
		o.tenant.objects.Add(1)
		t = m.record(&Op{Kind: OpRestoreObject, Tenant: so.GetTenant(), Key: so.GetKey(), Client: so.GetClientId(), Object: so})
		sp.mu.Unlock()
		if o.group != nil {
			m.join(o.group, o)
		}
		res.Objects++
	}
	m.topo.Unlock()
	unlocked = true
	// The journal acknowledges a prefix: the last record durable means
	// every one is.
	if err := durable(ctx, &Error{Op: "RestoreStandby"}, t); err != nil {
		return RestoreResult{}, err
	}
	return res, nil
}

// checkRestoredSegment accepts a memory replica's segment if it is being
// restored in the same call (fresh) or already awaits remount. A serving
// segment is refused: its allocator does not know the replica's bytes and
// would hand them out again. The caller holds topo.
func (m *Master) checkRestoredSegment(fresh bool, id uint64) error {
	if fresh {
		return nil
	}
	s := m.segments[id]
	switch {
	case s == nil:
		return fmt.Errorf("%w: replica on unknown segment", ErrSegmentNotFound)
	case s.state == segmentServing:
		return fmt.Errorf("%w: replica restored onto a serving segment", ErrSegmentExists)
	}
	return nil
}

// restoredObject builds an object from its standby description, keeping
// only complete replicas; nil if none is complete. The caller holds topo.
func (m *Master) restoredObject(so *masterv1.StandbyObject) *object {
	o := &object{
		key:            so.GetKey(),
		tenant:         m.tenantFor(so.GetTenant()),
		client:         m.clientFor(so.GetClientId()),
		size:           so.GetSize(),
		seq:            so.GetLastSequenceId(),
		dataType:       so.GetDataType(),
		hardPinned:     so.GetHardPinned(),
		softPinEnabled: so.GetSoftPinEnabled(),
	}
	for _, r := range so.GetReplicas() {
		if r.GetStatus() != masterv1.ReplicaStatus_REPLICA_STATUS_COMPLETE {
			continue
		}
		rep := replica{id: r.GetId(), offset: r.GetOffset(), size: r.GetSize(), handle: alloc.NoHandle, kind: ReplicaKind(r.GetKind()), status: ReplicaComplete}
		if rep.kind == MemoryReplica {
			// The segment awaits remount: no endpoint, no allocator. A
			// handle from the old primary means nothing here until the
			// client proves the memory is there by remounting.
			rep.seg = m.segments[r.GetSegmentId()]
		}
		if id := r.GetId(); id > m.nextReplicaID.Load() {
			m.nextReplicaID.Store(id)
		}
		o.replicas = append(o.replicas, rep)
	}
	if len(o.replicas) == 0 {
		return nil
	}
	if g := so.GetGroupId(); g != "" {
		o.group = m.groupFor(groupKey{so.GetTenant(), g})
	}
	return o
}

// ReplayStandby applies one operation of the primary's log to a standby.
// The standby keeps the primary's durable state in the unreadable form a
// promotion needs: segments await remount and memory replicas stay invalid,
// so a promoted standby serves nothing until clients remount. Each object
// record replaces the object whole, with no deadline, so a replay never
// inherits a lease from an older entry. PutStart records are skipped: a put
// that has not ended cannot be recovered, and its client puts again.
func (m *Master) ReplayStandby(ctx context.Context, op *Op) error {
	fail := func(err error) error {
		return &Error{Op: "ReplayStandby", Tenant: op.Tenant, Key: op.Key, Err: err, Hint: "the log record is malformed or out of order; rebuild the standby from a snapshot"}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	switch op.Kind {
	case OpPutStart, OpRemountSegment, OpLeader:
		return nil
	case OpNode, OpAssignShard:
		if op.Node == nil && op.Shard == nil {
			return fail(fmt.Errorf("%w: %v record without its body", ErrInvalidArgument, op.Kind))
		}
		m.topo.RLock()
		defer m.topo.RUnlock()
		m.fleet.replay(op)
		return nil
	case OpMountSegment, OpRestoreSegment:
		if op.Segment == nil {
			return fail(fmt.Errorf("%w: %v record without a segment", ErrInvalidArgument, op.Kind))
		}
		m.topo.Lock()
		defer m.topo.Unlock()
		if m.segments[op.Segment.GetId()] != nil {
			return nil
		}
		s := op.Segment
		m.segments[s.GetId()] = &segment{id: s.GetId(), name: s.GetName(), client: m.clientFor(s.GetClientId()), base: s.GetBase(), size: s.GetSize(), state: segmentAwaitingRemount}
		return nil
	case OpUnmountSegment:
		if op.Segment == nil {
			return fail(fmt.Errorf("%w: %v record without a segment", ErrInvalidArgument, op.Kind))
		}
		_, err := m.UnmountSegment(ctx, op.Segment.GetClientId(), op.Segment.GetId())
		if errors.Is(err, ErrSegmentNotFound) {
			return nil
		}
		return err
	case OpPutRevoke, OpRemove:
		m.topo.RLock()
		defer m.topo.RUnlock()
		sp := m.stripeFor(op.Tenant, op.Key)
		sp.mu.Lock()
		m.preserve(sp)
		o := sp.objects[objectKey{op.Tenant, op.Key}]
		if o != nil {
			m.freeReplicasLocked(o.replicas)
			m.deleteLocked(sp, o)
		}
		sp.mu.Unlock()
		if o != nil {
			m.leave(o)
		}
		return nil
	case OpPutEnd, OpRestoreObject, OpEvict:
		if op.Object == nil {
			return fail(fmt.Errorf("%w: %v record without an object", ErrInvalidArgument, op.Kind))
		}
		m.topo.RLock()
		defer m.topo.RUnlock()
		for _, r := range op.Object.GetReplicas() {
			if r.GetKind() != masterv1.ReplicaKind_REPLICA_KIND_MEMORY {
				continue
			}
			if err := m.checkRestoredSegment(false, r.GetSegmentId()); err != nil {
				return &Error{Op: "ReplayStandby", Tenant: op.Tenant, Key: op.Key, Segment: r.GetSegmentId(), Err: err, Hint: "the log names a segment before mounting it, or the standby serves it; rebuild the standby from a snapshot"}
			}
		}
		fresh := m.restoredObject(op.Object)
		k := objectKey{op.Object.GetTenant(), op.Object.GetKey()}
		sp := m.stripeFor(k.tenant, k.key)
		sp.mu.Lock()
		m.preserve(sp)
		old := sp.objects[k]
		if old != nil {
			m.freeReplicasLocked(old.replicas)
			m.deleteLocked(sp, old)
		}
		if fresh != nil {
			sp.objects[k] = fresh
			countReplicas(fresh.replicas, 1)
			fresh.tenant.used.Add(fresh.memoryBytes())
			fresh.tenant.objects.Add(1)
		}
		sp.mu.Unlock()
		if old != nil {
			m.leave(old)
		}
		if fresh != nil && fresh.group != nil {
			m.join(fresh.group, fresh)
		}
		return nil
	}
	return fail(fmt.Errorf("%w: unknown operation %v", ErrInvalidArgument, op.Kind))
}
