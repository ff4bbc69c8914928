package master

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/shardfence/shardfence/master/internal/alloc"
)

// SegmentSpec describes a client's memory segment.
type SegmentSpec struct {
	ID       uint64
	Name     string
	Base     uint64
	Size     uint64
	Endpoint string
}

func (s SegmentSpec) validate() error {
	switch {
	case s.ID == 0:
		return fmt.Errorf("%w: segment id 0", ErrInvalidArgument)
	case s.Size == 0:
		return fmt.Errorf("%w: segment %d has size 0", ErrInvalidArgument, s.ID)
	case s.Base+s.Size < s.Base:
		return fmt.Errorf("%w: segment %d base+size overflows", ErrInvalidArgument, s.ID)
	case s.Endpoint == "":
		return fmt.Errorf("%w: segment %d has no endpoint", ErrInvalidArgument, s.ID)
	}
	return nil
}

// MountSegment adds a client's segment to placement. Mounting the same
// segment again with the same description is a no-op, so a client may retry.
func (m *Master) MountSegment(ctx context.Context, clientID string, spec SegmentSpec) error {
	t, err := m.mountSegment(ctx, clientID, spec)
	if err != nil {
		return err
	}
	return durable(ctx, &Error{Op: "MountSegment", Segment: spec.ID, Client: clientID}, t)
}

func (m *Master) mountSegment(ctx context.Context, clientID string, spec SegmentSpec) (Ticket, error) {
	fail := func(err error, hint string) (Ticket, error) {
		return nil, &Error{Op: "MountSegment", Segment: spec.ID, Client: clientID, Err: err, Hint: hint}
	}
	if clientID == "" {
		return fail(fmt.Errorf("%w: empty client id", ErrInvalidArgument), "pass the client's id")
	}
	if err := spec.validate(); err != nil {
		return fail(err, "describe the segment with a non-zero id, a size and an endpoint")
	}
	if err := ctx.Err(); err != nil {
		return fail(err, "")
	}
	var recovery *livenessRecovery
	defer func() { m.noteRecovery(recovery) }() // after the unlock below
	m.topo.Lock()
	defer m.topo.Unlock()
	retry := false
	if s := m.segments[spec.ID]; s != nil {
		switch {
		case s.state == segmentServing && s.client.id == clientID && s.base == spec.Base && s.size == spec.Size && s.endpointString() == spec.Endpoint:
			retry = true
		case s.state == segmentAwaitingRemount:
			return fail(ErrSegmentExists, "the segment is known from before a master failover; call ReMountSegment")
		default:
			return fail(fmt.Errorf("%w: owned by client %q, size %d", ErrSegmentExists, s.client.id, s.size), "unmount it first or use another segment id")
		}
	}
	// A successful mount is a liveness signal; an Offline incarnation is
	// a barrier until its offboarding completed.
	rec, rc, err := m.live.signal(clientID, true)
	recovery = rc
	if err != nil {
		return fail(err, "the client went offline and is being offboarded; mount again once Ping no longer answers NEED_REMOUNT for an offline client (its old segments are being removed)")
	}
	if retry {
		return m.sync(), nil // answered once the first mount is durable
	}
	s := &segment{id: spec.ID, name: spec.Name, client: m.clientFor(clientID), base: spec.Base, size: spec.Size, state: segmentServing, alloc: alloc.New(spec.Size)}
	s.owner.Store(rec)
	ep := spec.Endpoint
	s.endpoint.Store(&ep)
	m.segments[s.id] = s
	m.serving = append(m.serving, s)
	return m.record(&Op{Kind: OpMountSegment, Client: clientID, Segment: standbySegment(s)}), nil
}

// UnmountResult reports what an unmount removed.
type UnmountResult struct {
	Replicas uint64
	Objects  uint64
}

// dropSegmentsLocked removes segs and every replica on them in one pass
// over the metadata; objects left without replicas are deleted and
// returned (the caller drops them from their groups once it holds no
// stripe lock). Nothing is logged here. The caller holds topo exclusively.
func (m *Master) dropSegmentsLocked(segs map[*segment]bool) (UnmountResult, []*object) {
	var res UnmountResult
	var gone []*object
	for i := range m.stripes {
		sp := &m.stripes[i]
		sp.mu.Lock()
		m.preserve(sp)
		for _, o := range sp.objects {
			kept := o.replicas[:0:0]
			hit := false
			for _, r := range o.replicas {
				if r.seg != nil && segs[r.seg] {
					hit = true
					res.Replicas++
				} else {
					kept = append(kept, r)
				}
			}
			if !hit {
				continue
			}
			before := o.memoryBytes()
			o.replicas = kept
			o.tenant.release(before - o.memoryBytes())
			if len(kept) == 0 {
				m.deleteLocked(sp, o)
				gone = append(gone, o)
			}
		}
		sp.mu.Unlock()
	}
	res.Objects = uint64(len(gone))
	for s := range segs {
		delete(m.segments, s.id)
		for i, x := range m.serving {
			if x == s {
				m.serving = append(m.serving[:i], m.serving[i+1:]...)
				break
			}
		}
	}
	return res, gone
}

// UnmountSegment removes a segment and every replica on it, whatever its
// lease or readability: the memory is going away. Objects left without
// replicas are deleted.
func (m *Master) UnmountSegment(ctx context.Context, clientID string, segmentID uint64) (UnmountResult, error) {
	res, t, err := m.unmountSegment(ctx, clientID, segmentID)
	if err != nil {
		return UnmountResult{}, err
	}
	if err := durable(ctx, &Error{Op: "UnmountSegment", Segment: segmentID, Client: clientID}, t); err != nil {
		return UnmountResult{}, err
	}
	return res, nil
}

func (m *Master) unmountSegment(ctx context.Context, clientID string, segmentID uint64) (UnmountResult, Ticket, error) {
	fail := func(err error, hint string) error {
		return &Error{Op: "UnmountSegment", Segment: segmentID, Client: clientID, Err: err, Hint: hint}
	}
	if err := ctx.Err(); err != nil {
		return UnmountResult{}, nil, fail(err, "")
	}
	m.topo.Lock()
	defer m.topo.Unlock()
	s := m.segments[segmentID]
	if s == nil {
		return UnmountResult{}, nil, fail(ErrSegmentNotFound, "nothing to unmount")
	}
	if s.client.id != clientID {
		return UnmountResult{}, nil, fail(fmt.Errorf("%w: segment is owned by %q", ErrWrongClient, s.client.id), "only the owning client may unmount it")
	}
	res, gone := m.dropSegmentsLocked(map[*segment]bool{s: true})
	t := m.record(&Op{Kind: OpUnmountSegment, Client: clientID, Segment: standbySegment(s)})
	m.leave(gone...)
	return res, t, nil
}

// RemountResult reports a successful remount.
type RemountResult struct {
	Segments       int
	MatchedObjects int
	RecoveryTTL    time.Duration
	// AssignDuration is the time to give every matched object the recovery
	// lease; TotalDuration the whole remount; VisibleTTL what was left of
	// the recovery lease when the segments were published.
	AssignDuration time.Duration
	TotalDuration  time.Duration
	VisibleTTL     time.Duration
	// CollectDuration is the metadata scan, RebuildDuration the allocator
	// rebuild and verification; neither consumes the recovery lease.
	CollectDuration time.Duration
	RebuildDuration time.Duration
}

// ReMountSegment makes segments known from before a failover serviceable
// again. In order, under the exclusive topology lock:
//
//  1. validate the request against the restored segments;
//  2. collect, in one pass, one entry per object with a replica on the
//     segments (a vector, no hash map) and the replicas' ranges;
//  3. rebuild each segment's allocator from those ranges and verify them
//     (no overlap, inside the segment), then install the new handles on
//     the still unreadable replicas;
//  4. compute one deadline, now + the recovery TTL, and assign it to every
//     collected object (max-update), even one that had another readable
//     replica, and the full soft-pin TTL to soft-pin-enabled objects;
//  5. install the allocators and store the endpoints, which clears the
//     invalid endpoint of every replica on the segments at once, and
//     publish the segments for placement.
//
// A failure in 1-3 changes nothing: no lease, no allocator, no endpoint.
// Remounting an already serving segment repeats the procedure, so a client
// may retry after a lost response.
//
// The answer waits until the remount is durable in the operation log.
func (m *Master) ReMountSegment(ctx context.Context, clientID string, specs []SegmentSpec) (RemountResult, error) {
	res, t, err := m.reMountSegment(ctx, clientID, specs)
	if err != nil {
		return RemountResult{}, err
	}
	if err := durable(ctx, &Error{Op: "ReMountSegment", Client: clientID}, t); err != nil {
		return RemountResult{}, err
	}
	return res, nil
}

// refusal is why a step refuses a request, in the words of an Error:
// the segment concerned (0 for the request as a whole), the cause and the
// hint. The zero refusal (err nil) lets the request through.
type refusal struct {
	seg  uint64
	err  error
	hint string
}

// checkRemountRequest refuses a remount that names no client or no
// segment.
func checkRemountRequest(clientID string, specs []SegmentSpec) refusal {
	if clientID == "" {
		return refusal{0, fmt.Errorf("%w: empty client id", ErrInvalidArgument), "pass the client's id"}
	}
	if len(specs) == 0 {
		return refusal{0, fmt.Errorf("%w: no segments", ErrInvalidArgument), "list the segments to remount"}
	}
	return refusal{}
}

// checkRemount is step 1 of ReMountSegment, a pure decision: the restored
// segments the request names, in its order, or why it is refused. The
// caller holds topo (segments is Master.segments).
func checkRemount(clientID string, specs []SegmentSpec, segments map[uint64]*segment) ([]*segment, refusal) {
	if r := checkRemountRequest(clientID, specs); r.err != nil {
		return nil, r
	}
	segs := make([]*segment, len(specs))
	listed := make(map[uint64]bool, len(specs))
	for i, spec := range specs {
		if err := spec.validate(); err != nil {
			return nil, refusal{spec.ID, err, "describe the segment as it was mounted"}
		}
		s := segments[spec.ID]
		switch {
		case s == nil:
			return nil, refusal{spec.ID, ErrSegmentNotFound, "the master does not know this segment; mount it with MountSegment"}
		case s.client.id != clientID:
			return nil, refusal{spec.ID, fmt.Errorf("%w: segment is owned by %q", ErrWrongClient, s.client.id), "remount it from the client that mounted it"}
		case s.base != spec.Base || s.size != spec.Size:
			return nil, refusal{spec.ID, fmt.Errorf("%w: restored base %d size %d, remount says base %d size %d", ErrSegmentMismatch, s.base, s.size, spec.Base, spec.Size), "remount the same memory region the segment had"}
		case listed[spec.ID]:
			return nil, refusal{spec.ID, fmt.Errorf("%w: segment listed twice", ErrInvalidArgument), "list each segment once"}
		}
		listed[spec.ID] = true
		segs[i] = s
	}
	return segs, refusal{}
}

// offlineRemount refuses the remount of a client whose incarnation is
// being offboarded.
var offlineRemount = refusal{0, fmt.Errorf("%w: the client's incarnation is being offboarded", ErrClientOffline), "remount once its offboarding completed (mount its segments afresh then)"}

func (m *Master) reMountSegment(ctx context.Context, clientID string, specs []SegmentSpec) (RemountResult, Ticket, error) {
	start := time.Now()
	fail := func(r refusal) (RemountResult, Ticket, error) {
		m.metrics.remountFailures.Inc()
		return RemountResult{}, nil, &Error{Op: "ReMountSegment", Segment: r.seg, Client: clientID, Err: r.err, Hint: r.hint}
	}
	if r := checkRemountRequest(clientID, specs); r.err != nil {
		return fail(r)
	}
	if err := ctx.Err(); err != nil {
		return fail(refusal{err: err})
	}
	var recovery *livenessRecovery
	defer func() { m.noteRecovery(recovery) }() // after the unlock below
	m.topo.Lock()
	defer m.topo.Unlock()

	// 1. Validate.
	segs, r := checkRemount(clientID, specs, m.segments)
	if r.err != nil {
		return fail(r)
	}
	if m.live.ClientState(clientID) == ClientOffline {
		return fail(offlineRemount)
	}
	for i, s := range segs {
		s.remountSlot = i + 1
	}
	defer func() {
		for _, s := range segs {
			s.remountSlot = 0
		}
	}()

	// 2. Collect.
	collectStart := time.Now()
	scan := m.collectRemount(segs)
	collectDur := time.Since(collectStart)

	// 3. Rebuild and verify every allocator before touching anything.
	rebuildStart := time.Now()
	allocs, handles, r := rebuildAllocators(segs, scan.ext)
	if r.err != nil {
		return fail(r)
	}
	// The remount is a liveness signal, taken before anything changes: a
	// client that went Offline since step 1 is refused with nothing done.
	rec, rc, err := m.live.signal(clientID, true)
	recovery = rc
	if err != nil {
		return fail(refusal{0, err, offlineRemount.hint})
	}
	scan.installHandles(handles)
	rebuildDur := time.Since(rebuildStart)

	// 4. One deadline for the whole batch, computed after the rebuild so
	// reconstruction time does not eat the recovery window.
	recoveryTTL := m.cfg.RecoveryTTL()
	now := m.clock.Steady()
	deadline, softDeadline := now.Add(recoveryTTL), now.Add(m.cfg.SoftPinTTL)
	assignStart := time.Now()
	assignLeases(scan.objs, deadline, softDeadline)
	assignDur := time.Since(assignStart)

	// 5. Publish.
	t := m.publishRemount(clientID, specs, segs, allocs, rec)
	visible := toDuration(deadline - m.clock.Steady())
	res := RemountResult{
		Segments: len(segs), MatchedObjects: len(scan.objs), RecoveryTTL: recoveryTTL,
		AssignDuration: assignDur, TotalDuration: time.Since(start), VisibleTTL: visible,
		CollectDuration: collectDur, RebuildDuration: rebuildDur,
	}
	m.noteRemount(&res)
	return res, t, nil
}

// remountScan is what step 2 of a remount collected: one entry per object
// with a replica on the remounted segments (a vector, no hash map; an
// object with several matching replicas is appended once), one per
// matched replica (a pointer into its object's replica slice, stable
// while topo is held exclusively), and each segment's replica extents.
// Stripes are visited in order, so runs mark where each stripe's replicas
// end for the handle installation.
type remountScan struct {
	objs    []*object
	matches []remountMatch
	runs    []stripeRun
	ext     [][]alloc.Extent
}

// collectRemount is step 2 of a remount: one pass over the stripes, each
// under its read lock. The caller holds topo exclusively and has set each
// remounted segment's remountSlot.
func (m *Master) collectRemount(segs []*segment) remountScan {
	var total int64
	sc := remountScan{ext: make([][]alloc.Extent, len(segs))}
	for i, s := range segs {
		n := max(s.replicas.Load(), 0)
		sc.ext[i] = make([]alloc.Extent, 0, n)
		total += n
	}
	// Sized once: at tens of millions of objects, growing by appends would
	// copy the vectors repeatedly and keep the collector busy.
	sc.objs = make([]*object, 0, total)
	sc.matches = make([]remountMatch, 0, total)
	for i := range m.stripes {
		sp := &m.stripes[i]
		sp.mu.RLock()
		first := len(sc.matches)
		for _, o := range sp.objects {
			matched := false
			for j := range o.replicas {
				r := &o.replicas[j]
				if r.kind != MemoryReplica || r.seg == nil || r.seg.remountSlot == 0 {
					continue
				}
				slot := r.seg.remountSlot - 1
				sc.matches = append(sc.matches, remountMatch{r: r, slot: int32(slot), idx: int32(len(sc.ext[slot]))})
				sc.ext[slot] = append(sc.ext[slot], alloc.Extent{Offset: r.offset, Size: r.size})
				matched = true
			}
			if matched {
				sc.objs = append(sc.objs, o)
			}
		}
		sp.mu.RUnlock()
		if len(sc.matches) > first {
			sc.runs = append(sc.runs, stripeRun{stripe: sp, end: len(sc.matches)})
		}
	}
	return sc
}

// rebuildAllocators is step 3 of a remount, pure: each segment's
// allocator rebuilt from its replicas' extents, with the handle of each,
// or the refusal of a segment whose extents overlap or overrun it. It
// drops the extents as it goes.
func rebuildAllocators(segs []*segment, ext [][]alloc.Extent) ([]*alloc.Allocator, [][]uint32, refusal) {
	allocs := make([]*alloc.Allocator, len(segs))
	handles := make([][]uint32, len(segs))
	for i, s := range segs {
		a, h, err := alloc.Rebuild(s.size, ext[i])
		if err != nil {
			return nil, nil, refusal{s.id, fmt.Errorf("%w: %v", ErrSegmentMismatch, err), "the segment's contents do not match the master's metadata; unmount and mount it afresh"}
		}
		allocs[i], handles[i] = a, h
		ext[i] = nil
	}
	return allocs, handles, refusal{}
}

// installHandles gives the matched replicas their rebuilt handles while
// they are still unreadable (one stripe lock at a time, so reads elsewhere
// go on): this is O(N) random writes and must not eat the recovery lease.
// Then it sorts the objects into address order for the lease assignment:
// the scan found them in hash order, scattered over the heap, and in
// address order the one O(N) step inside the lease window streams through
// memory instead of missing the cache on every object. The heap does not
// move objects, so the order is stable.
func (sc *remountScan) installHandles(handles [][]uint32) {
	k := 0
	for _, run := range sc.runs {
		run.stripe.mu.Lock()
		for ; k < run.end; k++ {
			mt := sc.matches[k]
			mt.r.handle = handles[mt.slot][mt.idx]
		}
		run.stripe.mu.Unlock()
	}
	slices.SortFunc(sc.objs, func(a, b *object) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b)))
	})
}

// publishRemount is step 5 of a remount: storing the endpoint clears the
// invalid endpoint of every replica on the segment at once; then the
// segment joins placement and the remount is logged. The caller holds topo
// exclusively; the ticket is the last segment's.
func (m *Master) publishRemount(clientID string, specs []SegmentSpec, segs []*segment, allocs []*alloc.Allocator, owner *ClientLivenessRecord) Ticket {
	var t Ticket
	for i, s := range segs {
		s.owner.Store(owner)
		ep := specs[i].Endpoint
		s.endpoint.Store(&ep)
		s.mu.Lock()
		s.alloc = allocs[i]
		s.mu.Unlock()
		if s.state != segmentServing {
			s.state = segmentServing
			m.serving = append(m.serving, s)
		}
		t = m.record(&Op{Kind: OpRemountSegment, Client: clientID, Segment: standbySegment(s)})
	}
	return t
}

// noteRemount counts a successful remount in the master's own figures and
// its metrics.
func (m *Master) noteRemount(res *RemountResult) {
	m.remounts.Add(1)
	m.lastRemount.Store(res)
	m.metrics.remountMatched.Set(float64(res.MatchedObjects))
	m.metrics.remountAssign.Observe(res.AssignDuration.Seconds())
	m.metrics.remountTotal.Observe(res.TotalDuration.Seconds())
	m.metrics.recoveryTTL.Set(res.RecoveryTTL.Seconds())
	m.metrics.remountVisibleTTL.Set(res.VisibleTTL.Seconds())
}

type stripeRun struct {
	stripe *stripe
	end    int // matches[previous end:end] live in stripe
}

type remountMatch struct {
	r    *replica
	slot int32 // index of the replica's segment in the request
	idx  int32 // index of the replica's extent, and so its handle
}

// assignLeases gives every object the same deadlines. It is the one O(N)
// step between rebuild and publication, so it splits the vector over the
// available cores; the grant itself is an allocation-free atomic max.
func assignLeases(objs []*object, deadline, softDeadline SteadyTime) {
	const minChunk = 1 << 16
	workers := min(runtime.GOMAXPROCS(0), (len(objs)+minChunk-1)/minChunk)
	if workers <= 1 {
		for _, o := range objs {
			o.GrantLeaseUntil(deadline, softDeadline)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (len(objs) + workers - 1) / workers
	for lo := 0; lo < len(objs); lo += chunk {
		part := objs[lo:min(lo+chunk, len(objs))]
		wg.Go(func() {
			for _, o := range part {
				o.GrantLeaseUntil(deadline, softDeadline)
			}
		})
	}
	wg.Wait()
}
