package master

import (
	"context"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// halfRemounted restores objects on two segments and remounts only segment
// 1: "mixed" has a readable replica on 1 and an unreadable one on 2,
// "stuck" only an unreadable one on 2, "ok" only a readable one on 1. All
// leases are long expired.
func halfRemounted(t *testing.T, cfg Config, opts Options) (*Master, *FakeClock) {
	t.Helper()
	m, clk := newTestMaster(t, cfg, opts)
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)},
		sobj("mixed", 100, mem(1, 0, 100), mem(2, 0, 100)),
		sobj("stuck", 100, mem(2, 100, 100)),
		sobj("ok", 100, mem(1, 100, 100)))
	remount(t, m, 1)
	clk.Advance(time.Hour)
	return m, clk
}

func replicaSegments(o *object) (segs []uint64) {
	for _, r := range o.replicas {
		segs = append(segs, r.seg.id)
	}
	return segs
}

// Census, re-validation and the mutation: a capacity eviction drops the
// readable replicas and keeps every unreadable one, whatever its lease.
func TestEvictionSkipsUnreadableInEveryStep(t *testing.T) {
	j := &memJournal{}
	m, clk := halfRemounted(t, Config{}, Options{Journal: j})
	m.topo.RLock()
	res := m.evictLocked(clk.Steady(), 1<<40, nil)
	m.topo.RUnlock()
	if res.Freed != 200 || res.Objects != 2 {
		t.Fatalf("evicted %+v, want the two readable replicas (200 bytes)", res)
	}
	if lookup(m, "t", "ok") != nil {
		t.Fatal("readable expired object survived")
	}
	if o := lookup(m, "t", "mixed"); o == nil || len(o.replicas) != 1 || o.replicas[0].seg.id != 2 {
		t.Fatalf("mixed object after eviction: %v", replicaSegments(o))
	}
	if lookup(m, "t", "stuck") == nil {
		t.Fatal("unreadable-only object evicted")
	}
	// The log's prediction of what remains names the unreadable replica.
	var evicts int
	for _, op := range j.ops {
		if op.Kind != OpEvict {
			continue
		}
		evicts++
		if op.Key == "mixed" && (len(op.Object.Replicas) != 1 || op.Object.Replicas[0].SegmentId != 2) {
			t.Fatalf("logged remainder of mixed: %v", op.Object.Replicas)
		}
	}
	if evicts != 2 {
		t.Fatalf("%d evict records, want 2", evicts)
	}
}

// Re-validation uses the same rule: an object whose replica became
// unreadable between census and mutation is left alone.
func TestEvictionRevalidates(t *testing.T) {
	m, clk := halfRemounted(t, Config{}, Options{})
	o := lookup(m, "t", "ok")
	m.topo.RLock()
	defer m.topo.RUnlock()
	sp := m.stripeFor("t", "ok")
	sp.mu.Lock()
	o.replicas[0].refcnt = 1 // a copy started reading it
	sp.mu.Unlock()
	var res EvictResult
	if m.evictObjectLocked(o, clk.Steady(), &res) || res.Objects != 0 {
		t.Fatal("mutation dropped a replica the rule rejects")
	}
	sp.mu.Lock()
	o.replicas[0].refcnt = 0
	sp.mu.Unlock()
	o.replicas[0].seg.endpoint.Store(nil) // its segment lost its endpoint
	if m.evictObjectLocked(o, clk.Steady(), &res) || res.Objects != 0 {
		t.Fatal("mutation dropped an unreadable replica")
	}
}

type offloads struct{ got []ReplicaInfo }

func (o *offloads) Offload(_, _ string, src ReplicaInfo) { o.got = append(o.got, src) }

// Offload-on-evict copies from a readable replica only, and never for an
// object whose only replica is unreadable.
func TestOffloadSourceIsReadable(t *testing.T) {
	off := &offloads{}
	m, clk := halfRemounted(t, Config{OffloadOnEvict: true}, Options{Offloader: off})
	m.topo.RLock()
	m.evictLocked(clk.Steady(), 1<<40, nil)
	m.topo.RUnlock()
	// "ok" loses its last replica and is offloaded from segment 1; "mixed"
	// keeps its unreadable replica, so nothing is offloaded for it.
	if len(off.got) != 1 || off.got[0].SegmentID != 1 {
		t.Fatalf("offloads %+v, want one from segment 1", off.got)
	}
	if src := offloadSource(lookup(m, "t", "stuck")); src != nil {
		t.Fatalf("offload source for an unreadable-only object: %+v", src)
	}
}

// Tenant-quota eviction uses the same rule: it evicts the readable object
// and refuses the put rather than drop an unreadable replica.
func TestQuotaEvictionSkipsUnreadable(t *testing.T) {
	m, _ := halfRemounted(t, Config{TenantQuotas: map[string]uint64{"t": 450}}, Options{})
	ctx := context.Background()
	// Usage 400 of 450: a 100-byte put needs 50 bytes evicted; only "ok"
	// and the readable replica of "mixed" qualify.
	if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "new", Size: 100}); err != nil {
		t.Fatal(err)
	}
	if lookup(m, "t", "stuck") == nil || len(lookup(m, "t", "mixed").replicas) == 0 {
		t.Fatal("quota eviction dropped an unreadable replica")
	}
	// Now only unreadable replicas and the new put are left: a put beyond
	// the quota fails with a typed error instead of evicting them.
	_, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "big", Size: 300})
	wantErr(t, err, ErrQuotaExceeded)
	if lookup(m, "t", "stuck") == nil || lookup(m, "t", "mixed") == nil {
		t.Fatal("failed quota put dropped unreadable replicas")
	}
}

// Group eviction: a group goes only when every member's lease expired, and
// even then its unreadable replicas stay.
func TestGroupEviction(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	g1 := sobj("g1", 100, mem(1, 0, 100))
	g2 := sobj("g2", 100, mem(2, 0, 100))
	g3 := sobj("g3", 100, mem(1, 100, 100))
	for _, o := range []*masterv1.StandbyObject{g1, g2, g3} {
		o.GroupId = "G"
	}
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)}, g1, g2, g3)
	remount(t, m, 1)
	clk.Advance(time.Hour)
	ctx := context.Background()
	// Reading g1 refreshes the whole group with one now.
	if _, err := m.GetReplicaList(ctx, "t", "g1"); err != nil {
		t.Fatal(err)
	}
	d := lookup(m, "t", "g1").leaseDeadline()
	for _, k := range []string{"g2", "g3"} {
		if got := lookup(m, "t", k).leaseDeadline(); got != d {
			t.Fatalf("%s lease %d, group read granted %d", k, got, d)
		}
	}
	m.topo.RLock()
	res := m.evictLocked(clk.Steady(), 1<<40, nil)
	m.topo.RUnlock()
	if res.Objects != 0 {
		t.Fatalf("leased group evicted: %+v", res)
	}
	clk.Advance(11 * time.Second)
	m.topo.RLock()
	res = m.evictLocked(clk.Steady(), 1<<40, nil)
	m.topo.RUnlock()
	if res.Objects != 2 || lookup(m, "t", "g1") != nil || lookup(m, "t", "g3") != nil {
		t.Fatalf("expired group: %+v", res)
	}
	if lookup(m, "t", "g2") == nil {
		t.Fatal("group eviction dropped the unreadable member")
	}
}

// Watermarks: nothing below the high watermark; above it, down to
// high-ratio, oldest lease first, soft-pinned objects only when allowed.
func TestWatermarkEvictionOrder(t *testing.T) {
	for _, allowSoft := range []bool{false, true} {
		m, clk := newTestMaster(t, Config{HighWatermark: 0.5, EvictionRatio: 0.2, AllowEvictSoftPinned: allowSoft}, Options{})
		mount(t, m, "c1", 1, 1000)
		ctx := context.Background()
		put(t, m, "c1", "t", "soft", 100, PutOptions{SoftPin: true})
		for _, k := range []string{"a", "b", "c", "d"} {
			put(t, m, "c1", "t", k, 100, PutOptions{})
		}
		if r := m.Evict(); r.Objects != 0 {
			t.Fatalf("evicted at 50%%: %+v", r)
		}
		put(t, m, "c1", "t", "e", 100, PutOptions{})
		// Leases: d oldest, then b, then a; c and e are read last.
		for _, k := range []string{"d", "b", "a", "c", "e"} {
			if _, err := m.Exist(ctx, "t", k); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Second)
		}
		clk.Advance(time.Minute)
		// 600 of 1000 used, high 500: free down to 300, so 3 objects go.
		r := m.Evict()
		if r.Objects != 3 || r.Freed != 300 {
			t.Fatalf("allowSoft=%v: evicted %+v, want 3 objects", allowSoft, r)
		}
		var left []string
		for _, k := range []string{"soft", "a", "b", "c", "d", "e"} {
			if lookup(m, "t", k) != nil {
				left = append(left, k)
			}
		}
		want := "[soft c e]"
		if got := sprint(left); got != want {
			t.Errorf("allowSoft=%v: left %s, want %s (oldest first, soft pin protected)", allowSoft, got, want)
		}
		// Under unbounded pressure the soft-pinned object goes only if allowed.
		m.topo.RLock()
		m.evictLocked(clk.Steady(), 1<<40, nil)
		m.topo.RUnlock()
		if survived := lookup(m, "t", "soft") != nil; survived == allowSoft {
			t.Errorf("allowSoft=%v: soft-pinned object survived=%v", allowSoft, survived)
		}
	}
}

func sprint(v []string) string {
	s := "["
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s + "]"
}

// RunEviction evicts above the high watermark on its own ticks and
// returns when its context ends.
func TestRunEvictionEvictsUntilCancelled(t *testing.T) {
	m, _ := halfRemounted(t, Config{HighWatermark: 0.01, EvictionRatio: 0.01}, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.RunEviction(ctx, time.Millisecond)
	}()
	for lookup(m, "t", "ok") != nil {
		select {
		case <-done:
			t.Fatal("RunEviction returned before its context ended")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	if lookup(m, "t", "stuck") == nil {
		t.Fatal("RunEviction evicted an unreadable replica")
	}
}
