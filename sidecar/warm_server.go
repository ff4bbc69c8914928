package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/shardfence/shardfence/seal"
)

// warmResources are the sidecar's side of warm serving: one folder under
// Options.Cache.Dir holding the block cache's blocks and each warm
// shard's local copy, and one bound on the on-demand fetches in flight.
type warmResources struct {
	mu    sync.Mutex
	root  string // "" until made
	cache *blockCache
	sem   chan struct{}
	seq   uint64
	err   error // why the folder could not be made, last time
}

// warmCache is the block cache, nil before the first warm open.
func (s *Server) warmCache() *blockCache {
	s.warm.mu.Lock()
	defer s.warm.mu.Unlock()
	return s.warm.cache
}

// newWarm makes the warm serving of sh's checkpoint m. A cache folder
// that cannot be made is not fatal: the shard is served from the store,
// without cache or background hydration, and its status says why.
func (s *Server) newWarm(sh *shard, m *seal.Manifest) *warmShard {
	r := &s.warm
	r.mu.Lock()
	if r.sem == nil {
		r.sem = make(chan struct{}, s.opts.Cache.FetchParallelism)
	}
	if r.root == "" {
		root, err := os.MkdirTemp(s.opts.Cache.Dir, "shardfence-cache-")
		if err == nil {
			if err = os.Mkdir(filepath.Join(root, "blocks"), 0o700); err != nil {
				_ = os.RemoveAll(root)
			}
		}
		if err != nil {
			r.err = fmt.Errorf("the cache folder under %q: %w (checkpoint files are read from the store, uncached)", s.opts.Cache.Dir, err)
		} else {
			r.root, r.err = root, nil
			r.cache = newBlockCache(filepath.Join(root, "blocks"), s.opts.Cache.Bytes)
		}
	}
	r.seq++
	cfg := warmConfig{blockSize: s.opts.Cache.BlockBytes, cache: r.cache, fetchSem: r.sem, metrics: s.metrics,
		log: func(msg string, args ...any) { s.log.Warn(msg, args...) }}
	var dirErr error
	if r.root != "" {
		cfg.dir = filepath.Join(r.root, "shard-"+strconv.FormatUint(r.seq, 10))
		if dirErr = os.Mkdir(cfg.dir, 0o700); dirErr != nil {
			cfg.dir = ""
		}
	}
	rootErr := r.err
	r.mu.Unlock()
	w := newWarmShard(sh.name, sh.term, sh.store, m, cfg)
	switch {
	case rootErr != nil:
		w.noteErr(rootErr)
	case dirErr != nil:
		w.noteErr(fmt.Errorf("the shard's hydration folder: %w (files stay partial, read from the cache and the store)", dirErr))
	}
	return w
}

// runWarm starts a committed warm shard's background work: the replay's
// end, which hands the writer over, and the hydration.
func (s *Server) runWarm(sh *shard, ws *warmStart) {
	w := sh.warmShard()
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		var r replayed
		select {
		case r = <-ws.Replayed:
		case <-w.ctx.Done():
			ws.Cancel()
			r = <-ws.Replayed
		}
		ws.Cancel()
		if w.ctx.Err() != nil || !sh.replayed(r) {
			// Closed or replaced: the writer is not the shard's.
			if r.Writer != nil {
				_ = r.Writer.Close(context.Background())
			}
			return
		}
		if r.Err != nil {
			s.log.Error("warm shard's replay failed", append(sh.logAttrs(), "error", r.Err.Error())...)
			return
		}
		s.log.Info("warm shard replayed: appends open", append(sh.logAttrs(), "next_seq_no", r.NextSeqNo)...)
	}()
	go func() {
		defer w.wg.Done()
		w.hydrate(s.opts.Cache.HydrateParallelism, func() {
			s.log.Info("warm shard full: every checkpoint file local and verified", sh.logAttrs()...)
		})
	}()
}

// stopWarm ends a warm shard's replay and hydration, closing a writer the
// replay opened that the shard did not take, and removes its local
// files. A no-op for a full open.
func (sh *shard) stopWarm() {
	if w := sh.warmShard(); w != nil {
		w.stop()
	}
}

// removeWarm removes the warm serving folder at shutdown.
func (s *Server) removeWarm() {
	s.warm.mu.Lock()
	defer s.warm.mu.Unlock()
	if s.warm.root != "" {
		_ = os.RemoveAll(s.warm.root)
		s.warm.root, s.warm.cache = "", nil
	}
}

// ReadCheckpointFile calls emit with the bytes of file in the checkpoint
// the shard's warm open serves, from offset, length bytes (0: to the
// end), in order, in chunks of at most a block.
func (s *Server) ReadCheckpointFile(ctx context.Context, name, file string, offset, length int64, emit func(off int64, data []byte, size int64) error) error {
	const op = "ReadCheckpointFile"
	sh, err := s.get(op, name)
	if err != nil {
		return err
	}
	w := sh.warmShard()
	if w == nil {
		return opErr(op, name, fmt.Errorf("%w: the shard was opened without warm", ErrNotWarm), "its checkpoint files were streamed by Open; open the next term with warm to read them on demand")
	}
	if w.manifest == nil {
		return opErr(op, name, fmt.Errorf("%w: the restore point has no checkpoint", ErrNotWarm), "read the lineage's ops from sequence number 0")
	}
	if err := w.read(ctx, file, offset, length, emit); err != nil {
		return opErr(op, name, err, readFileHint(err))
	}
	return nil
}

// ServedCheckpoint is the checkpoint a warm open of the shard serves (nil:
// none, or a full open).
func (s *Server) ServedCheckpoint(name string) *seal.Manifest {
	sh := s.reg.lookup(name)
	if w := sh.warmShard(); w != nil {
		return w.manifest
	}
	return nil
}

// readFileHint says what a reader does about a failed ReadCheckpointFile.
func readFileHint(err error) string {
	switch {
	case errors.Is(err, ErrOutOfRange):
		return "read within the file's size (Opened.checkpoint lists it)"
	case errors.Is(err, ErrNoSuchFile):
		return "read a file Opened.checkpoint lists"
	case errors.Is(err, ErrCorruptCheckpoint):
		return "the checkpoint cannot be served: open the shard at a higher term without warm, which falls back to an older checkpoint"
	}
	return hintFor(err)
}
