package recovery_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
)

// TestNewShardOpensInSevenRequests: LIST fence/ and GET settings, the
// fence key's create, then the verifying LIST beside the settings' create
// and the LIST of seal/, then the marker. The settings are created only
// after the sweep (the read of them that counts).
func TestNewShardOpensInSevenRequests(t *testing.T) {
	fs := faulty.New(mem.New(), 1)
	var mu sync.Mutex
	var sent []string
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, r.Op.String()+" "+r.Key)
		return nil
	}})
	sh := open(t, fs.Container, 1, "a1", options(nil))
	closeW(t, sh.Writer)
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	fenceCreate, settingsCreate := -1, -1
	for i, s := range sent {
		op, key, _ := strings.Cut(s, " ")
		count[op]++
		switch {
		case op == "CreateIfAbsent" && key == layout.FenceKey(1):
			fenceCreate = i
		case op == "CreateIfAbsent" && key == layout.FencingKey:
			settingsCreate = i
		}
	}
	// Up to the marker: the writer's Close sends nothing on a new shard.
	if len(sent) != 7 || count["List"] != 3 || count["Get"] != 1 || count["CreateIfAbsent"] != 3 {
		t.Fatalf("a new shard's open sent %d requests, want 7 (3 LIST, 1 GET, 3 creates):\n%s", len(sent), strings.Join(sent, "\n"))
	}
	if settingsCreate < fenceCreate {
		t.Fatalf("the settings were created before the fence key:\n%s", strings.Join(sent, "\n"))
	}
}

// TestTakeoverReadsBesideTheClaimsLists: the settings are read beside the
// claim's first LIST, and the seal's first round (the LIST of seal/) and
// the settings read that counts go beside the LIST that verifies the
// sweep. Each pair waits for the other; sent one after the other, the
// open would stall and fail.
func TestTakeoverReadsBesideTheClaimsLists(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	sh1 := open(t, fs.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "x")
	closeW(t, sh1.Writer)

	type meeting struct{ a, b chan struct{} }
	newMeeting := func() meeting { return meeting{make(chan struct{}, 1), make(chan struct{}, 1)} }
	meet := func(signal, wait chan struct{}) error {
		select {
		case signal <- struct{}{}:
		default:
		}
		select {
		case <-wait:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("two requests of one round were not sent side by side")
		}
	}
	first, second := newMeeting(), newMeeting()
	var mu sync.Mutex
	fenceLists, settingsGets := 0, 0
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
		mu.Lock()
		var m *meeting
		side := 0
		switch {
		case r.Op == blobstore.OpList && r.Key == layout.FencePrefix:
			fenceLists++
			switch fenceLists {
			case 1:
				m = &first
			case 2:
				m = &second
			}
		case r.Op == blobstore.OpGet && r.Key == layout.FencingKey:
			settingsGets++
			if settingsGets == 1 {
				m, side = &first, 1
			}
		case r.Op == blobstore.OpList && r.Key == layout.MarkerPrefix:
			m, side = &second, 1
		}
		mu.Unlock()
		if m == nil {
			return nil
		}
		if side == 0 {
			return meet(m.a, m.b)
		}
		return meet(m.b, m.a)
	}})
	o := options(nil)
	o.Backoff = fence.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 1}
	sh, err := recovery.Open(ctx, fs.Container, shard, 2, "a2", o)
	if err != nil {
		t.Fatal(err)
	}
	closeW(t, sh.Writer)
	if fenceLists != 2 || settingsGets != 2 {
		t.Fatalf("the takeover sent %d LISTs of fence/ and %d GETs of the settings, want 2 and 2", fenceLists, settingsGets)
	}
}

// A store that fails both the claim's LIST and the settings read beside it
// is reported at the claim, by the claim's error; a refused setting is
// reported at Settings.
func TestOpenNamesTheStepOfAFailureBesideTheClaim(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	fs.MustAdd(faulty.Rule{Ops: faulty.Reads, Fault: faulty.Unavailable})
	o := options(nil)
	o.Backoff = fence.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 1}
	_, err := recovery.Open(ctx, fs.Container, shard, 1, "a1", o)
	var re *recovery.Error
	if !errors.As(err, &re) || re.Step != "Claim" {
		t.Fatalf("open with LIST failing: %v, want a recovery error at Claim", err)
	}
	fs.Clear()
	store := mem.New()
	o2 := options(nil)
	o2.Writer.FencingDisabled = true
	sh := open(t, store, 1, "a1", o2)
	closeW(t, sh.Writer)
	_, err = recovery.Open(ctx, store, shard, 2, "a2", options(nil))
	if !errors.As(err, &re) || re.Step != "Settings" || !errors.Is(err, seal.ErrFencingMismatch) {
		t.Fatalf("fenced open of an unfenced shard: %v, want a recovery error at Settings", err)
	}
}

// TestCheckpointTakeoverDownloadsBesideTheMarker: a takeover with a
// checkpoint reads the checkpoint's manifest beside the walk's first
// poison and its file beside the seal marker's create (seal.Prefetch), and
// still hydrates it. Each pair waits for the other; sent one after the
// other, the open would stall and fail.
func TestCheckpointTakeoverDownloadsBesideTheMarker(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	sh1 := open(t, fs.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "a")
	appendOps(t, sh1.Writer, "b")
	po := seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 2}
	if _, err := seal.PublishCheckpoint(ctx, fs.Container, sh1.Chain, 2, writeFiles(t, t.TempDir(), map[string]string{"state": "a,b"}), po); err != nil {
		t.Fatal(err)
	}
	appendOps(t, sh1.Writer, "c")
	closeW(t, sh1.Writer)

	type meeting struct{ a, b chan struct{} }
	newMeeting := func() meeting { return meeting{make(chan struct{}, 1), make(chan struct{}, 1)} }
	meet := func(signal, wait chan struct{}) error {
		select {
		case signal <- struct{}{}:
		default:
		}
		select {
		case <-wait:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("two requests of one round were not sent side by side")
		}
	}
	poisonRound, markerRound := newMeeting(), newMeeting()
	var mu sync.Mutex
	met := map[string]int{}
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
		mu.Lock()
		var m *meeting
		side := 0
		switch {
		case r.Op == blobstore.OpCreateIfAbsent && r.Key == layout.MDKey(1, 4):
			m = &poisonRound
		case r.Op == blobstore.OpGet && r.Key == layout.ManifestKey(1, 2):
			m, side = &poisonRound, 1
		case r.Op == blobstore.OpCreateIfAbsent && r.Key == layout.MarkerKey(2):
			m = &markerRound
		case (r.Op == blobstore.OpGetRange || r.Op == blobstore.OpGet) && r.Key == layout.FilePrefix(1, 2)+"state":
			m, side = &markerRound, 1
		}
		if m != nil {
			met[r.Op.String()+" "+r.Key]++
		}
		mu.Unlock()
		if m == nil {
			return nil
		}
		if side == 0 {
			return meet(m.a, m.b)
		}
		return meet(m.b, m.a)
	}})
	var l log
	o := options(&l)
	o.Dir = t.TempDir()
	o.Backoff = fence.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 1}
	sh, err := recovery.Open(ctx, fs.Container, shard, 2, "a2", o)
	if err != nil {
		t.Fatal(err)
	}
	closeW(t, sh.Writer)
	if sh.Checkpoint == nil || sh.Checkpoint.Gen != 2 || len(sh.Refused) != 0 {
		t.Fatalf("hydrated %+v (refused %v), want the gen-2 checkpoint", sh.Checkpoint, sh.Refused)
	}
	if got, err := os.ReadFile(filepath.Join(o.Dir, "state")); err != nil || string(got) != "a,b" {
		t.Fatalf("state %q (%v), want a,b", got, err)
	}
	if len(met) != 4 {
		t.Fatalf("requests of the two rounds: %v, want the poison, the manifest GET, the marker and the file read", met)
	}
}
