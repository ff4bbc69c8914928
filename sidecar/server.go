package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/clock"
)

// Server holds the shards open on one sidecar. Its methods are the API;
// Handler serves them. Each call is routed by concern:
//
//	open.go      Open: validate, reserve the slot, the opener's Open, commit
//	handoff.go   StartHandoff, AdoptHandoff (the opener's Adopt), AbortHandoff
//	append.go    Append: limits, state, the writer's Append, the ack
//	read.go      Read: seal.History's ranges through a translog.SeqWindow
//	admin.go     GC and PublishCheckpoint, by the seal package
//	inspect.go   Inspect: seal.Describe, rendered
//	close.go     Close and Shutdown
//	shard.go     one shard's state and Status
//	registry.go  the shards by name: reserve, commit, rollback
//	health.go    store health, /readyz
//
// The protocol itself (claim, seal, restore, adopt) is behind the
// shardOpener seam (opener.go, recovery.go).
type Server struct {
	store   *blobstore.Container
	opts    Options
	opener  shardOpener
	log     *slog.Logger
	metrics *metrics
	reg     *registry
	// probeErr is why the store cannot take fenced writes (nil: it can).
	probeErr error
	// clock stamps ownership proofs; GC and checkpoints read it too, so
	// their freshness checks compare times of one steady clock.
	clock clock.Clock

	// stopped is closed by Shutdown; the health watcher ends with it.
	stopped  chan struct{}
	stopOnce sync.Once

	// watch tells watchers (the primary) what this sidecar gained, lost
	// or was fenced from.
	watch *watchHub

	// warm is the block cache and the folder of warm serving, made at
	// the first warm open (warm_server.go).
	warm warmResources
}

// New probes store for enforced preconditions and returns a server for
// it. A store that ignores preconditions is refused unless AllowUnfenced,
// and then only unfenced shards open on it.
func New(ctx context.Context, store *blobstore.Container, opts Options) (*Server, error) {
	return newServer(ctx, store, opts, defaultOpener())
}

func newServer(ctx context.Context, store *blobstore.Container, opts Options, op shardOpener) (*Server, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalidArgument)
	}
	opts, err := opts.normalized()
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// No client input makes a log line large, whatever it is quoted in.
	opts.Logger = slog.New(clipHandler{opts.Logger.Handler()})
	if opts.StoreLabel == "" {
		opts.StoreLabel = "shards"
	}
	s := &Server{opts: opts, opener: op, log: opts.Logger, reg: newRegistry(), clock: clock.System(), stopped: make(chan struct{})}
	s.watch = newWatchHub(s)
	if opts.Registerer != nil {
		m := metered.New(store, opts.StoreLabel)
		opts.Registerer.MustRegister(m)
		store = m.Container
	}
	s.store = store
	if err := blobstore.ProbePreconditions(ctx, store); err != nil {
		if !errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
			return nil, fmt.Errorf("sidecar start-up: the precondition probe could not run on %s: %w (check the store URL and that the store is reachable)", store, err)
		}
		if !opts.AllowUnfenced {
			return nil, fmt.Errorf("sidecar start-up: %w (refusing to serve fenced shards; only --allow-unfenced runs on such a store, without any fencing)", err)
		}
		s.probeErr = err
		s.log.Warn("store does not enforce preconditions: serving unfenced shards only", "store", store.String(), "error", err.Error())
	}
	s.metrics = newMetrics(opts.Registerer, s)
	go s.watchHealth()
	go s.runCheckpointPolicy()
	return s, nil
}

// every calls tick with the time every period until the server shuts
// down.
func (s *Server) every(period time.Duration, tick func(now time.Time)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case now := <-t.C:
			tick(now)
		}
	}
}

// Store is the container the server writes to (metered when a Registerer
// was given).
func (s *Server) Store() *blobstore.Container { return s.store }

// Ready reports whether the server takes opens and appends.
func (s *Server) Ready() error {
	if s.reg.isDraining() {
		return ErrShuttingDown
	}
	return nil
}

// get returns the shard name, refusing one that is not here or that an
// Open or Close is working on.
func (s *Server) get(op, name string) (*shard, error) {
	if err := ValidateShardID(name); err != nil {
		return nil, opErr(op, name, err, "")
	}
	sh := s.reg.lookup(name)
	if sh == nil {
		return nil, opErr(op, name, ErrShardNotOpen, s.notOpenHint())
	}
	if state, _ := sh.lifecycle(); state.inTransition() {
		return nil, opErr(op, name, ErrShardBusy, "retry when Open or Close returned")
	}
	return sh, nil
}

// notOpenHint is the advice for a call on a shard that is not open here:
// open it, or, on a sidecar whose master assigns its shards, ask the
// master which node owns it.
func (s *Server) notOpenHint() string {
	if len(s.opts.Masters) == 0 {
		return "open it first with Open(shard, term, allocation)"
	}
	return "this sidecar's shards are assigned by its master; `shardfence master shards --addr " + strings.Join(s.opts.Masters, ",") +
		"` shows which node owns it, and `shardfence master assign` places it"
}

// shardStore is the shard's view of the store: every key under <shard>/.
func (s *Server) shardStore(name string) (*blobstore.Container, error) {
	return blobstore.Sub(s.store, name)
}
