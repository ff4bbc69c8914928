package seal_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
)

// chunkTest is a shard whose term 1 published a checkpoint of the given
// files at gen 1, and a term 2 opened without hydrating: the lineage and
// restore point Hydrate is called with.
type chunkTest struct {
	store   *faulty.Container
	lin     seal.Lineage
	gen     int64
	content map[string][]byte
}

func newChunkTest(t *testing.T, sizes map[string]int) *chunkTest {
	t.Helper()
	store := faulty.New(mem.New(), 1)
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	src := t.TempDir()
	rng := rand.New(rand.NewPCG(7, uint64(len(sizes))))
	ct := &chunkTest{store: store, content: map[string][]byte{}}
	var files []seal.LocalFile
	for name, size := range sizes {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ct.content[name] = b
		files = append(files, seal.LocalFile{Name: name, Path: p})
	}
	if _, err := seal.PublishCheckpoint(context.Background(), store.Container, sh1.Chain, 1, files,
		seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 1}); err != nil {
		t.Fatal(err)
	}
	sh2 := openShard(t, store.Container, 2, nil, "")
	ct.lin, ct.gen = sh2.Seal.Lineage, sh2.Restore().Gen
	return ct
}

// rangeCall is one range GET a hydration sent.
type rangeCall struct {
	key            string
	offset, length int64
	pinned         bool
}

// recordRanges records every range GET of a checkpoint file.
func recordRanges(mu *sync.Mutex, calls *[]rangeCall) blobstore.Middleware {
	return func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		if call.Op == blobstore.OpGetRange && strings.HasPrefix(call.Key, layout.FilePrefix(1, 1)) {
			mu.Lock()
			*calls = append(*calls, rangeCall{strings.TrimPrefix(call.Key, layout.FilePrefix(1, 1)), call.Offset, call.Length, call.Expected != ""})
			mu.Unlock()
		}
		return next(ctx, call)
	}
}

func (ct *chunkTest) hydrate(t *testing.T, store *blobstore.Container, chunk int64, par int) (string, *seal.Hydrated) {
	t.Helper()
	dir := t.TempDir()
	h, err := seal.Hydrate(context.Background(), store, shard, ct.lin, ct.gen, dir,
		seal.HydrateOptions{Options: seal.Options{Backoff: fastRetry, Parallelism: par}, ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	return dir, h
}

// Files of every size around the piece size hydrate whole: each piece is
// read by one range GET at its offset, pinned to the version the first
// piece read, and written at its offset; the pieces' checksums combine
// into the manifest's.
func TestHydrateChunksAtEveryBoundary(t *testing.T) {
	const chunk = 1000
	sizes := map[string]int{"empty": 0, "one": 1, "below": chunk - 1, "exact": chunk, "above": chunk + 1,
		"two": 2 * chunk, "many": 7*chunk + 13, "dir/nested": 3*chunk - 1}
	ct := newChunkTest(t, sizes)
	for _, par := range []int{1, 3, 32} {
		t.Run(fmt.Sprintf("parallelism %d", par), func(t *testing.T) {
			var mu sync.Mutex
			var calls []rangeCall
			dir, h := ct.hydrate(t, ct.store.With("record", recordRanges(&mu, &calls)), chunk, par)
			if h.Manifest == nil || len(h.Refused) != 0 {
				t.Fatalf("hydrated %v, refused %+v", h.Manifest, h.Refused)
			}
			for name, want := range ct.content {
				got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: %d bytes (%v), want the %d published", name, len(got), err, len(want))
				}
			}
			for name, size := range sizes {
				var got []rangeCall
				for _, c := range calls {
					if c.key == name {
						got = append(got, c)
					}
				}
				slices.SortFunc(got, func(a, b rangeCall) int { return int(a.offset - b.offset) })
				var want []rangeCall
				if size <= chunk {
					want = []rangeCall{{name, 0, -1, false}}
				} else {
					for off := int64(0); off < int64(size); off += chunk {
						want = append(want, rangeCall{name, off, min(chunk, int64(size)-off), off > 0})
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s (%d bytes): range GETs %+v, want %+v", name, size, got, want)
				}
			}
		})
	}
}

// A byte changed in the last piece of a file read in pieces (same size)
// refuses the checkpoint for its checksum, as a whole-file stream does.
func TestHydrateChunksRefuseACorruptPiece(t *testing.T) {
	const chunk = 1000
	ct := newChunkTest(t, map[string]int{"state": 3*chunk + 10})
	body := bytes.Clone(ct.content["state"])
	body[len(body)-3] ^= 0x40
	if _, err := ct.store.Inner().Put(context.Background(), layout.FilePrefix(1, 1)+"state", body); err != nil {
		t.Fatal(err)
	}
	dir, h := ct.hydrate(t, ct.store.Container, chunk, 8)
	if h.Manifest != nil || len(h.Refused) != 1 || !strings.Contains(h.Refused[0].Reason, "checksum") {
		t.Fatalf("hydrated %v, refused %+v: want the checkpoint refused for its checksum", h.Manifest, h.Refused)
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); !os.IsNotExist(err) {
		t.Fatalf("the refused file is still there: %v", err)
	}
}

// cutPieceOnce cuts the first stream of the piece at offset after its
// first bytes, as a connection reset mid-body would.
func cutPieceOnce(offset int64, fired *atomic.Int32) blobstore.Middleware {
	return func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		res, err := next(ctx, call)
		if err == nil && call.Op == blobstore.OpGetRange && call.Offset == offset && strings.HasPrefix(call.Key, layout.FilePrefix(1, 1)) && fired.Add(1) == 1 {
			res.Reader = &cutReader{rc: res.Reader}
		}
		return res, err
	}
}

// A piece cut by store trouble is read again from its own start: the other
// pieces are not read twice, and the file is whole.
func TestHydrateChunksResumeACutPiece(t *testing.T) {
	const chunk = 1000
	ct := newChunkTest(t, map[string]int{"state": 4*chunk + 1})
	var fired atomic.Int32
	var mu sync.Mutex
	var calls []rangeCall
	store := ct.store.With("cut", cutPieceOnce(2*chunk, &fired)).With("record", recordRanges(&mu, &calls))
	dir, h := ct.hydrate(t, store, chunk, 4)
	if h.Manifest == nil {
		t.Fatalf("refused %+v", h.Refused)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "state")); err != nil || !bytes.Equal(got, ct.content["state"]) {
		t.Fatalf("hydrated %d bytes (%v), not what was published", len(got), err)
	}
	reads := map[int64]int{}
	for _, c := range calls {
		reads[c.offset]++
	}
	want := map[int64]int{0: 1, chunk: 1, 2 * chunk: 2, 3 * chunk: 1, 4 * chunk: 1}
	if fmt.Sprint(reads) != fmt.Sprint(want) {
		t.Fatalf("range GETs by offset %v, want %v (the cut piece twice, the others once)", reads, want)
	}
}

// A file replaced in the store after its first piece was read (same bytes,
// a new version) fails the other pieces' pinned reads; the whole file is
// read again, from the new version.
func TestHydrateChunksRestartWhenTheVersionChanges(t *testing.T) {
	const chunk = 1000
	ct := newChunkTest(t, map[string]int{"state": 3 * chunk})
	key := layout.FilePrefix(1, 1) + "state"
	var replaced atomic.Bool
	replace := func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		res, err := next(ctx, call)
		if err == nil && call.Op == blobstore.OpGetRange && call.Key == key && call.Offset == 0 && replaced.CompareAndSwap(false, true) {
			if _, perr := ct.store.Inner().Put(ctx, key, ct.content["state"]); perr != nil {
				return res, perr
			}
		}
		return res, err
	}
	var mu sync.Mutex
	var calls []rangeCall
	store := ct.store.With("replace", replace).With("record", recordRanges(&mu, &calls))
	dir, h := ct.hydrate(t, store, chunk, 4)
	if h.Manifest == nil {
		t.Fatalf("refused %+v", h.Refused)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "state")); err != nil || !bytes.Equal(got, ct.content["state"]) {
		t.Fatalf("hydrated %d bytes (%v), not what was published", len(got), err)
	}
	firsts := 0
	for _, c := range calls {
		if c.offset == 0 {
			firsts++
		}
	}
	if firsts != 2 {
		t.Fatalf("%d reads of the first piece, want 2 (the file read again from its new version): %+v", firsts, calls)
	}
}
