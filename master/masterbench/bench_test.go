package masterbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/master"
)

// The remount of a populated segment leases every object and publishes.
func TestSmallRun(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), &out, Options{RemountSizes: []int{2000}, ReadClients: []int{1, 2}, ReadKeys: 100, ReadDuration: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"visible TTL", "2000", "in process", "API", "allocations per lease grant"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	row, err := BenchRemount(context.Background(), 5000)
	if err != nil {
		t.Fatal(err)
	}
	if row.Result.MatchedObjects != 5000 || row.Result.VisibleTTL <= 0 || row.Result.VisibleTTL > 10*time.Second {
		t.Fatalf("remount result %+v", row.Result)
	}
}

func benchRemount(b *testing.B, n int) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		m, err := master.New(master.Config{}, master.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := Populate(ctx, m, n); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := Remount(ctx, m, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.AssignDuration.Milliseconds()), "assign-ms")
		b.ReportMetric(float64(res.VisibleTTL.Milliseconds()), "visible-ttl-ms")
	}
}

func BenchmarkRemount1M(b *testing.B) { benchRemount(b, 1_000_000) }

// BenchmarkRemount10M needs several GB of memory; run it on its own.
func BenchmarkRemount10M(b *testing.B) { benchRemount(b, 10_000_000) }

func BenchmarkGetReplicaListParallel(b *testing.B) {
	ctx := context.Background()
	m, err := master.New(master.Config{}, master.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const keys = 100_000
	if err := Populate(ctx, m, keys); err != nil {
		b.Fatal(err)
	}
	if _, err := Remount(ctx, m, keys); err != nil {
		b.Fatal(err)
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = Key(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var buf []master.ReplicaInfo
		var err error
		i := 0
		for pb.Next() {
			buf, err = m.AppendReplicaList(ctx, buf[:0], "bench", names[i%keys])
			if err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
}

// The HA tables run end to end on a small scale: a snapshot restores every
// object, a promotion serves its segment, and group commit puts several
// mutations in one generation under concurrent clients.
func TestSmallHARun(t *testing.T) {
	store, err := fs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	o := HAOptions{Store: store, Where: "fs", Dir: t.TempDir(), SnapshotSizes: []int{3000}, PromoteObjects: 2000, AppendClients: []int{1, 8}, AppendDuration: 300 * time.Millisecond}
	var out bytes.Buffer
	if err := RunHA(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B/object", "promote to serving", "store writes/mutation", "3000", "2000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	row, err := BenchAppend(context.Background(), o, 8, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if row.Mutations == 0 || row.Appends == 0 || row.Writes == 0 || row.Writes/uint64(row.Mutations) > 4 {
		t.Fatalf("append row %+v", row)
	}
}
