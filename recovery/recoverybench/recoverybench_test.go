package recoverybench

import (
	"context"
	"strings"
	"testing"
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
