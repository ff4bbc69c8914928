package master

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Phase 2, tests 1 and 4: leases run on the steady clock; wall-clock jumps
// either way change no lease decision.
func TestLeasesIgnoreWallClockJumps(t *testing.T) {
	m, clk := newTestMaster(t, Config{DefaultLeaseTTL: 10 * time.Second}, Options{})
	mount(t, m, "c1", 1, 1000)
	put(t, m, "c1", "t", "k", 100, PutOptions{})
	ctx := context.Background()
	if _, err := m.GetReplicaList(ctx, "t", "k"); err != nil {
		t.Fatal(err)
	}
	want := clk.Steady().Add(10 * time.Second)
	for _, jump := range []time.Duration{365 * 24 * time.Hour, -2 * 365 * 24 * time.Hour, time.Hour} {
		clk.SetWall(clk.Wall().Add(jump))
		if got := lookup(m, "t", "k").leaseDeadline(); got != want {
			t.Fatalf("wall jump %v moved the lease to %d, want %d", jump, got, want)
		}
		wantErr(t, m.Remove(ctx, "t", "k", false), ErrObjectLeased)
		m.topo.RLock()
		r := m.evictLocked(clk.Steady(), 1<<40, nil)
		m.topo.RUnlock()
		if r.Objects != 0 {
			t.Fatalf("wall jump %v made a leased object evictable", jump)
		}
	}
	clk.Advance(10 * time.Second)
	clk.SetWall(t0.Add(-time.Hour)) // and backwards again: expiry still holds
	if err := m.Remove(ctx, "t", "k", false); err != nil {
		t.Fatalf("remove after the steady lease expired: %v", err)
	}
}

// Phase 2, test 2: GrantLeaseUntil is a max-update.
func TestGrantLeaseUntilNeverShortens(t *testing.T) {
	o := &object{softPinEnabled: true}
	o.GrantLeaseUntil(100, 200)
	o.GrantLeaseUntil(50, 150)
	if o.leaseDeadline() != 100 || o.softPin.Load() != 200 {
		t.Fatalf("lease %d soft %d after a shorter grant", o.leaseDeadline(), o.softPin.Load())
	}
	o.GrantLease(90, 20, 20)
	if o.leaseDeadline() != 110 || o.softPin.Load() != 200 {
		t.Fatalf("lease %d soft %d after GrantLease", o.leaseDeadline(), o.softPin.Load())
	}
	// Concurrent grants end at the maximum.
	var wg sync.WaitGroup
	for i := 1; i <= 8; i++ {
		wg.Go(func() {
			for j := 0; j < 1000; j++ {
				o.GrantLeaseUntil(SteadyTime(i*1000+j), 0)
			}
		})
	}
	wg.Wait()
	if o.leaseDeadline() != 8999 {
		t.Fatalf("lease %d after concurrent grants, want 8999", o.leaseDeadline())
	}
	// An object without soft pin never gets a soft-pin deadline.
	p := &object{}
	p.GrantLease(10, time.Second, time.Hour)
	if p.softPin.Load() != 0 {
		t.Fatal("soft-pin deadline on an object without soft pin")
	}
}

// Phase 2, test 3: soft pin enabled and soft pin active are distinct.
func TestSoftPinEnabledVersusActive(t *testing.T) {
	m, clk := newTestMaster(t, Config{SoftPinTTL: time.Minute}, Options{})
	mount(t, m, "c1", 1, 1000)
	put(t, m, "c1", "t", "s", 100, PutOptions{SoftPin: true})
	o := lookup(m, "t", "s")
	if !o.softPinActive(clk.Steady()) {
		t.Fatal("soft pin not active right after PutEnd")
	}
	clk.Advance(2 * time.Minute)
	if o.softPinActive(clk.Steady()) || !o.softPinEnabled {
		t.Fatalf("after expiry: active %v enabled %v, want false/true", o.softPinActive(clk.Steady()), o.softPinEnabled)
	}
	// A read renews the interval because the object is still enabled.
	if _, err := m.Exist(context.Background(), "t", "s"); err != nil {
		t.Fatal(err)
	}
	if !o.softPinActive(clk.Steady()) {
		t.Fatal("read did not renew the soft pin of an enabled object")
	}
}

// Lease grants allocate nothing: they run on every read.
func TestLeaseGrantAllocatesNothing(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	mount(t, m, "c1", 1, 1000)
	put(t, m, "c1", "t", "k", 100, PutOptions{SoftPin: true})
	o := lookup(m, "t", "k")
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { o.GrantLease(clk.Steady(), time.Second, time.Second) }); n != 0 {
		t.Fatalf("GrantLease allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = m.Exist(ctx, "t", "k") }); n != 0 {
		t.Fatalf("Exist allocates %v times", n)
	}
	buf := make([]ReplicaInfo, 0, 4)
	if n := testing.AllocsPerRun(100, func() { buf, _ = m.AppendReplicaList(ctx, buf[:0], "t", "k") }); n != 0 {
		t.Fatalf("AppendReplicaList allocates %v times", n)
	}
}
