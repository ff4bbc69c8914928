package cost

import (
	"math"
	"testing"
	"time"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// The built-in table parses, names a source per row and a date, and has
// the providers the docs name.
func TestDefaultTable(t *testing.T) {
	tab := DefaultTable()
	for _, pc := range [][2]string{{"aws", "s3-standard"}, {"gcp", "standard"}, {"azure", "hot-lrs"}, {"cloudflare", "r2-standard"}} {
		p, err := tab.Find(pc[0], pc[1])
		if err != nil || p.PutPer1k <= 0 || p.GetPer1k <= 0 || p.StoragePerGBMonth <= 0 {
			t.Errorf("%v: %+v %v", pc, p, err)
		}
	}
	if _, err := tab.Find("aws", "nope"); err == nil {
		t.Error("an unknown class was found")
	}
	for _, bad := range []string{
		`{"date":"x","prices":[{"provider":"a","class":"b","put_per_1k":-1,"source":"s"}]}`,
		`{"date":"x","prices":[{"provider":"a","class":"b","source":""}]}`,
		`{"date":"x","prices":[{"provider":"a","class":"b","source":"s","typo":1}]}`,
		`{"prices":[{"provider":"a","class":"b","source":"s"}]}`,
	} {
		if _, err := ParseTable([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// The worked example of docs/OPERATIONS.md ("Cost"): one shard at 100
// syncs/s on S3 Standard, no payload beyond the inline limit, no
// checkpoint counted.
func TestWorkedExample(t *testing.T) {
	p, err := DefaultTable().Find("aws", "s3-standard")
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{SyncsPerSecond: 100, LeaseInterval: 10 * time.Second, InlineLimit: 1 << 20}
	want := map[Mode]float64{
		PerSync:    2628.00, // 2 x 100 x 2,628,000 s = 525.6M PUTs at $0.005/1k
		Observe:    2628.00,
		CreateOnly: 1340.28, // 262.8M PUTs + 65.7M GETs at $0.0004/1k
		Lease:      1315.31, // 262.8M md creates + 262,800 CASes (one per 10 s)
		Unfenced:   1314.00,
	}
	for m, usd := range want {
		if got := Cost(w, m, Protocol(m), p).TotalUSD; !near(got, usd, 0.01) {
			t.Errorf("%s: $%.2f, want $%.2f", m, got, usd)
		}
	}
	// A budget: per_sync at $1,000 a month allows 100 x 1000/2628 syncs/s.
	if got := MaxSyncsPerSecond(w, PerSync, Protocol(PerSync), p, 1000); !near(got, 38.05, 0.01) {
		t.Errorf("per_sync within $1000: %.2f syncs/s", got)
	}
	if got := MaxSyncsPerSecond(w, PerSync, Protocol(PerSync), p, 1e12); !math.IsInf(got, 1) {
		t.Errorf("an unbounded budget: %v", got)
	}
}

// Large payloads add a data object per sync; checkpoints add their files,
// manifest and GC listings, and cap the translog kept to one interval's.
func TestDataObjectsCheckpointsAndStorage(t *testing.T) {
	p := Price{PutPer1k: 1, GetPer1k: 1, StoragePerGBMonth: 1}
	secs := Month.Seconds()
	w := Workload{SyncsPerSecond: 1, BytesPerSecond: 2 << 20, InlineLimit: 1 << 20}
	e := Cost(w, Unfenced, Protocol(Unfenced), p)
	if e.DataPutsPerMonth != secs || e.PutPerMonth != 2*secs {
		t.Errorf("payloads above the inline limit: %+v", e)
	}
	if !near(e.StorageGiB, 2*secs/1024, 1e-6) {
		t.Errorf("no checkpoints: %v GiB kept, want a month of writes", e.StorageGiB)
	}
	w.CheckpointEvery, w.CheckpointFiles, w.CheckpointBytes = 10*time.Minute, 2, GiB
	e = Cost(w, Unfenced, Protocol(Unfenced), p)
	if want := secs / 600 * (2 + 1 + CheckpointLists); !near(e.CheckpointPutsPerMonth, want, 1e-6) {
		t.Errorf("checkpoint requests %v, want %v", e.CheckpointPutsPerMonth, want)
	}
	if want := 1 + 600*2.0/1024; !near(e.StorageGiB, want, 1e-9) {
		t.Errorf("storage %v GiB, want the checkpoint and ten minutes of writes (%v)", e.StorageGiB, want)
	}
	// An idle shard pays storage only.
	w.SyncsPerSecond, w.BytesPerSecond = 0, 0
	if e := Cost(w, PerSync, Protocol(PerSync), p); e.RequestUSD != 0 || e.StorageUSD != 1 {
		t.Errorf("idle shard: %+v", e)
	}
}

// The protocol's requests per sync are what the real writer sends: the
// translog writer of each mode, run on a metered in-memory store, counts
// the same (to the fence checks' rounding for create_only).
func TestProtocolMatchesTheWriter(t *testing.T) {
	for _, m := range Modes() {
		got, syncs, err := Measure(t.Context(), m, 400, 200*time.Microsecond)
		if err != nil {
			t.Fatal(err)
		}
		want := Protocol(m)
		tol := 0.02
		if m == CreateOnly {
			tol = 0.1 // a read every four syncs, one in flight at a time
		}
		if syncs < 20 || !near(got.Put, want.Put, 0.02) || !near(got.Get, want.Get, tol) {
			t.Errorf("%s: measured %.3f PUT + %.3f GET per sync over %d syncs; the protocol says %.3f + %.3f", m, got.Put, got.Get, syncs, want.Put, want.Get)
		}
	}
}
