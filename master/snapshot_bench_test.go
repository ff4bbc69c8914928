package master

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/master/internal/alloc"
)

// benchFill puts n one-replica objects on one segment straight into the
// stripes: the snapshot benchmarks measure the snapshot, not the puts.
func benchFill(tb testing.TB, m *Master, n int) {
	tb.Helper()
	c := &client{id: "bench"}
	t := &tenant{name: "bench"}
	seg := &segment{id: 1, name: "bench", client: c, size: uint64(max(n, 1)) * 4096, state: segmentAwaitingRemount}
	m.clients[c.id], m.tenants[t.name], m.segments[seg.id] = c, t, seg
	for i := 0; i < n; i++ {
		o := &object{key: "bench/object/" + strconv.Itoa(i), tenant: t, client: c, size: 4096, seq: uint64(i + 1), putStart: int64(i)}
		o.lease.Store(int64(m.clock.Steady()) + int64(time.Hour))
		o.replicas = []replica{{id: uint64(i + 1), seg: seg, offset: uint64(i) * 4096, size: 4096, handle: alloc.NoHandle, kind: MemoryReplica, status: ReplicaComplete}}
		sp := m.stripeFor(t.name, o.key)
		sp.objects[objectKey{t.name, o.key}] = o
		countReplicas(o.replicas, 1)
		t.used.Add(4096)
		t.objects.Add(1)
	}
}

// liveHeap samples the heap's live objects until stop.
func liveHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done, finished := make(chan struct{}), make(chan struct{})
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	sample := func() {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() uint64 { close(done); <-finished; sample(); return peak.Load() }
}

func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSnapshotFiles encodes and restores a complete snapshot of
// SHARDFENCE_SNAP_OBJECTS one-replica objects (default 1,000,000) without
// a store: Freeze plus WriteFiles, then RestoreSnapshot into a fresh
// master. It reports the restore's peak live heap against the restored
// master's heap after a GC.
func BenchmarkSnapshotFiles(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("SHARDFENCE_SNAP_OBJECTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	m, err := New(Config{}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	benchFill(b, m, n)
	dir := b.TempDir()
	for b.Loop() {
		start := time.Now()
		files, err := m.Freeze(nil, SnapshotV2).WriteFiles(dir, "bench")
		if err != nil {
			b.Fatal(err)
		}
		write := time.Since(start)
		paths := map[string]string{}
		var size int64
		for _, f := range files {
			paths[f.Name] = f.Path
			size += f.Size
		}
		base := heapAfterGC()
		stop := liveHeap()
		m2, err := New(Config{}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		res, err := m2.RestoreSnapshot(context.Background(), paths)
		restore := time.Since(start)
		peak := stop()
		if err != nil {
			b.Fatal(err)
		}
		if res.Objects != n {
			b.Fatalf("restored %d objects, want %d", res.Objects, n)
		}
		after := heapAfterGC()
		runtime.KeepAlive(m2)
		b.ReportMetric(write.Seconds(), "snapshot-s")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(float64(size)/float64(n), "B/object")
		b.ReportMetric(float64(peak-base)/float64(after-base), "peak/heap")
		b.ReportMetric(float64(after-base)/(1<<20), "heap-MiB")
	}
}
