package master

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/shardfence/shardfence/internal/tick"
)

// EvictResult reports one eviction pass.
type EvictResult struct {
	Objects uint64 // objects that lost at least one replica
	Freed   uint64 // bytes returned to segments
}

// Evict runs one eviction pass if used memory is above the high watermark,
// freeing down to (HighWatermark - EvictionRatio) of capacity.
func (m *Master) Evict() EvictResult {
	m.topo.RLock()
	defer m.topo.RUnlock()
	capacity, used := m.usageLocked()
	high := uint64(float64(capacity) * m.cfg.HighWatermark)
	if capacity == 0 || used <= high {
		return EvictResult{}
	}
	low := uint64(float64(capacity) * (m.cfg.HighWatermark - m.cfg.EvictionRatio))
	return m.evictLocked(m.clock.Steady(), used-low, nil)
}

// RunEviction checks the high watermark every interval until ctx ends,
// running Evict, and logs each pass that evicted something.
func (m *Master) RunEviction(ctx context.Context, every time.Duration) {
	RunEviction(ctx, every, func() (*Master, error) { return m, nil }, m.log)
}

// RunEviction is (*Master).RunEviction for a process whose serving master
// changes (an HA node's primary): each tick evicts on the master serving
// returns, and on none while it returns an error. Only a primary may
// evict: a standby's state is the log's, and an eviction is a change.
func RunEviction(ctx context.Context, every time.Duration, serving func() (*Master, error), log *slog.Logger) {
	tick.Every(ctx, every, nil, func() {
		if m, err := serving(); err == nil {
			if r := m.Evict(); r.Objects > 0 {
				log.Info("evicted", "objects", r.Objects, "bytes", r.Freed)
			}
		}
	})
}

type candidate struct {
	o        *object
	g        *group
	deadline SteadyTime
	softPin  bool
}

// evictionCandidate is the object-level side of eviction: not hard pinned,
// lease expired at now, soft pin inactive (or allowed), and at least one
// replica the eviction rule accepts.
func (m *Master) evictionCandidate(o *object, now SteadyTime) (ok, softPinned bool) {
	if o.hardPinned || !o.leaseExpired(now) {
		return false, false
	}
	softPinned = o.softPinActive(now)
	if softPinned && !m.cfg.AllowEvictSoftPinned {
		return false, false
	}
	for i := range o.replicas {
		if evictableReplica(&o.replicas[i]) {
			return true, softPinned
		}
	}
	return false, false
}

// evictLocked frees at least need bytes if it can, from objects of only (or
// of every tenant when only is nil), using one now for the whole pass:
// census, sort, re-validation and mutation all judge the same instant. The
// caller holds topo.
func (m *Master) evictLocked(now SteadyTime, need uint64, only *tenant) EvictResult {
	m.evictMu.Lock()
	defer m.evictMu.Unlock()
	var cands []candidate
	seenGroups := map[*group]struct{}{}
	var skipped uint64
	for i := range m.stripes {
		sp := &m.stripes[i]
		sp.mu.RLock()
		for _, o := range sp.objects {
			if only != nil && o.tenant != only {
				continue
			}
			ok, soft := m.evictionCandidate(o, now)
			if !ok {
				if o.leaseExpired(now) && !o.hardPinned {
					skipped += countUnreadableMemory(o)
				}
				continue
			}
			skipped += countUnreadableMemory(o)
			if g := o.group; g != nil {
				if _, dup := seenGroups[g]; dup {
					continue
				}
				seenGroups[g] = struct{}{}
				cands = append(cands, candidate{g: g, deadline: o.leaseDeadline(), softPin: soft})
				continue
			}
			cands = append(cands, candidate{o: o, deadline: o.leaseDeadline(), softPin: soft})
		}
		sp.mu.RUnlock()
	}
	if skipped > 0 {
		m.skipped.Add(skipped)
		m.metrics.skippedUnreadable.Add(float64(skipped))
	}
	// Group candidates are ordered by their latest member deadline.
	for i := range cands {
		if g := cands[i].g; g != nil {
			g.mu.RLock()
			for _, o := range g.members {
				cands[i].deadline = max(cands[i].deadline, o.leaseDeadline())
			}
			g.mu.RUnlock()
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].softPin != cands[j].softPin {
			return !cands[i].softPin
		}
		return cands[i].deadline < cands[j].deadline
	})
	var res EvictResult
	for _, c := range cands {
		if res.Freed >= need {
			break
		}
		if c.g != nil {
			m.evictGroupLocked(c.g, now, &res)
			continue
		}
		if m.evictObjectLocked(c.o, now, &res) {
			m.leave(c.o)
		}
	}
	m.evicted.Add(res.Objects)
	m.metrics.evictedObjects.Add(float64(res.Objects))
	return res
}

func countUnreadableMemory(o *object) uint64 {
	var n uint64
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.kind == MemoryReplica && r.status == ReplicaComplete && !r.readable() {
			n++
		}
	}
	return n
}

// evictGroupLocked evicts a group only if every member's lease has expired
// and no member is hard pinned; it holds the group's write lock so a read
// refreshing the group cannot interleave.
func (m *Master) evictGroupLocked(g *group, now SteadyTime, res *EvictResult) {
	g.mu.Lock()
	for _, o := range g.members {
		if o.hardPinned || !o.leaseExpired(now) {
			g.mu.Unlock()
			return
		}
	}
	members := append([]*object(nil), g.members...)
	var gone []*object
	for _, o := range members {
		if m.evictObjectLocked(o, now, res) {
			gone = append(gone, o)
		}
	}
	g.mu.Unlock()
	m.leave(gone...)
}

// keptAfterEviction predicts the replicas an eviction leaves: the operation
// log records this list before the mutation, and the mutation drops exactly
// the complement, because both use evictableReplica.
func keptAfterEviction(o *object) []replica {
	kept := make([]replica, 0, len(o.replicas))
	for i := range o.replicas {
		if !evictableReplica(&o.replicas[i]) {
			kept = append(kept, o.replicas[i])
		}
	}
	return kept
}

// offloadSource picks the replica an offload copies from: one the eviction
// rule accepts, so an unreadable replica is never a source.
func offloadSource(o *object) *replica {
	for i := range o.replicas {
		if evictableReplica(&o.replicas[i]) {
			return &o.replicas[i]
		}
	}
	return nil
}

// evictObjectLocked re-validates o under its stripe lock with the same now
// and drops its evictable replicas; it reports whether o was deleted (the
// caller then calls leave). The caller holds topo and evictMu.
func (m *Master) evictObjectLocked(o *object, now SteadyTime, res *EvictResult) (deleted bool) {
	sp := m.stripeFor(o.tenant.name, o.key)
	sp.mu.Lock()
	m.preserve(sp)
	defer sp.mu.Unlock()
	if sp.objects[objectKey{o.tenant.name, o.key}] != o {
		return false
	}
	if ok, _ := m.evictionCandidate(o, now); !ok {
		return false
	}
	kept := keptAfterEviction(o)
	if m.cfg.OffloadOnEvict && m.offloader != nil && !hasMemoryOrDisk(kept) {
		if src := offloadSource(o); src != nil {
			m.offloader.Offload(o.tenant.name, o.key, src.info())
		}
	}
	// Recorded before the space is freed (see Journal). Nobody waits for
	// it: the next placement does, before it hands the space out.
	if m.journal != nil {
		m.record(&Op{Kind: OpEvict, Tenant: o.tenant.name, Key: o.key, Object: standbyObjectWith(o, kept)})
	}
	before := o.memoryBytes()
	var drop []replica
	for i := range o.replicas {
		if evictableReplica(&o.replicas[i]) {
			drop = append(drop, o.replicas[i])
		}
	}
	m.freeReplicasLocked(drop)
	countReplicas(drop, -1)
	o.replicas = kept
	freed := before - o.memoryBytes()
	o.tenant.release(freed)
	res.Freed += freed
	res.Objects++
	if len(kept) == 0 {
		m.deleteLocked(sp, o)
		return true
	}
	return false
}

func hasMemoryOrDisk(reps []replica) bool {
	for i := range reps {
		if reps[i].status == ReplicaComplete {
			return true
		}
	}
	return false
}
