package sidecar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/internal/harness/testservers"
	"github.com/shardfence/shardfence/seal"
)

const warmBlock = 64 << 10

// warmFixture is a shard written by term 1 on one sidecar: ops a and b, a
// checkpoint after them (a large file across many blocks and a small
// one), then ops c and d, whose payloads are data objects.
type warmFixture struct {
	store *blobstore.Container
	big   []byte
	small []byte
}

func newWarmFixture(t *testing.T, store *blobstore.Container) *warmFixture {
	t.Helper()
	f := &warmFixture{store: store, big: make([]byte, 10*warmBlock+1234), small: []byte("hello")}
	rng := rand.NewChaCha8([32]byte{7})
	_, _ = rng.Read(f.big)
	// No GC after the checkpoint: the tests read the lineage below it.
	_, a := serveOn(t, store, Options{Checkpoint: CheckpointPolicy{NoGC: true}})
	st, err := a.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 1, AllocationId: "a1",
		Settings: &sidecarv1.ShardSettings{InlineLimitBytes: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	ack, err := appendOps(t.Context(), a, "s", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ack.GetGen(), Files: []*sidecarv1.CheckpointFile{
		{Name: "seg/big", Data: f.big, Last: true}, {Name: "small", Data: f.small, Last: true},
	}})); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"c", "d"} {
		if _, err := appendOps(t.Context(), a, "s", op); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// warmSidecar serves the production opener with a small block.
func warmSidecar(t *testing.T, store *blobstore.Container, cache CacheOptions) (*Server, sidecarv1connect.SidecarServiceClient) {
	t.Helper()
	if cache.Dir == "" {
		cache.Dir = t.TempDir()
	}
	if cache.BlockBytes == 0 {
		cache.BlockBytes = warmBlock
	}
	return serveOn(t, store, Options{Cache: cache})
}

func warmOpen(t *testing.T, c sidecarv1connect.SidecarServiceClient, term int64, alloc string) *sidecarv1.Opened {
	t.Helper()
	st, err := c.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: term, AllocationId: alloc, Warm: true}))
	if err != nil {
		t.Fatal(err)
	}
	var opened *sidecarv1.Opened
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *sidecarv1.OpenResponse_Opened:
			opened = ev.Opened
		case *sidecarv1.OpenResponse_CheckpointFile, *sidecarv1.OpenResponse_Ops:
			t.Errorf("a warm open streamed %T", ev)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("warm open: %v", err)
	}
	if opened == nil {
		t.Fatal("warm open ended without Opened")
	}
	return opened
}

// readFile reads a range with ReadCheckpointFile and checks the chunks
// follow one another.
func readFile(ctx context.Context, c sidecarv1connect.SidecarServiceClient, file string, off, n int64) ([]byte, error) {
	st, err := c.ReadCheckpointFile(ctx, connect.NewRequest(&sidecarv1.ReadCheckpointFileRequest{Shard: "s", File: file, Offset: off, Length: n}))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []byte
	next := off
	for st.Receive() {
		m := st.Msg()
		if m.GetOffset() != next {
			return out, io.ErrUnexpectedEOF
		}
		out = append(out, m.GetData()...)
		next += int64(len(m.GetData()))
	}
	return out, st.Err()
}

func status(t *testing.T, c sidecarv1connect.SidecarServiceClient) *sidecarv1.ShardStatus {
	t.Helper()
	res, err := c.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetStatus()
}

// holdFirst holds the first request of every key matching match until
// release is called; later requests of the same key pass. A warm open's
// replay reads each translog object first, so its reads wait while a
// Read of the same objects goes through.
func holdFirst(match func(blobstore.Call) bool) (blobstore.Middleware, func()) {
	var mu sync.Mutex
	seen := map[string]bool{}
	gate := make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		if match(call) {
			mu.Lock()
			first := !seen[call.Key]
			seen[call.Key] = true
			mu.Unlock()
			if first {
				select {
				case <-gate:
				case <-ctx.Done():
					return blobstore.Result{}, ctx.Err()
				}
			}
		}
		return next(ctx, call)
	}, func() { once.Do(func() { close(gate) }) }
}

// A warm open returns once the seal is done, before the replay: the
// checkpoint's files are readable at once, Read serves the translog,
// appends are refused as replaying; once the replay ends appends go on at
// the right sequence number, and the background hydration makes the
// shard full.
func TestWarmOpenServesBeforeReplayAndTurnsFull(t *testing.T) {
	base := mem.New()
	fx := newWarmFixture(t, base)
	mw, release := holdFirst(func(c blobstore.Call) bool {
		return strings.Contains(c.Key, "translog/data/")
	})
	defer release()
	srv, b := warmSidecar(t, base.With("hold", mw), CacheOptions{})
	opened := warmOpen(t, b, 2, "a2")
	ck := opened.GetCheckpoint()
	if ck == nil || ck.GetNextSeqNo() != 2 || len(ck.GetFiles()) != 2 {
		t.Fatalf("opened checkpoint %v, want 2 files and next seq no 2", ck)
	}
	st := status(t, b)
	if st.GetState() != "open" || st.GetLocality() == "" || !st.GetReplaying() || st.GetCheckpointBytesTotal() != int64(len(fx.big)+len(fx.small)) {
		t.Fatalf("status after a warm open: %v", st)
	}
	_, err := appendOps(t.Context(), b, "s", "e")
	if code, d := detailOf(t, err); code != connect.CodeUnavailable || d.GetReason() != "replaying" {
		t.Fatalf("append while replaying: %v", err)
	}
	// A barrier has no position to promise until the replay learnt where
	// the log ends (a reader would miss the ops after the checkpoint).
	if _, err := barrier(t.Context(), b, "s"); err == nil {
		t.Fatal("a barrier succeeded while the warm shard was replaying")
	} else if code, d := detailOf(t, err); code != connect.CodeUnavailable || d.GetReason() != "replaying" {
		t.Fatalf("barrier while replaying: %v", err)
	}
	got, err := readFile(t.Context(), b, "seg/big", 3*warmBlock-10, 2*warmBlock+20)
	if err != nil || !bytes.Equal(got, fx.big[3*warmBlock-10:5*warmBlock+10]) {
		t.Fatalf("read across blocks: %d bytes, %v", len(got), err)
	}
	if got, err := readFile(t.Context(), b, "small", 0, 0); err != nil || string(got) != "hello" {
		t.Fatalf("small file: %q, %v", got, err)
	}
	ops, err := readAll(t, b, "s", ck.GetNextSeqNo(), 0)
	if err != nil || strings.Join(ops, ",") != "c,d" {
		t.Fatalf("read after the checkpoint while replaying: %v, %v", ops, err)
	}
	release()
	waitFor(t, "the replay", func() bool { return !status(t, b).GetReplaying() })
	if r, err := barrier(t.Context(), b, "s"); err != nil || r.GetNextSeqNo() != 4 {
		t.Fatalf("barrier after the replay: %v %v (want the log's end, 4)", r, err)
	}
	ack, err := appendOps(t.Context(), b, "s", "e")
	if err != nil || ack.GetFirstSeqNo() != 4 || ack.GetTerm() != 2 {
		t.Fatalf("append after the replay: %v, %v", ack, err)
	}
	waitFor(t, "full locality", func() bool { return status(t, b).GetLocality() == "full" })
	st = status(t, b)
	if st.GetCheckpointBytesLocal() != st.GetCheckpointBytesTotal() || st.GetWarmError() != "" {
		t.Fatalf("full status %v", st)
	}
	misses := st.GetCacheMisses()
	if got, err := readFile(t.Context(), b, "seg/big", 0, 0); err != nil || !bytes.Equal(got, fx.big) {
		t.Fatalf("whole file when full: %d bytes, %v", len(got), err)
	}
	if st := status(t, b); st.GetCacheMisses() != misses {
		t.Fatalf("a full shard fetched from the store: misses %d -> %d", misses, st.GetCacheMisses())
	}
	if used, _ := srv.warmCache().usage(); used != 0 {
		t.Fatalf("cache holds %d bytes of a full shard", used)
	}
	ops, err = readAll(t, b, "s", 0, 0)
	if err != nil || strings.Join(ops, ",") != "a,b,c,d,e" {
		t.Fatalf("lineage: %v, %v", ops, err)
	}
}

// Bad input is a typed error: a range past the file (also one whose end
// overflows), a file not in the manifest, a negative offset, and a shard
// opened without warm.
func TestWarmReadCheckpointFileBadInput(t *testing.T) {
	base := mem.New()
	fx := newWarmFixture(t, base)
	_, b := warmSidecar(t, base, CacheOptions{HydrateParallelism: -1})
	warmOpen(t, b, 2, "a2")
	for _, tc := range []struct {
		file      string
		off, n    int64
		code      connect.Code
		reason    string
		inMessage string
	}{
		{"seg/big", int64(len(fx.big)) - 10, 11, connect.CodeOutOfRange, "out_of_range", "range beyond"},
		{"seg/big", int64(len(fx.big)) + 1, 0, connect.CodeOutOfRange, "out_of_range", "range beyond"},
		// An offset plus a length past 2^63 is refused, and named as sent:
		// the message used to show the overflowed sum ("..-2").
		{"seg/big", 1, math.MaxInt64, connect.CodeOutOfRange, "out_of_range", "offset 1 and length 9223372036854775807 reach past its end"},
		{"seg/big", math.MaxInt64, 0, connect.CodeOutOfRange, "out_of_range", "offset 9223372036854775807 and length 0 reach past its end"},
		{"nope", 0, 1, connect.CodeNotFound, "no_such_file", "not in the manifest"},
		{"../small", 0, 1, connect.CodeNotFound, "no_such_file", "not in the manifest"},
		{"small", -1, 1, connect.CodeInvalidArgument, "invalid_argument", "offset -1"},
	} {
		got, err := readFile(t.Context(), b, tc.file, tc.off, tc.n)
		if err == nil {
			t.Fatalf("%s %d+%d: no error", tc.file, tc.off, tc.n)
		}
		code, d := detailOf(t, err)
		if code != tc.code || d.GetReason() != tc.reason || !strings.Contains(err.Error(), tc.inMessage) || len(got) != 0 {
			t.Errorf("%s %d+%d: %v (%s), %d bytes; want %v %s", tc.file, tc.off, tc.n, code, d.GetReason(), len(got), tc.code, tc.reason)
		}
	}
	// The last byte exactly, and an empty read at the end, are fine.
	if got, err := readFile(t.Context(), b, "seg/big", int64(len(fx.big))-1, 1); err != nil || got[0] != fx.big[len(fx.big)-1] {
		t.Fatalf("last byte: %v, %v", got, err)
	}
	if got, err := readFile(t.Context(), b, "small", 5, 0); err != nil || len(got) != 0 {
		t.Fatalf("empty read at the end: %v, %v", got, err)
	}

	_, full := serveOn(t, base, Options{})
	openShard(t, full, "s", 3, "a3")
	_, err := readFile(t.Context(), full, "small", 0, 0)
	if code, d := detailOf(t, err); code != connect.CodeFailedPrecondition || d.GetReason() != "not_warm" {
		t.Fatalf("read of a full open's file: %v", err)
	}
}

// A cached block whose bytes changed on disk is fetched again, never
// served; when the store's copy differs from its first fetch too, the
// read fails as corrupt.
func TestWarmCorruptCachedBlock(t *testing.T) {
	base := mem.New()
	fx := newWarmFixture(t, base)
	var flip atomic.Bool
	store := base.With("flip", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		res, err := next(ctx, call)
		if err == nil && call.Op == blobstore.OpGetRange && strings.Contains(call.Key, "seg/big") && flip.Load() {
			res.Reader = &flipReader{rc: res.Reader}
		}
		return res, err
	})
	srv, b := warmSidecar(t, store, CacheOptions{HydrateParallelism: -1})
	warmOpen(t, b, 2, "a2")
	if _, err := readFile(t.Context(), b, "seg/big", 0, warmBlock); err != nil {
		t.Fatal(err)
	}
	damage := func() {
		t.Helper()
		p := srv.warmCache().pathOf(blockKey{shard: "s", term: 2, file: "seg/big", index: 0})
		if p == "" {
			t.Fatal("block 0 is not cached")
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[100] ^= 0xff
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	damage()
	got, err := readFile(t.Context(), b, "seg/big", 0, warmBlock)
	if err != nil || !bytes.Equal(got, fx.big[:warmBlock]) {
		t.Fatalf("read of a damaged cached block: %v", err)
	}
	st := status(t, b)
	if st.GetCacheMisses() != 2 || !strings.Contains(st.GetWarmError(), "checksum") {
		t.Fatalf("after the refetch: misses %d, warm error %q", st.GetCacheMisses(), st.GetWarmError())
	}
	damage()
	flip.Store(true)
	got, err = readFile(t.Context(), b, "seg/big", 0, warmBlock)
	code, d := detailOf(t, err)
	if code != connect.CodeDataLoss || d.GetReason() != "corrupt" || len(got) != 0 {
		t.Fatalf("store copy bad too: %v (%d bytes)", err, len(got))
	}
}

// flipReader flips one byte of what it reads.
type flipReader struct {
	rc      io.ReadCloser
	flipped bool
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.rc.Read(p)
	if n > 0 && !f.flipped {
		p[0] ^= 1
		f.flipped = true
	}
	return n, err
}

func (f *flipReader) Close() error { return f.rc.Close() }

// cutReader ends a stream early, as a connection reset mid-body does.
type cutReader struct {
	rc   io.ReadCloser
	left int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, blobstore.Unavailable(io.ErrUnexpectedEOF)
	}
	n, err := c.rc.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

func (c *cutReader) Close() error { return c.rc.Close() }

// A store that fails (before answering, or mid-stream) is retried with
// backoff, and the block served whole; a store that keeps failing ends
// the read with its error and no partial block sent.
func TestWarmStoreFailsMidStream(t *testing.T) {
	base := mem.New()
	fx := newWarmFixture(t, base)
	var cuts atomic.Int32
	cut := func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		res, err := next(ctx, call)
		if err == nil && call.Op == blobstore.OpGetRange && strings.Contains(call.Key, "seg/big") && cuts.Add(-1) >= 0 {
			res.Reader = &cutReader{rc: res.Reader, left: 1000}
		}
		return res, err
	}
	fs := faulty.New(base.With("cut", cut), 1)
	_, b := warmSidecar(t, fs.Container, CacheOptions{HydrateParallelism: -1})
	warmOpen(t, b, 2, "a2")

	cuts.Store(2)
	fs.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpGetRange), Fault: faulty.Unavailable, Times: 2})
	got, err := readFile(t.Context(), b, "seg/big", warmBlock, warmBlock)
	if err != nil || !bytes.Equal(got, fx.big[warmBlock:2*warmBlock]) {
		t.Fatalf("read through 2 refusals and 2 cut streams: %v", err)
	}
	if cuts.Load() >= 0 {
		t.Fatalf("the cut streams were not all used (%d left)", cuts.Load())
	}

	cuts.Store(1 << 20)
	got, err = readFile(t.Context(), b, "seg/big", 5*warmBlock, warmBlock)
	if code, d := detailOf(t, err); code != connect.CodeUnavailable || d.GetReason() != "unavailable" || len(got) != 0 {
		t.Fatalf("read from a store that keeps cutting: %v, %d bytes", err, len(got))
	}
	cuts.Store(0)
	if got, err := readFile(t.Context(), b, "seg/big", 5*warmBlock, warmBlock); err != nil || !bytes.Equal(got, fx.big[5*warmBlock:6*warmBlock]) {
		t.Fatalf("read once the store recovered: %v", err)
	}
}

// A cache folder that cannot be made, or a cache disk that fills up or
// turns unwritable, is a clear error in Status; the shard stays readable
// from the store.
func TestWarmCacheUnwritable(t *testing.T) {
	base := mem.New()
	fx := newWarmFixture(t, base)

	t.Run("folder", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "not-a-dir")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		srv, b := warmSidecar(t, base, CacheOptions{HydrateParallelism: -1})
		srv.opts.Cache.Dir = file // valid when the sidecar started; gone since
		warmOpen(t, b, 2, "a2")
		if got, err := readFile(t.Context(), b, "seg/big", 0, 0); err != nil || !bytes.Equal(got, fx.big) {
			t.Fatalf("read without a cache: %v", err)
		}
		if st := status(t, b); !strings.Contains(st.GetWarmError(), "cache folder") || st.GetLocality() != "partial" {
			t.Fatalf("status %v", st)
		}
	})

	t.Run("full", func(t *testing.T) {
		dir, err := testservers.SmallDisk(t, 3*warmBlock)
		if err != nil {
			t.Skipf("no small disk here (%v); the unwritable case below covers the fallback", err)
		}
		_, b := warmSidecar(t, base, CacheOptions{Dir: dir, HydrateParallelism: -1})
		warmOpen(t, b, 3, "a3")
		if got, err := readFile(t.Context(), b, "seg/big", 0, 0); err != nil || !bytes.Equal(got, fx.big) {
			t.Fatalf("read with a full cache disk: %v", err)
		}
		if st := status(t, b); !strings.Contains(st.GetWarmError(), "no space left") {
			t.Fatalf("status %v", st)
		}
	})

	t.Run("unwritable", func(t *testing.T) {
		srv, b := warmSidecar(t, base, CacheOptions{HydrateParallelism: -1})
		warmOpen(t, b, 4, "a4")
		// The blocks' folder becomes a file: every write fails, as on a
		// disk remounted read-only.
		blocks := srv.warmCache().dir
		if err := os.RemoveAll(blocks); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(blocks, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := readFile(t.Context(), b, "seg/big", 2*warmBlock, 3*warmBlock); err != nil || !bytes.Equal(got, fx.big[2*warmBlock:5*warmBlock]) {
			t.Fatalf("read with an unwritable cache: %v", err)
		}
		if st := status(t, b); !strings.Contains(st.GetWarmError(), "block cache") {
			t.Fatalf("status %v", st)
		}
	})
}

// Closing a warm shard mid-replay and mid-hydration ends both, closes the
// writer the replay would have opened, and removes its local files.
func TestWarmCloseMidReplay(t *testing.T) {
	base := mem.New()
	newWarmFixture(t, base)
	mw, release := holdFirst(func(c blobstore.Call) bool {
		return strings.Contains(c.Key, "translog/data/") || strings.Contains(c.Key, "seg/big")
	})
	defer release()
	srv, b := warmSidecar(t, base.With("hold", mw), CacheOptions{})
	warmOpen(t, b, 2, "a2")
	root := srv.warm.root
	if _, err := b.Close(t.Context(), connect.NewRequest(&sidecarv1.CloseRequest{Shard: "s"})); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "blocks" {
			t.Errorf("%s left in the cache folder after Close", e.Name())
		}
	}
}

// The background hydration waits for the primary's first read (or
// hydrateGrace): nothing is copied before it, so the copy does not compete
// with the read an engine opening over the checkpoint waits for; once the
// first read is answered the shard turns full.
func TestWarmHydrationWaitsForTheFirstRead(t *testing.T) {
	base := mem.New()
	newWarmFixture(t, base)
	var gets atomic.Int64
	count := func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		if call.Op == blobstore.OpGetRange && strings.Contains(call.Key, "checkpoint/files/") {
			gets.Add(1)
		}
		return next(ctx, call)
	}
	_, b := warmSidecar(t, base.With("count", count), CacheOptions{})
	warmOpen(t, b, 2, "a2")
	time.Sleep(hydrateGrace / 4)
	if n, st := gets.Load(), status(t, b); n != 0 || st.GetCheckpointBytesLocal() != 0 {
		t.Fatalf("before any read: %d ranged reads of checkpoint files, %d bytes local; the hydration did not wait", n, st.GetCheckpointBytesLocal())
	}
	if _, err := readFile(t.Context(), b, "small", 0, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "full locality", func() bool { return status(t, b).GetLocality() == "full" })
}

// A fetched block is checked against its first fetch (and a one-block
// file against the manifest), and a file's version is the first one read.
func TestWarmFileChecksBlocksAndVersions(t *testing.T) {
	a, b := []byte("block a"), []byte("block b")
	newFile := func(blocks int, crc uint32) *warmFile {
		return &warmFile{info: seal.ManifestFile{Name: "f", Size: int64(blocks) * 7, CRC32C: crc}, key: "k/f",
			sums: make([]uint32, blocks), known: make([]bool, blocks)}
	}
	for _, c := range []struct {
		name    string
		f       *warmFile
		fetches [][]byte // block 0, fetched in turn; the last is checked
		corrupt bool
	}{
		{"one block matching the manifest", newFile(1, blockSum(a)), [][]byte{a}, false},
		{"one block not matching the manifest", newFile(1, blockSum(a)), [][]byte{b}, true},
		{"first fetch of a block", newFile(3, 0), [][]byte{a}, false},
		{"the same block again", newFile(3, 0), [][]byte{a, a}, false},
		{"another block the second time", newFile(3, 0), [][]byte{a, b}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			for _, data := range c.fetches {
				err = c.f.check(0, data)
			}
			if errors.Is(err, ErrCorruptCheckpoint) != c.corrupt {
				t.Fatalf("check: %v, corrupt %v", err, c.corrupt)
			}
		})
	}
	f := newFile(2, 0)
	if err := f.pin("v1"); err != nil || f.token != "v1" {
		t.Fatalf("first version: %v, token %q", err, f.token)
	}
	if err := f.pin("v1"); err != nil {
		t.Fatalf("the same version again: %v", err)
	}
	if err := f.pin("v2"); !errors.Is(err, ErrCorruptCheckpoint) || f.token != "v1" {
		t.Fatalf("another version: %v, token %q", err, f.token)
	}
}
