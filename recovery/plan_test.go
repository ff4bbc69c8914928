package recovery

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// planLineage: term 1 wrote generations 1..10, term 3 restored from 10
// and wrote 11..20 (the restore point of term 4 is generation 20 of 3).
var planLineage = seal.Lineage{
	Ranges:   []seal.Range{{Term: 1, From: 1, To: 10}, {Term: 3, From: 11, To: 20}},
	Complete: true,
}

// truncated: the markers below term 3 were collected.
var truncated = seal.Lineage{Ranges: []seal.Range{{Term: 3, From: 11, To: 20}}}

func manifests(refs ...seal.CheckpointRef) []blobstore.Attrs {
	var out []blobstore.Attrs
	for _, r := range refs {
		out = append(out, blobstore.Attrs{Key: layout.ManifestKey(r.Term, r.Gen)})
	}
	return out
}

func TestRestoreModeOf(t *testing.T) {
	lazy := func(context.Context, *Shard, []seal.CheckpointRef) (*seal.Manifest, error) { return nil, nil }
	files := seal.NewMemFiles()
	for _, tc := range []struct {
		name  string
		opts  Options
		want  restoreMode
		lists bool
		pre   bool
	}{
		{"nothing: replay", Options{}, restoreReplay, false, false},
		{"dir: hydrate", Options{Dir: "d"}, restoreHydrate, true, true},
		{"files: hydrate", Options{Files: files}, restoreHydrate, true, true},
		{"lazy", Options{Lazy: lazy}, restoreLazy, true, false},
		{"lazy wins over dir", Options{Lazy: lazy, Dir: "d"}, restoreLazy, true, false},
		{"resume", Options{Resume: &Position{}}, restoreResume, false, false},
		{"resume wins over lazy and dir", Options{Resume: &Position{}, Lazy: lazy, Dir: "d", Files: files}, restoreResume, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := restoreModeOf(tc.opts)
			if m != tc.want || m.listsCheckpoints() != tc.lists || m.prefetches() != tc.pre {
				t.Fatalf("mode %v lists %v prefetches %v, want %v %v %v", m, m.listsCheckpoints(), m.prefetches(), tc.want, tc.lists, tc.pre)
			}
		})
	}
}

func TestNeedsLeaseWait(t *testing.T) {
	lease := seal.Fencing{Mode: translog.Lease, LeaseInterval: time.Second}
	for _, tc := range []struct {
		name          string
		f             seal.Fencing
		swept, marker bool
		want          bool
	}{
		{"per-sync never waits", seal.Fencing{Mode: translog.PerSync}, true, true, false},
		{"disabled never waits", seal.Fencing{Disabled: true, Mode: translog.Lease}, true, true, false},
		{"create-only never waits", seal.Fencing{Mode: translog.CreateOnly}, true, true, false},
		{"lease, a swept predecessor", lease, true, false, true},
		{"lease, a lower marker only", lease, false, true, true},
		{"lease, no predecessor at all", lease, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsLeaseWait(tc.f, tc.swept, tc.marker); got != tc.want {
				t.Fatalf("needsLeaseWait = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestManifestAhead(t *testing.T) {
	restore := seal.RestorePoint{Term: 3, Gen: 20}
	listed := manifests(seal.CheckpointRef{Term: 1, Gen: 5}, seal.CheckpointRef{Term: 3, Gen: 15}, seal.CheckpointRef{Term: 2, Gen: 12})
	newest := seal.CheckpointRef{Term: 3, Gen: 15}
	other := seal.CheckpointRef{Term: 1, Gen: 5}
	for _, tc := range []struct {
		name    string
		mode    restoreMode
		listed  []blobstore.Attrs
		listErr error
		restore seal.RestorePoint
		pre     *seal.CheckpointRef
		want    string
	}{
		{"the newest lineage candidate", restoreHydrate, listed, nil, restore, nil, layout.ManifestKey(3, 15)},
		{"the prefetch fetches another one", restoreHydrate, listed, nil, restore, &other, layout.ManifestKey(3, 15)},
		{"the prefetch fetches it", restoreHydrate, listed, nil, restore, &newest, ""},
		{"lazy reads none", restoreLazy, listed, nil, restore, nil, ""},
		{"resume reads none", restoreResume, listed, nil, restore, nil, ""},
		{"the listing failed", restoreHydrate, listed, errors.New("x"), restore, nil, ""},
		{"restore point at generation 0", restoreHydrate, listed, nil, seal.RestorePoint{}, nil, ""},
		{"no candidate (off the lineage)", restoreHydrate, manifests(seal.CheckpointRef{Term: 2, Gen: 12}), nil, restore, nil, ""},
		{"only candidates at or below the restore point", restoreHydrate, listed, nil, seal.RestorePoint{Term: 3, Gen: 14}, nil, layout.ManifestKey(1, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := manifestAhead(tc.mode, tc.listed, tc.listErr, planLineage, tc.restore, tc.pre); got != tc.want {
				t.Fatalf("manifestAhead = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLazyCandidatesAndExpectedBase(t *testing.T) {
	listed := manifests(seal.CheckpointRef{Term: 1, Gen: 5}, seal.CheckpointRef{Term: 3, Gen: 15})
	if got := lazyCandidates(listed, planLineage, seal.RestorePoint{}); got != nil {
		t.Fatalf("restore point 0: candidates %v, want nil", got)
	}
	got := lazyCandidates(listed, planLineage, seal.RestorePoint{Term: 3, Gen: 20})
	if len(got) != 2 || got[0] != (seal.CheckpointRef{Term: 3, Gen: 15}) {
		t.Fatalf("candidates %v, want term 3 gen 15 first", got)
	}
	if b := expectedBase(got); b != 15 {
		t.Fatalf("expectedBase = %d, want 15", b)
	}
	none := lazyCandidates(nil, planLineage, seal.RestorePoint{Term: 3, Gen: 20})
	if none == nil || len(none) != 0 {
		t.Fatalf("no checkpoint listed: candidates %#v, want empty and not nil", none)
	}
	if b := expectedBase(none); b != 0 {
		t.Fatalf("expectedBase of none = %d, want 0", b)
	}
}

func TestCheckResume(t *testing.T) {
	restore := seal.RestorePoint{Term: 3, Gen: 20}
	for _, tc := range []struct {
		name string
		pos  Position
		ok   bool
	}{
		{"empty history", Position{}, true},
		{"on the lineage, older term", Position{Term: 1, Gen: 7}, true},
		{"on the lineage, at the restore point", Position{Term: 3, Gen: 20}, true},
		{"negative generation", Position{Term: 1, Gen: -1}, false},
		{"past the restore point", Position{Term: 3, Gen: 21}, false},
		{"a history a successor cut off", Position{Term: 2, Gen: 12}, false},
		{"right generation, wrong term", Position{Term: 1, Gen: 12}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkResume(tc.pos, restore, planLineage)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrResumeOffLineage)) {
				t.Fatalf("checkResume(%+v) = %v, want ok %v", tc.pos, err, tc.ok)
			}
		})
	}
}

func TestCheckReplayable(t *testing.T) {
	restore := seal.RestorePoint{Term: 3, Gen: 20}
	for _, tc := range []struct {
		name string
		base int64
		lin  seal.Lineage
		ok   bool
	}{
		{"complete chain from 0", 0, planLineage, true},
		{"truncated chain from 0", 0, truncated, false},
		{"truncated chain from a checkpoint below its base", 9, truncated, false},
		{"truncated chain from its base", 10, truncated, true},
		{"truncated chain, nothing to replay", 20, truncated, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkReplayable(tc.base, restore, tc.lin, 2)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, seal.ErrLineageTruncated)) {
				t.Fatalf("checkReplayable(%d) = %v, want ok %v", tc.base, err, tc.ok)
			}
		})
	}
}

func TestReplayWindow(t *testing.T) {
	for _, tc := range []struct{ p, want int }{{-1, 64}, {0, 64}, {32, 64}, {64, 64}, {100, 100}} {
		if got := replayWindow(tc.p); got != tc.want {
			t.Errorf("replayWindow(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
}

func TestWriterOptions(t *testing.T) {
	clk := clock.NewFake()
	caller := translog.Options{Shard: "ignored", Term: 9, MaxPipeline: 3, FencingMode: translog.PerSync}
	lease := seal.Fencing{Mode: translog.Lease, LeaseInterval: 2 * time.Second}
	wo := writerOptions(caller, lease, "s", 4, "a4", seal.RestorePoint{Term: 3, Gen: 20}, 77, clk)
	if wo.Shard != "s" || wo.Term != 4 || wo.Allocation != "a4" {
		t.Fatalf("identity %q %d %q, want the chain's", wo.Shard, wo.Term, wo.Allocation)
	}
	if wo.StartGen != 21 || wo.StartSeqNo != 77 {
		t.Fatalf("start gen %d seq %d, want 21 77", wo.StartGen, wo.StartSeqNo)
	}
	if wo.FencingMode != translog.Lease || wo.LeaseInterval != 2*time.Second || wo.MaxPipeline != 3 {
		t.Fatalf("mode %v lease %v pipeline %d: want the stored fencing over the caller's other options", wo.FencingMode, wo.LeaseInterval, wo.MaxPipeline)
	}
	if wo.Clock != clk {
		t.Fatal("an unset writer clk takes Open's")
	}
	own := clock.NewAuto()
	caller.Clock = own
	if wo := writerOptions(caller, lease, "s", 4, "a4", seal.RestorePoint{}, 0, clk); wo.Clock != own || wo.StartGen != 1 {
		t.Fatalf("clk kept %v, start gen %d: want the caller's clk and generation 1", wo.Clock == own, wo.StartGen)
	}
}

func TestHookSteps(t *testing.T) {
	var h hookSteps
	settings := errors.New("settings read failed")
	survey := errors.New("survey failed")
	if h.note("Settings", nil) != nil || len(h.errs) != 0 {
		t.Fatal("a nil error is not noted")
	}
	if h.note("Settings", settings) != settings || h.note("Seal", survey) != survey {
		t.Fatal("note returns the error it was given")
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{settings, "Settings"},
		{fmt.Errorf("claim: %w", survey), "Seal"},
		{errors.New("list failed"), "Claim"},
	} {
		if got := h.stepOf(tc.err, "Claim"); got != tc.want {
			t.Errorf("stepOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// The same error noted again under another step: the latest counts.
	h.note("Seal", settings)
	if got := h.stepOf(settings, "Claim"); got != "Seal" {
		t.Errorf("stepOf after a second note = %q, want Seal", got)
	}
}
