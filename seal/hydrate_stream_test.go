package seal_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
)

// A checkpoint file of the right size whose bytes are corrupt is caught
// while it streams to disk: the checkpoint is refused, its copy replaced by
// the older checkpoint's.
func TestHydrateStreamRefusesACorruptFile(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	write(t, sh1.Writer, "b")
	checkpoint(t, store.Container, sh1, 2, "a,b", 2)
	write(t, sh1.Writer, "c")
	write(t, sh1.Writer, "d")
	checkpoint(t, store.Container, sh1, 4, "a,b,c,d", 4)
	key := layout.FilePrefix(1, 4) + "state"
	if _, err := store.Inner().Put(context.Background(), key, []byte("a,b,X,d")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sh2 := openShard(t, store.Container, 2, nil, dir)
	if len(sh2.Refused) != 1 || !strings.Contains(sh2.Refused[0].Reason, "checksum") || !strings.Contains(sh2.Refused[0].Reason, key) {
		t.Fatalf("refused %+v, want the gen-4 checkpoint refused for its checksum", sh2.Refused)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "state")); err != nil || string(got) != "a,b" {
		t.Fatalf("hydrated state %q (%v), want the gen-2 checkpoint's", got, err)
	}
}

// cutOnce fails the first stream of a checkpoint file after its first
// bytes, as a connection reset mid-body would.
func cutOnce(fired *atomic.Int32) blobstore.Middleware {
	return func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		res, err := next(ctx, call)
		if err == nil && call.Op == blobstore.OpGetRange && strings.Contains(call.Key, layout.FilePrefix(1, 2)) && fired.Add(1) == 1 {
			res.Reader = &cutReader{rc: res.Reader}
		}
		return res, err
	}
}

type cutReader struct {
	rc   io.ReadCloser
	read bool
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.read {
		return 0, blobstore.Unavailable(io.ErrUnexpectedEOF)
	}
	c.read = true
	return c.rc.Read(p[:min(len(p), 3)])
}

func (c *cutReader) Close() error { return c.rc.Close() }

// A store that fails mid-stream has the file streamed again from the
// start: the hydrated copy is whole.
func TestHydrateStreamRetriesAFileCutMidBody(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	write(t, sh1.Writer, "b")
	checkpoint(t, store.Container, sh1, 2, "a,b,0123456789", 2)
	var fired atomic.Int32
	dir := t.TempDir()
	sh2 := openShard(t, store.With("cut", cutOnce(&fired)), 2, nil, dir)
	if fired.Load() < 2 {
		t.Fatalf("%d streams of checkpoint files, want the cut one and its retry", fired.Load())
	}
	if len(sh2.Refused) != 0 || sh2.Checkpoint == nil {
		t.Fatalf("refused %+v, checkpoint %v", sh2.Refused, sh2.Checkpoint)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "state")); err != nil || string(got) != "a,b,0123456789" {
		t.Fatalf("hydrated state %q (%v)", got, err)
	}
}

// Hydration streams: a 64 MiB checkpoint file reaches the disk without the
// heap growing by its size.
func TestHydrateStreamKeepsMemoryBounded(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	const size = 64 << 20
	content := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	checkpoint(t, store.Container, sh1, 1, string(content), 1)
	content = nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	dir := t.TempDir()
	sh2 := openShard(t, store.Container, 2, nil, dir)
	close(stop)
	wg.Wait()
	if sh2.Checkpoint == nil {
		t.Fatal("no checkpoint hydrated")
	}
	if fi, err := os.Stat(filepath.Join(dir, "state")); err != nil || fi.Size() != size {
		t.Fatalf("hydrated file: %v, %v", fi, err)
	}
	grew := int64(peak.Load()) - int64(base)
	if grew > size/2 {
		t.Fatalf("the heap grew by %d MiB while hydrating a %d MiB file: hydration holds the file", grew>>20, size>>20)
	}
	t.Logf("heap grew by at most %d MiB hydrating %d MiB", max(grew, 0)>>20, size>>20)
}

// A streaming file reports its bytes as they reach the disk, not only when
// it is complete.
func TestHydrateStreamReportsProgressWithinAFile(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	sh1 := openShard(t, store.Container, 1, nil, "")
	write(t, sh1.Writer, "a")
	const size = 16 << 20
	checkpoint(t, store.Container, sh1, 1, strings.Repeat("x", size), 1)
	var mu sync.Mutex
	var seen []recovery.Progress
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry, Dir: t.TempDir(),
		Progress: func(p recovery.Progress) { mu.Lock(); seen = append(seen, p); mu.Unlock() }}
	o.Writer.Backoff = fastRetry
	sh2, err := recovery.Open(context.Background(), store.Container, shard, 2, "a2", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh2.Writer.Close(context.Background()) })
	var partial, whole bool
	for _, p := range seen {
		if p.Phase != "hydrate" {
			continue
		}
		if p.Files == 0 && p.Bytes > 0 && p.Bytes < p.BytesTotal {
			partial = true
		}
		if p.Files == 1 && p.Bytes == size && p.BytesTotal == size {
			whole = true
		}
	}
	if !partial || !whole {
		t.Fatalf("hydrate progress %+v: want reports within the file and one for the whole file", seen)
	}
}
