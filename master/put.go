package master

import (
	"context"
	"errors"
	"fmt"
)

// maxKeyLen bounds keys so one request cannot pin unbounded metadata.
const maxKeyLen = 4096

// PutOptions are the per-object settings of PutStart.
type PutOptions struct {
	// Replicas is the number of memory replicas, each on a distinct
	// segment; 0 means 1.
	Replicas int
	HardPin  bool
	SoftPin  bool
	Group    string
	DataType uint32
}

// PutRequest is one PutStart.
type PutRequest struct {
	Client string
	Tenant string
	Key    string
	Size   uint64
	PutOptions
}

func validateObjectRef(op, tenant, key string) error {
	switch {
	case key == "":
		return &Error{Op: op, Tenant: tenant, Err: fmt.Errorf("%w: empty key", ErrInvalidArgument), Hint: "name the object"}
	case len(key) > maxKeyLen || len(tenant) > maxKeyLen:
		return &Error{Op: op, Tenant: tenant, Key: key[:min(len(key), 64)], Err: fmt.Errorf("%w: tenant or key longer than %d bytes", ErrInvalidArgument, maxKeyLen), Hint: "use a shorter key"}
	}
	return nil
}

// PutStart places a new object: it allocates req.Replicas memory replicas on
// distinct serving segments and records the object as being written. The
// client writes the bytes and then calls PutEnd (or PutRevoke).
//
// A put in progress is not logged (a failover forgets it; its client puts
// again), but the answer waits until every change that freed memory before
// the placement is durable and the master has proved it still holds the
// log: the space handed out may have been freed by a Remove or an eviction
// a moment ago, and a client must never write into memory that a successor
// master would still assign to the old object.
func (m *Master) PutStart(ctx context.Context, req PutRequest) ([]ReplicaInfo, error) {
	infos, t, err := m.putStart(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := durable(ctx, &Error{Op: "PutStart", Tenant: req.Tenant, Key: req.Key, Client: req.Client}, t); err != nil {
		return nil, err
	}
	return infos, nil
}

func (m *Master) putStart(ctx context.Context, req PutRequest) ([]ReplicaInfo, Ticket, error) {
	if err := validateObjectRef("PutStart", req.Tenant, req.Key); err != nil {
		return nil, nil, err
	}
	fail := func(err error, hint string) error {
		return &Error{Op: "PutStart", Tenant: req.Tenant, Key: req.Key, Client: req.Client, Err: err, Hint: hint}
	}
	n := req.Replicas
	if n == 0 {
		n = 1
	}
	switch {
	case req.Client == "":
		return nil, nil, fail(fmt.Errorf("%w: empty client id", ErrInvalidArgument), "pass the id the client mounted its segments with")
	case req.Size == 0:
		return nil, nil, fail(fmt.Errorf("%w: size 0", ErrInvalidArgument), "objects must have at least one byte")
	case n < 0 || n > 64:
		return nil, nil, fail(fmt.Errorf("%w: %d replicas", ErrInvalidArgument, n), "ask for 1 to 64 replicas")
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fail(err, "")
	}
	sp := m.stripeFor(req.Tenant, req.Key)
	k := objectKey{req.Tenant, req.Key}
	sp.mu.RLock()
	_, exists := sp.objects[k]
	sp.mu.RUnlock()
	if exists {
		return nil, nil, fail(ErrObjectExists, "remove it first, or read the existing object")
	}

	m.topo.RLock()
	defer m.topo.RUnlock()
	// A refused put leaves no tenant behind: 50,000 refusals of unique
	// tenants used to keep 403 MB of entries for ever.
	t := m.tenantForPut(req.Tenant)
	defer m.donePut(t)
	need := req.Size * uint64(n)
	if need/uint64(n) != req.Size {
		return nil, nil, fail(fmt.Errorf("%w: size %d times %d replicas overflows", ErrInvalidArgument, req.Size, n), "")
	}
	if err := m.reserveQuotaLocked(t, need); err != nil {
		return nil, nil, fail(err, fmt.Sprintf("tenant quota is %d bytes; remove objects or raise the quota", t.quota))
	}
	reps, err := m.placeLocked(req.Size, n)
	if errors.Is(err, ErrNoSpace) {
		// Memory pressure: one eviction pass, then one more try.
		m.evictLocked(m.clock.Steady(), req.Size*uint64(n), nil)
		reps, err = m.placeLocked(req.Size, n)
	}
	if err != nil {
		t.release(need)
		return nil, nil, fail(err, placementHint(err))
	}

	o := &object{
		key:            req.Key,
		tenant:         t,
		client:         m.clientFor(req.Client),
		size:           req.Size,
		replicas:       reps,
		putStart:       m.wallNow(),
		dataType:       req.DataType,
		hardPinned:     req.HardPin,
		softPinEnabled: req.SoftPin,
	}
	if req.Group != "" {
		o.group = m.groupFor(groupKey{req.Tenant, req.Group})
	}
	sp.mu.Lock()
	m.preserve(sp)
	if _, exists := sp.objects[k]; exists {
		sp.mu.Unlock()
		m.freeReplicasLocked(reps)
		t.release(need)
		m.leave(o) // drops the group again if this put created it
		return nil, nil, fail(ErrObjectExists, "another PutStart for this key won the race; read it or remove it first")
	}
	sp.objects[k] = o
	countReplicas(o.replicas, 1)
	t.objects.Add(1) // its bytes were charged by reserveQuotaLocked
	infos := make([]ReplicaInfo, len(o.replicas))
	for i := range o.replicas {
		infos[i] = o.replicas[i].info()
	}
	sp.mu.Unlock()
	if o.group != nil {
		m.join(o.group, o)
	}
	// Taken after the allocation: every free that made this space
	// available was recorded before it was freed.
	return infos, m.placement(), nil
}

func placementHint(err error) string {
	switch {
	case errors.Is(err, ErrObjectTooLarge):
		return "split the object or mount a larger segment"
	case errors.Is(err, ErrNotEnoughSegments):
		return "ask for fewer replicas or mount more segments"
	default:
		return "retry later, free memory with Remove, or mount more segments"
	}
}

// reserveQuotaLocked charges need bytes to t before placement, evicting the
// tenant's own objects if that is what it takes. The charge is a
// compare-and-swap against the quota, so concurrent puts cannot overshoot
// it; the caller releases it if the put fails.
func (m *Master) reserveQuotaLocked(t *tenant, need uint64) error {
	if t.quota == 0 {
		t.used.Add(need)
		return nil
	}
	if need > t.quota {
		return fmt.Errorf("%w: %d bytes requested, quota %d", ErrQuotaExceeded, need, t.quota)
	}
	for attempt := 0; ; attempt++ {
		used := t.used.Load()
		if used+need <= t.quota {
			if t.used.CompareAndSwap(used, used+need) {
				return nil
			}
			continue
		}
		if attempt > 0 {
			return fmt.Errorf("%w: %d bytes used of %d, %d more requested and nothing evictable", ErrQuotaExceeded, used, t.quota, need)
		}
		m.evictLocked(m.clock.Steady(), used+need-t.quota, t)
	}
}

// placeLocked allocates n replicas of size bytes on distinct segments that
// may serve (ServingEligibility: a Suspected or Offline client's segment
// takes no new replica), going round the segments from a moving cursor to
// spread load.
// The caller holds topo.
func (m *Master) placeLocked(size uint64, n int) ([]replica, error) {
	var eligible, fits int
	for _, s := range m.serving {
		if !m.eligibility.CanServe(s) {
			continue
		}
		eligible++
		if s.size >= size {
			fits++
		}
	}
	switch {
	case fits == 0 && eligible > 0:
		return nil, fmt.Errorf("%w: %d bytes", ErrObjectTooLarge, size)
	case eligible < n:
		return nil, fmt.Errorf("%w: %d requested, %d serving", ErrNotEnoughSegments, n, eligible)
	case fits < n:
		return nil, fmt.Errorf("%w: %d bytes fit on %d segments, %d replicas requested", ErrObjectTooLarge, size, fits, n)
	}
	reps := make([]replica, 0, n)
	start := m.cursor.Add(1)
	for i := 0; i < len(m.serving) && len(reps) < n; i++ {
		s := m.serving[(start+uint64(i))%uint64(len(m.serving))]
		if s.size < size || !m.eligibility.CanServe(s) {
			continue
		}
		s.mu.Lock()
		off, h, ok := s.alloc.Alloc(size)
		s.mu.Unlock()
		if !ok {
			continue
		}
		reps = append(reps, replica{
			id: m.nextReplicaID.Add(1), seg: s, offset: off, size: size, handle: h,
			kind: MemoryReplica, status: ReplicaProcessing,
		})
	}
	if len(reps) < n {
		m.freeReplicasLocked(reps)
		return nil, fmt.Errorf("%w: %d bytes on %d distinct segments", ErrNoSpace, size, n)
	}
	return reps, nil
}

// freeReplicasLocked returns memory replicas' space to serving segments. A
// replica on a segment awaiting remount has no allocation to return: the
// remount rebuilds the allocator from the replicas that still exist. The
// caller holds topo.
func (m *Master) freeReplicasLocked(reps []replica) {
	for i := range reps {
		r := &reps[i]
		if r.kind != MemoryReplica || r.seg == nil || r.seg.state != segmentServing {
			continue
		}
		r.seg.mu.Lock()
		r.seg.alloc.Free(r.handle)
		r.seg.mu.Unlock()
	}
}

// PutEnd marks the object's replicas complete. Only the client that started
// the put may end it; ending a complete object again is a no-op (it still
// waits until the end is durable, so a retry after a lost answer is
// acknowledged only once the log holds the object).
func (m *Master) PutEnd(ctx context.Context, clientID, tenant, key string) error {
	t, err := m.putEnd(ctx, clientID, tenant, key)
	if err != nil {
		return err
	}
	return durable(ctx, &Error{Op: "PutEnd", Tenant: tenant, Key: key, Client: clientID}, t)
}

func (m *Master) putEnd(ctx context.Context, clientID, tenant, key string) (Ticket, error) {
	ref := Error{Op: "PutEnd", Tenant: tenant, Key: key, Client: clientID}
	fail := func(err error, hint string) (Ticket, error) { return nil, ref.with(err, hint) }
	sp, o, err := m.beginChange(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer m.topo.RUnlock()
	defer sp.mu.Unlock()
	if o == nil {
		return fail(ErrObjectNotFound, "call PutStart first; the put may have been revoked or removed")
	}
	if o.client.id != clientID {
		return fail(fmt.Errorf("%w: started by %q", ErrWrongClient, o.client.id), "only the client that called PutStart may end the put")
	}
	changed := false
	for i := range o.replicas {
		if o.replicas[i].status == ReplicaProcessing {
			o.replicas[i].status = ReplicaComplete
			changed = true
		}
	}
	if !changed {
		return m.sync(), nil
	}
	// A finished put is not read-leased yet; a soft-pin-enabled object
	// starts its soft-pin interval now.
	o.GrantLease(m.clock.Steady(), 0, m.cfg.SoftPinTTL)
	return m.record(&Op{Kind: OpPutEnd, Tenant: tenant, Key: key, Client: clientID, Object: standbyObject(o)}), nil
}

// PutRevoke abandons a put in progress and frees its space.
func (m *Master) PutRevoke(ctx context.Context, clientID, tenant, key string) error {
	t, err := m.putRevoke(ctx, clientID, tenant, key)
	if err != nil {
		return err
	}
	return durable(ctx, &Error{Op: "PutRevoke", Tenant: tenant, Key: key, Client: clientID}, t)
}

func (m *Master) putRevoke(ctx context.Context, clientID, tenant, key string) (Ticket, error) {
	ref := Error{Op: "PutRevoke", Tenant: tenant, Key: key, Client: clientID}
	fail := func(err error, hint string) (Ticket, error) { return nil, ref.with(err, hint) }
	sp, o, err := m.beginChange(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer m.topo.RUnlock()
	switch {
	case o == nil:
		sp.mu.Unlock()
		return fail(ErrObjectNotFound, "nothing to revoke")
	case o.client.id != clientID:
		sp.mu.Unlock()
		return fail(fmt.Errorf("%w: started by %q", ErrWrongClient, o.client.id), "only the client that called PutStart may revoke the put")
	}
	keep := o.replicas[:0:0]
	var drop []replica
	for _, r := range o.replicas {
		if r.status == ReplicaProcessing {
			drop = append(drop, r)
		} else {
			keep = append(keep, r)
		}
	}
	if len(drop) == 0 {
		sp.mu.Unlock()
		return fail(fmt.Errorf("%w: the put already ended", ErrInvalidArgument), "use Remove to delete a complete object")
	}
	// Recorded before the space is freed, like every change that frees
	// memory (see Journal).
	t := m.record(&Op{Kind: OpPutRevoke, Tenant: tenant, Key: key, Client: clientID})
	m.freeReplicasLocked(drop)
	countReplicas(drop, -1)
	before := o.memoryBytes()
	o.replicas = keep
	o.tenant.release(before - o.memoryBytes())
	removed := len(keep) == 0
	if removed {
		m.deleteLocked(sp, o)
	}
	sp.mu.Unlock()
	if removed {
		m.leave(o)
	}
	return t, nil
}

// beginChange starts a logged change to the object ref names: it checks
// the name and ctx, takes topo shared (a complete snapshot freezes every
// logged change by taking it exclusively) and the object's stripe
// exclusively, and copies the stripe first if a snapshot being copied
// still owes it (preserve). It returns the stripe and the object (nil if
// there is none) with both locks held, or an error with neither held.
func (m *Master) beginChange(ctx context.Context, ref Error) (*stripe, *object, error) {
	if err := validateObjectRef(ref.Op, ref.Tenant, ref.Key); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, ref.with(err, "")
	}
	m.topo.RLock()
	sp := m.stripeFor(ref.Tenant, ref.Key)
	sp.mu.Lock()
	m.preserve(sp)
	return sp, sp.objects[objectKey{ref.Tenant, ref.Key}], nil
}

// deleteLocked drops o from its stripe and its tenant's count. The caller
// holds the stripe lock, has already freed or discounted o's replicas, and
// calls leave(o) after unlocking.
func (m *Master) deleteLocked(sp *stripe, o *object) {
	delete(sp.objects, objectKey{o.tenant.name, o.key})
	o.tenant.release(o.memoryBytes())
	o.tenant.objects.Add(-1)
	countReplicas(o.replicas, -1)
	o.replicas = nil
}

// PutStartResult is one item of BatchPutStart.
type PutStartResult struct {
	Replicas []ReplicaInfo
	Err      error
}

// BatchPutStart runs PutStart for each request; items fail independently.
// A key that appears twice fails its later occurrences. The items share
// one wait for the log (see PutStart).
func (m *Master) BatchPutStart(ctx context.Context, reqs []PutRequest) []PutStartResult {
	out := make([]PutStartResult, len(reqs))
	tickets := make([]Ticket, len(reqs))
	seen := make(map[objectKey]struct{}, len(reqs))
	for i, r := range reqs {
		k := objectKey{r.Tenant, r.Key}
		if _, dup := seen[k]; dup {
			out[i].Err = &Error{Op: "BatchPutStart", Tenant: r.Tenant, Key: r.Key, Client: r.Client, Err: ErrDuplicateBatchObject, Hint: "send each key once per batch"}
			continue
		}
		seen[k] = struct{}{}
		out[i].Replicas, tickets[i], out[i].Err = m.putStart(ctx, r)
	}
	for i, r := range reqs {
		if err := durable(ctx, &Error{Op: "BatchPutStart", Tenant: r.Tenant, Key: r.Key, Client: r.Client}, tickets[i]); err != nil {
			out[i] = PutStartResult{Err: err}
		}
	}
	return out
}

// ObjectRef names one object of a batch call.
type ObjectRef struct {
	Client string
	Tenant string
	Key    string
}

// BatchPutEnd runs PutEnd for each item; errs[i] is nil when item i
// succeeded. The items are recorded first and then waited for together, so
// a batch costs one trip to the log, not one per item.
func (m *Master) BatchPutEnd(ctx context.Context, refs []ObjectRef) []error {
	return m.batch(ctx, "BatchPutEnd", refs, m.putEnd)
}

// BatchPutRevoke runs PutRevoke for each item, like BatchPutEnd.
func (m *Master) BatchPutRevoke(ctx context.Context, refs []ObjectRef) []error {
	return m.batch(ctx, "BatchPutRevoke", refs, m.putRevoke)
}

func (m *Master) batch(ctx context.Context, op string, refs []ObjectRef, do func(ctx context.Context, clientID, tenant, key string) (Ticket, error)) []error {
	errs := make([]error, len(refs))
	tickets := make([]Ticket, len(refs))
	for i, r := range refs {
		tickets[i], errs[i] = do(ctx, r.Client, r.Tenant, r.Key)
	}
	for i, r := range refs {
		if errs[i] == nil {
			errs[i] = durable(ctx, &Error{Op: op, Tenant: r.Tenant, Key: r.Key, Client: r.Client}, tickets[i])
		}
	}
	return errs
}
