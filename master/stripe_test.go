package master

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// A read of one key does not wait for a writer holding another stripe.
func TestReadsOnOtherStripesDoNotWait(t *testing.T) {
	m, _ := newTestMaster(t, Config{Shards: 64}, Options{})
	mount(t, m, "c1", 1, 1<<20)
	put(t, m, "c1", "t", "a", 10, PutOptions{})
	var other string
	for i := 0; other == ""; i++ {
		k := "b" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		if m.stripeFor("t", k) != m.stripeFor("t", "a") {
			other = k
		}
	}
	put(t, m, "c1", "t", other, 10, PutOptions{})
	sp := m.stripeFor("t", "a")
	sp.mu.Lock()
	defer sp.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := m.GetReplicaList(context.Background(), "t", other)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read on another stripe waited for a held stripe lock")
	}
}

// The remount metrics are exported as Prometheus aggregates.
func TestRemountMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := newTestMaster(t, Config{RecoveryLeaseTTL: 15 * time.Second}, Options{Metrics: NewMetrics(reg)})
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)}, sobj("a", 10, mem(1, 0, 10)), sobj("b", 10, mem(1, 10, 10)), sobj("c", 10, mem(2, 0, 10)))
	m.topo.RLock()
	m.evictLocked(m.clock.Steady()+1, 1<<30, nil)
	m.topo.RUnlock()
	remount(t, m, 1)
	for name, want := range map[string]float64{
		"shardfence_master_remount_matched_objects":                    2,
		"shardfence_master_recovery_lease_ttl_seconds":                 15,
		"shardfence_master_remount_visible_ttl_seconds":                15,
		"shardfence_master_eviction_skipped_unreadable_replicas_total": 3,
	} {
		var got float64
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				if g := mf.GetMetric()[0].GetGauge(); g != nil {
					got = g.GetValue()
				}
				if c := mf.GetMetric()[0].GetCounter(); c != nil {
					got = c.GetValue()
				}
			}
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "shardfence_master_remount_lease_assign_seconds"); n != 1 {
		t.Errorf("assign histogram series %d", n)
	}
}
