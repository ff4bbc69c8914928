package master

import (
	"context"
	"fmt"
	"time"
)

// GetReplicaList grants the object a read lease (and its group, with the same
// now) and returns its readable replicas. The read path is a stripe read lock,
// a map lookup and an atomic lease extension. There is no recovery flag and
// no segment lookup: readability is the replica's status and the endpoint
// it points at, which the reply carries anyway, and liveness is one atomic
// load through the segment's owner (ServingEligibility). A replica that is
// not readable (still being written, or restored and awaiting its
// segment's remount) or whose client is not Active is left out; an object
// with none fails with ErrNoReadableReplica.
func (m *Master) GetReplicaList(ctx context.Context, tenant, key string) ([]ReplicaInfo, error) {
	return m.AppendReplicaList(ctx, nil, tenant, key)
}

// AppendReplicaList is GetReplicaList appending to dst, for callers that
// reuse a buffer. A memory replica is returned only if ServingEligibility
// serves its segment (one atomic load of the owner's state): a Suspected
// client's replicas are retained but get no new descriptor.
func (m *Master) AppendReplicaList(ctx context.Context, dst []ReplicaInfo, tenant, key string) ([]ReplicaInfo, error) {
	if err := ctx.Err(); err != nil {
		return dst, &Error{Op: "GetReplicaList", Tenant: tenant, Key: key, Err: err}
	}
	sp := m.stripeFor(tenant, key)
	sp.mu.RLock()
	o := sp.objects[objectKey{tenant, key}]
	if o == nil {
		sp.mu.RUnlock()
		return dst, &Error{Op: "GetReplicaList", Tenant: tenant, Key: key, Err: ErrObjectNotFound, Hint: "the object was never put, or was removed or evicted; put it again"}
	}
	now := m.clock.Steady()
	o.GrantLease(now, m.cfg.DefaultLeaseTTL, m.cfg.SoftPinTTL)
	n := len(dst)
	processing, held := false, false
	for i := range o.replicas {
		r := &o.replicas[i]
		if !r.readable() {
			processing = processing || r.status == ReplicaProcessing
			continue
		}
		// A descriptor is new work for the segment's owner: none for a
		// client that is not Active (its replica is retained, not
		// served).
		if r.kind == MemoryReplica && !m.eligibility.CanServe(r.seg) {
			held = true
			continue
		}
		dst = append(dst, r.info())
	}
	g := o.group
	sp.mu.RUnlock()
	if g != nil {
		g.refresh(now, m.cfg.DefaultLeaseTTL, m.cfg.SoftPinTTL)
	}
	if len(dst) == n {
		hint := "its segments are awaiting remount after a master failover; retry after the client remounts"
		switch {
		case processing:
			hint = "it is still being written; retry after PutEnd"
		case held:
			hint = "the clients holding its memory are not responding (suspected or offline); retry shortly, or put it again"
		}
		return dst, &Error{Op: "GetReplicaList", Tenant: tenant, Key: key, Err: ErrNoReadableReplica, Hint: hint}
	}
	return dst, nil
}

// Exist reports whether the object exists and, if so, grants it (and its
// group) a read lease.
func (m *Master) Exist(ctx context.Context, tenant, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, &Error{Op: "Exist", Tenant: tenant, Key: key, Err: err}
	}
	sp := m.stripeFor(tenant, key)
	sp.mu.RLock()
	o := sp.objects[objectKey{tenant, key}]
	if o == nil {
		sp.mu.RUnlock()
		return false, nil
	}
	now := m.clock.Steady()
	o.GrantLease(now, m.cfg.DefaultLeaseTTL, m.cfg.SoftPinTTL)
	g := o.group
	sp.mu.RUnlock()
	if g != nil {
		g.refresh(now, m.cfg.DefaultLeaseTTL, m.cfg.SoftPinTTL)
	}
	return true, nil
}

// refresh extends every member's lease from one now. The group read lock
// keeps a group eviction (which holds the write lock while it re-checks that
// every member expired) from interleaving with it.
func (g *group) refresh(now SteadyTime, ttl, softTTL time.Duration) {
	deadline, soft := now.Add(ttl), now.Add(softTTL)
	g.mu.RLock()
	for _, o := range g.members {
		o.GrantLeaseUntil(deadline, soft)
	}
	g.mu.RUnlock()
}

// Remove deletes an object and frees its memory. It refuses an object that
// is leased (being read), still being written, or has replicas in use by a
// copy, unless force is set. Removal is a lifecycle operation: it does not
// consult the eviction rule and removes unreadable replicas too.
func (m *Master) Remove(ctx context.Context, tenant, key string, force bool) error {
	t, err := m.remove(ctx, tenant, key, force)
	if err != nil {
		return err
	}
	return durable(ctx, &Error{Op: "Remove", Tenant: tenant, Key: key}, t)
}

func (m *Master) remove(ctx context.Context, tenant, key string, force bool) (Ticket, error) {
	ref := Error{Op: "Remove", Tenant: tenant, Key: key}
	fail := func(err error, hint string) (Ticket, error) { return nil, ref.with(err, hint) }
	sp, o, err := m.beginChange(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer m.topo.RUnlock()
	if o == nil {
		sp.mu.Unlock()
		return fail(ErrObjectNotFound, "nothing to remove")
	}
	if !force {
		now := m.clock.Steady()
		if !o.leaseExpired(now) {
			left := o.leaseDeadline() - now
			sp.mu.Unlock()
			return fail(fmt.Errorf("%w: %d ms of lease left", ErrObjectLeased, durationMS(toDuration(left))), "retry after the lease expires, or force the removal")
		}
		for i := range o.replicas {
			r := &o.replicas[i]
			if r.status == ReplicaProcessing {
				sp.mu.Unlock()
				return fail(ErrObjectNotComplete, "revoke the put, or force the removal")
			}
			if r.refcnt > 0 {
				sp.mu.Unlock()
				return fail(fmt.Errorf("%w: replica %d has %d readers", ErrObjectLeased, r.id, r.refcnt), "retry later, or force the removal")
			}
		}
	}
	// Recorded before the space is freed (see Journal).
	t := m.record(&Op{Kind: OpRemove, Tenant: tenant, Key: key})
	m.freeReplicasLocked(o.replicas)
	m.deleteLocked(sp, o)
	sp.mu.Unlock()
	m.leave(o)
	return t, nil
}
