package seal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

const shard = "s1"

var fastRetry = fence.Backoff{Initial: 100 * time.Microsecond, Max: 2 * time.Millisecond, Attempts: 6}

func forEach(t *testing.T, fn func(t *testing.T, store *faulty.Container)) {
	t.Run("mem", func(t *testing.T) { fn(t, faulty.New(mem.New(), 1)) })
	t.Run("fs", func(t *testing.T) {
		c, err := fs.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		fn(t, faulty.New(c, 1))
	})
	t.Run("faulty", func(t *testing.T) {
		f := faulty.New(mem.New(), 9)
		f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap, blobstore.OpDelete), Fault: faulty.LostResponse, Probability: 0.1})
		f.MustAdd(faulty.Rule{Ops: faulty.Reads, Fault: faulty.Unavailable, Probability: 0.05})
		fn(t, f)
	})
}

func openShard(t *testing.T, store *blobstore.Container, term int64, apply func(translog.Batch), dir string) *recovery.Shard {
	t.Helper()
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry, Dir: dir}
	o.Writer.Backoff = fastRetry
	o.Writer.InlineLimit = 64
	if apply != nil {
		o.Apply = func(_ context.Context, b translog.Batch) error { apply(b); return nil }
	}
	sh, err := recovery.Open(context.Background(), store, shard, term, fmt.Sprintf("a%d", term), o)
	if err != nil {
		t.Fatalf("open term %d: %v", term, err)
	}
	t.Cleanup(func() { _ = sh.Writer.Close(context.Background()) })
	return sh
}

func write(t *testing.T, w *translog.Writer, op string) {
	t.Helper()
	if _, err := w.Append(context.Background(), [][]byte{[]byte(op)}); err != nil {
		t.Fatalf("append %q: %v", op, err)
	}
}

// state is what a recovery sees: the checkpoint's state file plus the
// ops replayed after it.
func state(t *testing.T, store *blobstore.Container, term int64) string {
	t.Helper()
	dir := t.TempDir()
	var ops []string
	sh := openShard(t, store, term, func(b translog.Batch) {
		for _, op := range b.Ops {
			ops = append(ops, string(op))
		}
	}, dir)
	base := ""
	if len(sh.Refused) > 0 {
		t.Fatalf("recovery refused checkpoints: %+v", sh.Refused)
	}
	if sh.Checkpoint != nil {
		b, err := os.ReadFile(filepath.Join(dir, "state"))
		if err != nil {
			t.Fatal(err)
		}
		base = string(b)
	}
	return base + "+" + strings.Join(ops, ",")
}

func checkpoint(t *testing.T, store *blobstore.Container, sh *recovery.Shard, gen int64, content string, next int64) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := seal.PublishCheckpoint(context.Background(), store, sh.Chain, gen, []seal.LocalFile{{Name: "state", Path: p}},
		seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: next})
	if err != nil {
		t.Fatalf("publish at %d: %v", gen, err)
	}
}

func exists(t *testing.T, store *faulty.Container, key string) bool {
	t.Helper()
	_, err := store.Inner().Stat(context.Background(), key)
	if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// build makes a shard with history across terms, checkpoints, a poison and
// orphans: term 1 writes a..d with a checkpoint at 2, a successor (term 2)
// seals while term 1's md for gen 5 is held (then lands as an orphan past
// the poison), term 2 writes e, f with a checkpoint at 6.
func build(t *testing.T, store *faulty.Container) (*recovery.Shard, string) {
	t.Helper()
	ctx := context.Background()
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	write(t, sh1.Writer, "b")
	checkpoint(t, store.Container, sh1, 2, "a,b", 2)
	write(t, sh1.Writer, "c")
	write(t, sh1.Writer, "d")
	// An orphan of term 1 beyond the cut: a zombie md the successor's
	// poison at gen 5 left behind (placed directly, as a delayed create
	// landing late would).
	orphan := layout.MDKey(1, 6)
	body, err := translog.EncodeMD(translog.MD{Kind: translog.KindSync, Shard: shard, Term: 1, Gen: 6, Allocation: "a1", PrevGen: 5, FirstSeqNo: 5, OpCount: 1, PayloadLen: 2, Checksum: translog.Checksum(translog.EncodeOps([][]byte{[]byte("z")})), Inline: true, Payload: translog.EncodeOps([][]byte{[]byte("z")})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Inner().CreateIfAbsent(ctx, orphan, body); err != nil {
		t.Fatal(err)
	}
	sh2 := openShard(t, store.Container, 2, nil, "")
	if p := sh2.Seal.Marker.Poisoned; p != layout.MDKey(1, 5) {
		t.Fatalf("poisoned %q", p)
	}
	write(t, sh2.Writer, "e")
	write(t, sh2.Writer, "f")
	checkpoint(t, store.Container, sh2, 6, "a,b,c,d,e,f", 6)
	write(t, sh2.Writer, "g")
	return sh2, orphan
}

func TestGCRemovesOrphansKeepsPoisonsAndRestorePoint(t *testing.T) {
	forEach(t, func(t *testing.T, store *faulty.Container) {
		ctx := context.Background()
		sh2, orphan := build(t, store)
		poison := layout.MDKey(1, 5)

		rep, err := seal.Inspect(ctx, store.Container, shard, seal.Options{Backoff: fastRetry})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Poisons) != 1 || rep.Poisons[0].Key != poison || rep.Poisons[0].Sealed != 2 {
			t.Fatalf("inspect poisons %+v", rep.Poisons)
		}
		if len(rep.Orphans) != 1 || rep.Orphans[0].Key != orphan {
			t.Fatalf("inspect orphans %+v", rep.Orphans)
		}
		if len(rep.Fence) != 1 || rep.Fence[0].Term != 2 || rep.Fence[0].Record.Allocation != "a2" {
			t.Fatalf("inspect fence %+v", rep.Fence)
		}

		dry, err := seal.GC(ctx, store.Container, sh2.Chain, seal.GCOptions{Options: seal.Options{Backoff: fastRetry}, DryRun: true})
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		if len(dry.Deleted) != 0 || !exists(t, store, orphan) {
			t.Fatal("the dry run deleted")
		}
		if fmt.Sprint(dry.Planned) != fmt.Sprint(rep.GC) {
			t.Fatalf("dry run plans %v, inspect says %v", dry.Planned, rep.GC)
		}

		res, err := seal.GC(ctx, store.Container, sh2.Chain, seal.GCOptions{Options: seal.Options{Backoff: fastRetry}, Policy: seal.GCPolicy{RetainCheckpoints: 1}})
		if err != nil {
			t.Fatalf("gc: %v", err)
		}
		if exists(t, store, orphan) {
			t.Fatal("GC kept the orphan")
		}
		if !exists(t, store, poison) {
			t.Fatal("GC deleted a poison")
		}
		for g := int64(1); g <= 4; g++ {
			if exists(t, store, layout.MDKey(1, g)) {
				t.Fatalf("GC kept translog gen %d below the checkpoint at 6", g)
			}
		}
		if !exists(t, store, layout.MDKey(2, 7)) || !exists(t, store, layout.ManifestKey(2, 6)) {
			t.Fatal("GC deleted what the restore point needs")
		}
		if exists(t, store, layout.ManifestKey(1, 2)) {
			t.Fatal("GC kept a checkpoint beyond retention")
		}
		if len(res.Deleted) != len(res.Planned) {
			t.Fatalf("deleted %d of %d planned", len(res.Deleted), len(res.Planned))
		}
		_ = sh2.Writer.Close(ctx)
		if got := state(t, store.Container, 3); got != "a,b,c,d,e,f+g" {
			t.Fatalf("state after GC: %q", got)
		}
	})
}

func TestGCFailsClosedOnAnUnreadableFence(t *testing.T) {
	forEach(t, func(t *testing.T, store *faulty.Container) {
		ctx := context.Background()
		sh2, orphan := build(t, store)
		store.MustAdd(faulty.Rule{Prefix: layout.FenceDir, Fault: faulty.Unavailable})
		_, err := seal.GC(ctx, store.Container, sh2.Chain, seal.GCOptions{Options: seal.Options{Backoff: fastRetry}})
		if !errors.Is(err, seal.ErrNotFresh) {
			t.Fatalf("gc with an unreadable fence: %v, want ErrNotFresh", err)
		}
		if !exists(t, store, orphan) || !exists(t, store, layout.MDKey(1, 1)) {
			t.Fatal("GC deleted without proving ownership")
		}
	})
}

func TestGCStopsWhenFreshnessRunsOut(t *testing.T) {
	ctx := context.Background()
	store := faulty.New(mem.New(), 1)
	sh2, _ := build(t, store)
	clock := clock.NewFake()
	clock.Advance(time.Hour)
	// The first deletion takes longer than the freshness interval: GC
	// must not go on deleting on an expired proof.
	store.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpDelete {
			clock.Advance(11 * time.Second)
		}
		return nil
	}})
	opts := seal.GCOptions{Options: seal.Options{Clock: clock, Backoff: fastRetry}, Freshness: 10 * time.Second}
	res, err := seal.GC(ctx, store.Container, sh2.Chain, opts)
	if !errors.Is(err, seal.ErrNotFresh) {
		t.Fatalf("gc whose proof ran out: %v, want ErrNotFresh", err)
	}
	if len(res.Deleted) != 1 || len(res.Planned) < 2 {
		t.Fatalf("deleted %d of %d planned, want exactly the first", len(res.Deleted), len(res.Planned))
	}
}

func TestGCRefusesASupersededTerm(t *testing.T) {
	ctx := context.Background()
	store := faulty.New(mem.New(), 1)
	sh2, orphan := build(t, store)
	sh3 := openShard(t, store.Container, 3, nil, "")
	_ = sh3
	if _, err := seal.GC(ctx, store.Container, sh2.Chain, seal.GCOptions{Options: seal.Options{Backoff: fastRetry}}); !errors.Is(err, fence.ErrFenced) && !errors.Is(err, seal.ErrNotFresh) {
		t.Fatalf("gc by a superseded term: %v", err)
	}
	if !exists(t, store, orphan) {
		t.Fatal("a superseded term collected")
	}
	// A stale proof is not trusted either: the marker of term 3 refuses.
	now := sh2.Chain.Instance().Clock().Now()
	_, err := seal.GC(ctx, store.Container, sh2.Chain, seal.GCOptions{Options: seal.Options{Backoff: fastRetry}, LastCAS: seal.Proof{At: now, Valid: true}})
	if err == nil {
		t.Fatal("gc by a superseded term with a fresh-looking proof succeeded")
	}
}

func TestPublishGate(t *testing.T) {
	ctx := context.Background()
	store := faulty.New(mem.New(), 1)
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	p := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(p, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := []seal.LocalFile{{Name: "state", Path: p}}
	po := seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 1}
	// Unreadable fence: publish anyway (fail open).
	id := store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpList), Prefix: layout.FenceDir, Fault: faulty.Unavailable})
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 1, files, po); err != nil {
		t.Fatalf("publish with an unreadable fence: %v", err)
	}
	store.Remove(id)
	// Same checkpoint again: idempotent.
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 1, files, po); err != nil {
		t.Fatalf("republish: %v", err)
	}
	// Superseded: refused.
	_ = openShard(t, store.Container, 2, nil, "")
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 1, files, po); !errors.Is(err, seal.ErrSuperseded) {
		t.Fatalf("publish by a superseded term: %v", err)
	}
	// Bad names never reach the store.
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 1, []seal.LocalFile{{Name: "../x", Path: p}}, po); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("publish of an escaping name: %v", err)
	}
}
