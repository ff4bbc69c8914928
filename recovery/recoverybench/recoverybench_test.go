package recoverybench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTakeoverTable(t *testing.T) {
	var out strings.Builder
	if err := RunTakeover(context.Background(), TakeoverConfig{Gens: 3, OpSize: 16, Runs: 1}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| new shard |", "| takeover, predecessor closed |", "| takeover, predecessor appending |", "| takeover, with checkpoint |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// A small shard restores every byte written: the bench fails otherwise.
func TestHydrateRestoresWhatItWrote(t *testing.T) {
	var out, log strings.Builder
	cfg := HydrateConfig{CheckpointMiB: 1, TranslogMiB: 1, FileMiB: 1, SyncKiB: 256, Parallelism: 4}
	if err := RunHydrate(context.Background(), cfg, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, want := range []string{"| recovery (hydrate + replay) | 2 |", "| plain parallel GET |", "| local disk write", "recovery / min(GET, disk)", "target hydrate + replay >= 0.8x", "target hydrate + replay >= 0.9x min(GET, disk write)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestChunkLabel(t *testing.T) {
	for _, tc := range []struct {
		size int64
		want string
	}{{0, "default"}, {-1, "off"}, {16 << 20, "16384 KiB"}, {512 << 10, "512 KiB"}} {
		if got := chunkLabel(tc.size); got != tc.want {
			t.Errorf("chunkLabel(%d) = %q, want %q", tc.size, got, tc.want)
		}
	}
}

func TestSummarizeHydrate(t *testing.T) {
	rows := []measured{
		{name: rowGet, bytes: 10, elapsed: 2 * time.Second, cpu: time.Second},
		{name: rowDisk, bytes: 6, elapsed: time.Second, cpu: 3 * time.Second},
		{name: rowRec, bytes: 10, elapsed: 4 * time.Second, cpu: 2 * time.Second},
		{name: rowGetWrite, bytes: 10, elapsed: 9 * time.Second},
		{name: rowRec, bytes: 10, elapsed: 6 * time.Second, cpu: 2 * time.Second},
	}
	s, err := summarizeHydrate(rows, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.getSec, []float64{2}) || !slices.Equal(s.diskCPU, []float64{3}) || !slices.Equal(s.recSec, []float64{4, 6}) || medianOf(s.recSec) != 5 {
		t.Fatalf("summary %+v: the reference row counts nowhere, recoveries median 5", s)
	}
	rows[4].bytes = 9
	if _, err := summarizeHydrate(rows, 10); err == nil || !strings.Contains(err.Error(), "restored 9 bytes, wrote 10") {
		t.Fatalf("a recovery short of the bytes written: %v", err)
	}
}

func TestPhases(t *testing.T) {
	var p phases
	p.seen("hydrate", time.Second)
	p.seen("replay", 2*time.Second)
	p.seen("hydrate", 3*time.Second)
	var log strings.Builder
	p.report(&log, "hydrate", "replay", "missing")
	want := "  hydrate: first progress at 1.00s, last at 3.00s\n  replay: first progress at 2.00s, last at 2.00s\n  missing: first progress at 0.00s, last at 0.00s\n"
	if log.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", log.String(), want)
	}
}
