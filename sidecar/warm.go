package sidecar

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
)

// warmShard serves the checkpoint of a shard opened warm: its files block
// by block, from the shard's verified local copy, the sidecar's block
// cache, or the store (ranged reads pinned to the version first read),
// while a background hydration copies every file locally and verifies it
// against the manifest, then turns the shard full.
type warmShard struct {
	shard    string
	term     int64
	store    *blobstore.Container
	manifest *seal.Manifest // nil: no checkpoint to serve
	files    map[string]*warmFile
	// dir holds the local copies; "" when the cache folder could not be
	// made (every read goes to the store then).
	dir       string
	blockSize int64
	cache     *blockCache // nil: no cache
	fetchSem  chan struct{}
	backoff   backoff.Policy
	clock     clock.Clock
	metrics   *metrics
	log       func(msg string, args ...any)

	ctx    context.Context // ends when the shard closes
	cancel context.CancelFunc
	// firstRead is closed once the first ReadCheckpointFile was answered:
	// the background hydration waits for it (or hydrateGrace), so its
	// streams do not compete with the read a primary opening its engine
	// is waiting for.
	firstRead     chan struct{}
	firstReadOnce sync.Once
	wg            sync.WaitGroup

	mu         sync.Mutex
	locality   Locality
	bytesLocal int64
	hits       int64
	misses     int64
	fetches    int64
	lat        [1024]time.Duration // fetch latencies, a ring
	latN       int64
	lastErr    string
	inflight   map[blockKey]*fetchCall
	stopped    bool
}

// warmFile is one checkpoint file and what is known of it.
type warmFile struct {
	info seal.ManifestFile
	key  string // its store key

	mu sync.Mutex
	// token pins every range of the file to the version first read.
	token blobstore.Token
	// sums are the CRC-32C of each block as first fetched (known[i]), so
	// a block fetched again must come back the same.
	sums  []uint32
	known []bool
	// local is the verified local copy ("" until hydrated); bad is why
	// the file cannot be served (its store copy is corrupt).
	local string
	bad   error
}

type fetchCall struct {
	done chan struct{}
	data []byte
	err  error
}

// warmConfig is what a warm shard takes from its server.
type warmConfig struct {
	dir       string
	blockSize int64
	cache     *blockCache
	fetchSem  chan struct{}
	metrics   *metrics
	log       func(msg string, args ...any)
}

func newWarmShard(shard string, term int64, store *blobstore.Container, m *seal.Manifest, cfg warmConfig) *warmShard {
	ctx, cancel := context.WithCancel(context.Background())
	w := &warmShard{
		shard: shard, term: term, store: store, manifest: m, files: map[string]*warmFile{},
		dir: cfg.dir, blockSize: cfg.blockSize, cache: cfg.cache, fetchSem: cfg.fetchSem,
		backoff: backoff.Policy{Initial: 20 * time.Millisecond, Max: 2 * time.Second, Attempts: 8},
		clock:   clock.System(), metrics: cfg.metrics, log: cfg.log,
		ctx: ctx, cancel: cancel, locality: LocalityPartial, inflight: map[blockKey]*fetchCall{},
		firstRead: make(chan struct{}),
	}
	if m == nil {
		w.locality = LocalityFull
		return w
	}
	for _, f := range m.Files {
		n := w.blocks(f.Size)
		w.files[f.Name] = &warmFile{info: f, key: layout.FilePrefix(m.Term, m.Gen) + f.Name, sums: make([]uint32, n), known: make([]bool, n)}
	}
	if len(m.Files) == 0 {
		w.locality = LocalityFull
	}
	return w
}

// blocks is how many blocks a file of size bytes has.
func (w *warmShard) blocks(size int64) int64 { return (size + w.blockSize - 1) / w.blockSize }

// WarmStats is what Status reports of warm serving.
type WarmStats struct {
	Locality   Locality
	BytesLocal int64
	BytesTotal int64
	Hits       int64
	Misses     int64
	Fetches    int64
	FetchP50   time.Duration
	FetchP99   time.Duration
	Err        string
}

func (w *warmShard) stats() WarmStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := WarmStats{Locality: w.locality, BytesLocal: w.bytesLocal, Hits: w.hits, Misses: w.misses, Fetches: w.fetches, Err: w.lastErr}
	if w.manifest != nil {
		st.BytesTotal = w.manifest.Bytes()
	}
	n := int(min(w.latN, int64(len(w.lat))))
	if n > 0 {
		s := slices.Clone(w.lat[:n])
		slices.Sort(s)
		st.FetchP50, st.FetchP99 = s[(n-1)/2], s[(n-1)*99/100]
	}
	return st
}

func (w *warmShard) noteErr(err error) {
	w.mu.Lock()
	w.lastErr = clipN(err.Error(), maxErrorMessage)
	w.mu.Unlock()
}

func (w *warmShard) isStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// stop ends the background work and waits for it, then removes the local
// copies and the shard's cached blocks.
func (w *warmShard) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	if w.cache != nil {
		w.cache.dropShard(w.shard, w.term)
	}
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
	}
}

// file is the manifest's file name, or ErrNoSuchFile.
func (w *warmShard) file(name string) (*warmFile, error) {
	if w.manifest == nil {
		return nil, ErrNotWarm
	}
	f, ok := w.files[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not in the manifest of checkpoint %s", ErrNoSuchFile, clip(name), w.manifest.Key())
	}
	return f, nil
}

// read calls emit with the bytes of name from off, length bytes (0: to
// the end), in block-sized chunks, in order. Every chunk is part of a
// whole block whose checksum was checked.
func (w *warmShard) read(ctx context.Context, name string, off, length int64, emit func(off int64, data []byte, size int64) error) error {
	defer w.firstReadOnce.Do(func() { close(w.firstRead) })
	f, err := w.file(name)
	if err != nil {
		return err
	}
	size := f.info.Size
	if off < 0 || length < 0 {
		return fmt.Errorf("%w: offset %d, length %d", ErrInvalidArgument, off, length)
	}
	// Compared without adding: off+length can overflow (an offset near
	// 2^63 used to read as a range ending at -2).
	if off > size || length > size-off {
		return fmt.Errorf("%w: %q is %d bytes; offset %d and length %d reach past its end", ErrOutOfRange, clip(name), size, off, length)
	}
	if length == 0 {
		length = size - off
	}
	if length == 0 {
		return emit(off, nil, size)
	}
	for idx := off / w.blockSize; idx*w.blockSize < off+length; idx++ {
		b, err := w.block(ctx, f, idx)
		if err != nil {
			return err
		}
		start := idx * w.blockSize
		lo, hi := max(off, start)-start, min(off+length, start+int64(len(b)))-start
		if err := emit(start+lo, b[lo:hi], size); err != nil {
			return err
		}
	}
	return nil
}

// block returns block idx of f, whole and verified: from the local copy,
// the cache, or the store.
func (w *warmShard) block(ctx context.Context, f *warmFile, idx int64) ([]byte, error) {
	f.mu.Lock()
	local, bad := f.local, f.bad
	f.mu.Unlock()
	if bad != nil {
		return nil, bad
	}
	key := blockKey{shard: w.shard, term: w.term, file: f.info.Name, index: idx}
	if local != "" {
		b, err := w.readLocal(f, local, idx)
		if err == nil {
			w.hit()
			return b, nil
		}
		w.noteErr(err)
		w.log("local checkpoint copy unreadable, reading the store", "shard", w.shard, "file", f.info.Name, "block", idx, "error", err.Error())
	} else if w.cache != nil {
		b, ok, err := w.cache.get(key)
		switch {
		case err != nil:
			w.noteErr(err)
			w.log("cached block corrupt, fetching it again", "shard", w.shard, "file", f.info.Name, "block", idx, "error", err.Error())
			if w.metrics != nil {
				w.metrics.cacheCorrupt.Inc()
			}
		case ok && w.matches(f, idx, b):
			w.hit()
			return b, nil
		}
	}
	return w.fetchShared(ctx, f, key)
}

func (w *warmShard) hit() {
	w.mu.Lock()
	w.hits++
	w.mu.Unlock()
	if w.metrics != nil {
		w.metrics.cacheHits.Inc()
	}
}

// matches reports whether b is block idx as first fetched.
func (w *warmShard) matches(f *warmFile, idx int64, b []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.known[idx] || f.sums[idx] == blockSum(b)
}

// readLocal reads block idx of the hydrated copy at path and checks it.
func (w *warmShard) readLocal(f *warmFile, path string, idx int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	n := min(w.blockSize, f.info.Size-idx*w.blockSize)
	b := make([]byte, n)
	if _, err := fh.ReadAt(b, idx*w.blockSize); err != nil {
		return nil, fmt.Errorf("local copy of %q: %w", f.info.Name, err)
	}
	if !w.matches(f, idx, b) {
		return nil, fmt.Errorf("local copy of %q: block %d does not match its checksum", f.info.Name, idx)
	}
	return b, nil
}

// fetchShared fetches a block from the store once for every concurrent
// reader of it. The fetch runs for the shard, not for the reader that
// started it: a reader that goes away leaves it to the others (and to the
// cache).
func (w *warmShard) fetchShared(ctx context.Context, f *warmFile, key blockKey) ([]byte, error) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, fmt.Errorf("%w: the shard closed", ErrShardNotOpen)
	}
	c, ok := w.inflight[key]
	if !ok {
		c = &fetchCall{done: make(chan struct{})}
		w.inflight[key] = c
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			c.data, c.err = w.fetch(w.ctx, f, key)
			w.mu.Lock()
			delete(w.inflight, key)
			w.mu.Unlock()
			close(c.done)
		}()
	}
	w.mu.Unlock()
	select {
	case <-c.done:
		return c.data, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch reads block key.index of f from the store with a ranged read
// pinned to the file's version, retrying store trouble (a stream cut
// short included) with backoff; a block is returned whole or not at all.
// A block that differs from its first fetch, a file of another size,
// missing or replaced is ErrCorruptCheckpoint, and marks the file bad.
func (w *warmShard) fetch(ctx context.Context, f *warmFile, key blockKey) ([]byte, error) {
	select {
	case w.fetchSem <- struct{}{}:
		defer func() { <-w.fetchSem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	start := time.Now()
	off := key.index * w.blockSize
	buf := make([]byte, min(w.blockSize, f.info.Size-off))
	err := backoff.Do(ctx, w.clock, w.backoff, blobstore.IsRetryable, func(ctx context.Context) error {
		return w.readRange(ctx, f, key.index, off, buf)
	})
	if err == nil {
		err = f.check(key.index, buf)
	}
	if err != nil {
		if errors.Is(err, ErrCorruptCheckpoint) {
			f.mu.Lock()
			f.bad = err
			f.mu.Unlock()
		}
		return nil, err
	}
	w.noteFetch(time.Since(start))
	w.keep(key, buf)
	return buf, nil
}

// readRange is one try of fetch: it fills buf with the bytes of f at off
// (block idx), from the version of f first read.
func (w *warmShard) readRange(ctx context.Context, f *warmFile, idx, off int64, buf []byte) error {
	f.mu.Lock()
	pin := f.token
	f.mu.Unlock()
	rc, attrs, err := w.store.NewRangeReader(ctx, f.key, off, int64(len(buf)), pin)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return f.corrupt("missing in the store")
	case errors.Is(err, blobstore.ErrPreconditionFailed):
		return f.corrupt("replaced in the store since its first read (version %s)", pin)
	case errors.Is(err, blobstore.ErrInvalidRange):
		return f.corrupt("shorter in the store than the manifest's %d bytes", f.info.Size)
	case err != nil:
		return err
	}
	defer rc.Close()
	if attrs.Size != f.info.Size {
		return f.corrupt("%d bytes in the store, the manifest says %d", attrs.Size, f.info.Size)
	}
	if pin == "" && attrs.Token != "" {
		if err := f.pin(attrs.Token); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(rc, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return blobstore.Unavailable(fmt.Errorf("block %d of %q: the stream ended early: %w", idx, f.info.Name, err))
		}
		return err
	}
	return nil
}

// corrupt is ErrCorruptCheckpoint about f.
func (f *warmFile) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %q (%s): %s", ErrCorruptCheckpoint, f.info.Name, f.key, fmt.Sprintf(format, args...))
}

// pin records the version of f a read without a pin got: the first one
// read is the file's, and another is corruption (the file was replaced).
func (f *warmFile) pin(token blobstore.Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.token == "":
		f.token = token
	case f.token != token:
		return f.corrupt("two versions read (%s and %s)", f.token, token)
	}
	return nil
}

// check verifies block idx as fetched, b, against its first fetch (and a
// one-block file against the manifest), and records its checksum.
func (f *warmFile) check(idx int64, b []byte) error {
	sum := blockSum(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.known[idx] && f.sums[idx] != sum:
		return f.corrupt("block %d reads %08x now, %08x when first fetched", idx, sum, f.sums[idx])
	case int64(len(f.sums)) == 1 && sum != f.info.CRC32C:
		// A one-block file is verified against the manifest right away.
		return f.corrupt("checksum %08x, the manifest says %08x", sum, f.info.CRC32C)
	}
	f.sums[idx], f.known[idx] = sum, true
	return nil
}

// noteFetch counts a block fetched from the store in took.
func (w *warmShard) noteFetch(took time.Duration) {
	w.mu.Lock()
	w.misses++
	w.fetches++
	w.lat[w.latN%int64(len(w.lat))] = took
	w.latN++
	w.mu.Unlock()
	if w.metrics != nil {
		w.metrics.cacheMisses.Inc()
		w.metrics.fetchLatency.Observe(took.Seconds())
	}
}

// keep puts a fetched block in the cache, unless the shard no longer
// needs it there.
func (w *warmShard) keep(key blockKey, b []byte) {
	if w.cache == nil {
		return
	}
	if err := w.cache.put(key, b); err != nil {
		// Served anyway: the shard stays readable from the store.
		w.noteErr(err)
		if w.metrics != nil {
			w.metrics.cacheWriteErrors.Inc()
		}
	} else if w.stats().Locality == LocalityFull || w.isStopped() {
		// The hydration finished (or the shard closed) while this block
		// was fetched, and dropped the shard's blocks before it.
		w.cache.remove(key)
	}
}

// hydrateGrace is how long the background hydration waits for the first
// ReadCheckpointFile before it starts anyway.
const hydrateGrace = time.Second

// hydrate copies every file the shard does not hold yet into its folder,
// par at a time, verifying each against the manifest, and turns the
// shard full once all are local. Store and disk trouble is retried with
// backoff until the shard closes; a corrupt file stops its own copy.
func (w *warmShard) hydrate(par int, onFull func()) {
	if w.manifest == nil || len(w.manifest.Files) == 0 {
		onFull()
		return
	}
	if par < 1 || w.dir == "" {
		return
	}
	// Let the primary's first read go first (docs/BENCHMARKS.md, "Warm
	// serving"): hydration starts once it was answered, or after
	// hydrateGrace when no read comes.
	grace := time.NewTimer(hydrateGrace)
	select {
	case <-w.firstRead:
	case <-grace.C:
	case <-w.ctx.Done():
	}
	grace.Stop()
	names := make(chan *warmFile)
	var wg sync.WaitGroup
	var mu sync.Mutex
	left := len(w.manifest.Files)
	for range par {
		wg.Go(func() {
			for f := range names {
				if err := w.hydrateFile(f); err != nil {
					continue
				}
				mu.Lock()
				left--
				full := left == 0
				mu.Unlock()
				if full {
					w.mu.Lock()
					w.locality = LocalityFull
					w.mu.Unlock()
					if w.cache != nil {
						w.cache.dropShard(w.shard, w.term)
					}
					onFull()
				}
			}
		})
	}
	for _, mf := range w.manifest.Files {
		select {
		case names <- w.files[mf.Name]:
		case <-w.ctx.Done():
		}
	}
	close(names)
	wg.Wait()
}

// hydrateFile copies f into the shard's folder until it is verified, the
// file turns out corrupt, or the shard closes.
func (w *warmShard) hydrateFile(f *warmFile) error {
	path := filepath.Join(w.dir, filepath.FromSlash(f.info.Name))
	for attempt := 1; ; attempt++ {
		err := w.copyFile(f, path)
		if err == nil {
			return nil
		}
		_ = os.Remove(path)
		if w.ctx.Err() != nil {
			return w.ctx.Err()
		}
		w.noteErr(err)
		if errors.Is(err, ErrCorruptCheckpoint) {
			f.mu.Lock()
			f.bad = err
			f.mu.Unlock()
			w.log("checkpoint file corrupt, not hydrated", "shard", w.shard, "file", f.info.Name, "error", err.Error())
			return err
		}
		w.log("hydrating a checkpoint file failed, retrying", "shard", w.shard, "file", f.info.Name, "attempt", attempt, "error", err.Error())
		d := (backoff.Policy{Initial: 100 * time.Millisecond, Max: 30 * time.Second}).Delay(attempt)
		if clock.Sleep(w.ctx, w.clock, d) != nil {
			return w.ctx.Err()
		}
	}
}

// copyFile streams f from the store (pinned to its version once known)
// into path, computing each block's checksum and the file's, and makes it
// the local copy when size and CRC-32C match the manifest and every block
// matches what on-demand reads were served.
func (w *warmShard) copyFile(f *warmFile, path string) error {
	f.mu.Lock()
	pin := f.token
	f.mu.Unlock()
	rc, attrs, err := w.store.NewRangeReader(w.ctx, f.key, 0, -1, pin)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return fmt.Errorf("%w: %q missing in the store", ErrCorruptCheckpoint, f.info.Name)
	case errors.Is(err, blobstore.ErrPreconditionFailed):
		return fmt.Errorf("%w: %q replaced in the store since its first read", ErrCorruptCheckpoint, f.info.Name)
	case err != nil:
		return err
	}
	defer rc.Close()
	if attrs.Size != f.info.Size {
		return fmt.Errorf("%w: %q is %d bytes in the store, the manifest says %d", ErrCorruptCheckpoint, f.info.Name, attrs.Size, f.info.Size)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("hydrating %q: %w", f.info.Name, err)
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("hydrating %q: %w", f.info.Name, err)
	}
	defer out.Close()
	whole := crc32.New(castagnoli)
	sums := make([]uint32, len(f.sums))
	buf := make([]byte, w.blockSize)
	var n int64
	for i := range sums {
		m, err := io.ReadFull(rc, buf[:min(w.blockSize, f.info.Size-n)])
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return blobstore.Unavailable(fmt.Errorf("%q: the stream ended at %d of %d bytes", f.info.Name, n+int64(m), f.info.Size))
			}
			return err
		}
		b := buf[:m]
		sums[i] = blockSum(b)
		_, _ = whole.Write(b)
		if _, err := out.Write(b); err != nil {
			return fmt.Errorf("hydrating %q: %w", f.info.Name, err)
		}
		n += int64(m)
		w.mu.Lock()
		w.bytesLocal += int64(m)
		w.mu.Unlock()
	}
	counted := n
	defer func() {
		if counted > 0 {
			w.mu.Lock()
			w.bytesLocal -= counted
			w.mu.Unlock()
		}
	}()
	if err := out.Close(); err != nil {
		return fmt.Errorf("hydrating %q: %w", f.info.Name, err)
	}
	if got := whole.Sum32(); got != f.info.CRC32C {
		return fmt.Errorf("%w: %q checksum %08x, the manifest says %08x", ErrCorruptCheckpoint, f.info.Name, got, f.info.CRC32C)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range sums {
		if f.known[i] && f.sums[i] != s {
			return fmt.Errorf("%w: %q block %d reads %08x in the whole file, %08x when fetched on demand", ErrCorruptCheckpoint, f.info.Name, i, s, f.sums[i])
		}
	}
	copy(f.sums, sums)
	for i := range f.known {
		f.known[i] = true
	}
	if f.token == "" {
		f.token = attrs.Token
	}
	f.local = path
	counted = 0
	return nil
}
