package sidecar

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/reqlimit"
)

// Limits bound what one request may carry, so a bad client cannot make the
// sidecar buffer without bound.
type Limits struct {
	// MaxOpBytes bounds one op. Default 1 MiB.
	MaxOpBytes int
	// MaxOpsPerAppend bounds the ops of one Append. Default 10,000.
	MaxOpsPerAppend int
	// MaxRequestBytes bounds a request message on the wire. Default 32 MiB.
	MaxRequestBytes int
	// MaxConcurrentRequestBytes bounds the request bytes all calls hold at
	// once (decoded, a request takes about twice its size in memory).
	// Default 128 MiB; at least MaxRequestBytes.
	MaxConcurrentRequestBytes int64
	// BodyReadTimeout bounds how long a request body may take to arrive;
	// on an AppendStream, how long one request message may take once its
	// first bytes arrived (the stream itself may stay open and idle).
	// Default 30s.
	BodyReadTimeout time.Duration
	// StreamWindowBytes bounds the request bytes one AppendStream holds:
	// requests read and not yet answered. The sidecar stops reading a
	// stream at the window (its client's sends wait) until answers free
	// it; one request larger than the window is read alone. The bytes
	// also count against MaxConcurrentRequestBytes. Default 8 MiB.
	StreamWindowBytes int64
}

// Bounds of Limits.StreamWindowBytes.
const (
	MinStreamWindowBytes = 64 << 10
	MaxStreamWindowBytes = 1 << 30
)

// Bounds of Limits.BodyReadTimeout.
const (
	MinBodyReadTimeout = reqlimit.MinBodyReadTimeout
	MaxBodyReadTimeout = reqlimit.MaxBodyReadTimeout
)

func (l *Limits) setDefaults() {
	if l.MaxOpBytes <= 0 {
		l.MaxOpBytes = 1 << 20
	}
	if l.MaxOpsPerAppend <= 0 {
		l.MaxOpsPerAppend = 10000
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = 32 << 20
	}
	if l.MaxConcurrentRequestBytes <= 0 {
		l.MaxConcurrentRequestBytes = max(128<<20, int64(l.MaxRequestBytes))
	}
	if l.BodyReadTimeout <= 0 {
		l.BodyReadTimeout = 30 * time.Second
	}
	if l.StreamWindowBytes <= 0 {
		l.StreamWindowBytes = 8 << 20
	}
}

func (l Limits) validate() error {
	switch {
	case l.MaxConcurrentRequestBytes < int64(l.MaxRequestBytes):
		return fmt.Errorf("%w: max concurrent request bytes %d below max request bytes %d", ErrInvalidArgument, l.MaxConcurrentRequestBytes, l.MaxRequestBytes)
	case l.BodyReadTimeout < MinBodyReadTimeout || l.BodyReadTimeout > MaxBodyReadTimeout:
		return fmt.Errorf("%w: body read timeout %v is outside %v..%v", ErrInvalidArgument, l.BodyReadTimeout, MinBodyReadTimeout, MaxBodyReadTimeout)
	case l.StreamWindowBytes < MinStreamWindowBytes || l.StreamWindowBytes > MaxStreamWindowBytes:
		return fmt.Errorf("%w: stream window %d bytes is outside %d..%d", ErrInvalidArgument, l.StreamWindowBytes, int64(MinStreamWindowBytes), int64(MaxStreamWindowBytes))
	}
	return nil
}

// checkOps refuses a batch of ops outside the limits (none, too many, or
// one too large) and says what the caller does instead.
func (l Limits) checkOps(ops [][]byte) (hint string, err error) {
	if len(ops) == 0 {
		return "send at least one op", fmt.Errorf("%w: no ops", ErrInvalidArgument)
	}
	if len(ops) > l.MaxOpsPerAppend {
		return "split the append", fmt.Errorf("%w: %d ops in one append, the limit is %d", ErrInvalidArgument, len(ops), l.MaxOpsPerAppend)
	}
	for i, o := range ops {
		if len(o) > l.MaxOpBytes {
			return "split the op or raise --max-op-bytes", fmt.Errorf("%w: op %d is %d bytes, the limit is %d", blobstore.ErrTooLarge, i, len(o), l.MaxOpBytes)
		}
	}
	return "", nil
}

// Options configure a Server.
type Options struct {
	// Node names this sidecar in fence records, for operators.
	Node string
	// Checkpoint is when the sidecar asks its primary for a checkpoint
	// (through Watch) and whether it runs GC after each one.
	Checkpoint CheckpointPolicy
	// Defaults are the settings of a shard whose Open leaves them zero;
	// zero fields take DefaultSettings.
	Defaults Settings
	Limits   Limits
	// AllowUnfenced lets Open disable fencing (benchmarks), and lets the
	// sidecar start on a store that does not enforce preconditions, where
	// it then serves unfenced shards only.
	AllowUnfenced bool
	Logger        *slog.Logger
	// Registerer receives the service's and the store's metrics; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// StoreLabel is the store label of the store request metrics.
	// Default "shards".
	StoreLabel string
	// StallAfter is how long a shard's syncs may retry store errors before
	// it counts as stalled (Status, /readyz, metrics, an ERROR log line).
	// Default 10s; MinStallAfter..MaxStallAfter.
	StallAfter time.Duration
	// HydrateDir is where Open makes a fresh folder for the checkpoint it
	// restores (streamed there from the store, then to the primary, then
	// removed). Default: the system's temporary directory.
	HydrateDir string
	// Cache configures warm serving (OpenRequest.warm): the block cache
	// and the local copies of warm shards' checkpoints.
	Cache CacheOptions
	// Masters are the base URLs of the masters that assign this sidecar's
	// shards (serve --master), none when shards are opened by hand. They
	// only change advice: a call on a shard that is not open here points
	// to the master's table rather than to Open.
	Masters []string
}

// CacheOptions configure warm serving. The block cache holds blocks of
// checkpoint files read on demand while a shard is partial, bounded by
// Bytes and evicted least recently used first; the background hydration
// writes each warm shard's whole checkpoint beside it (that copy is the
// shard's, as a full open's folder is, and is not bounded by Bytes).
type CacheOptions struct {
	// Dir is where the sidecar makes its folder for blocks and hydrated
	// checkpoints (removed at shutdown). Default: the system's temporary
	// directory.
	Dir string
	// Bytes bounds the block cache. Default 1 GiB; MinCacheBytes..
	// MaxCacheBytes, at least two blocks.
	Bytes int64
	// BlockBytes is the unit of an on-demand fetch, of caching and of
	// checksums. Default 1 MiB; MinCacheBlock..MaxCacheBlock, a power of
	// two.
	BlockBytes int64
	// HydrateParallelism is how many files a warm shard's background
	// hydration copies at once. Default 4; -1 turns the background
	// hydration off (shards stay partial, served from cache and store).
	HydrateParallelism int
	// FetchParallelism bounds the on-demand block fetches in flight on
	// the sidecar. Default 16.
	FetchParallelism int
}

// Bounds of CacheOptions.
const (
	DefaultCacheBytes      = 1 << 30
	DefaultCacheBlockBytes = 1 << 20
	MinCacheBytes          = 1 << 20
	MaxCacheBytes          = 1 << 50
	MinCacheBlock          = 4 << 10
	MaxCacheBlock          = 64 << 20
	MaxHydrateParallelism  = 64
	MaxFetchParallelism    = 256
)

func (c *CacheOptions) normalize() error {
	if c.Bytes == 0 {
		c.Bytes = DefaultCacheBytes
	}
	if c.BlockBytes == 0 {
		c.BlockBytes = DefaultCacheBlockBytes
	}
	if c.HydrateParallelism == 0 {
		c.HydrateParallelism = 4
	}
	if c.FetchParallelism == 0 {
		c.FetchParallelism = 16
	}
	switch {
	case c.BlockBytes < MinCacheBlock || c.BlockBytes > MaxCacheBlock || c.BlockBytes&(c.BlockBytes-1) != 0:
		return fmt.Errorf("%w: cache block %d bytes: a power of two in %d..%d", ErrInvalidArgument, c.BlockBytes, int64(MinCacheBlock), int64(MaxCacheBlock))
	case c.Bytes < MinCacheBytes || c.Bytes > MaxCacheBytes:
		return fmt.Errorf("%w: cache size %d bytes is outside %d..%d", ErrInvalidArgument, c.Bytes, int64(MinCacheBytes), int64(MaxCacheBytes))
	case c.Bytes < 2*c.BlockBytes:
		return fmt.Errorf("%w: cache size %d bytes holds fewer than two blocks of %d", ErrInvalidArgument, c.Bytes, c.BlockBytes)
	case c.HydrateParallelism < -1 || c.HydrateParallelism > MaxHydrateParallelism:
		return fmt.Errorf("%w: hydrate parallelism %d is outside 1..%d (or -1: off)", ErrInvalidArgument, c.HydrateParallelism, MaxHydrateParallelism)
	case c.FetchParallelism < 1 || c.FetchParallelism > MaxFetchParallelism:
		return fmt.Errorf("%w: fetch parallelism %d is outside 1..%d", ErrInvalidArgument, c.FetchParallelism, MaxFetchParallelism)
	}
	if c.Dir != "" {
		if fi, err := os.Stat(c.Dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: cache-dir %q is not a directory this process can use (create it first)", ErrInvalidArgument, c.Dir)
		}
	}
	return nil
}

// Validate reports the first option outside its range (ErrInvalidArgument),
// without touching any store: serve checks its flags with it first.
func (o Options) Validate() error {
	_, err := o.normalized()
	return err
}

// normalized fills the defaults of o and checks every range.
func (o Options) normalized() (Options, error) {
	if err := validateName("node", o.Node, true); err != nil {
		return o, err
	}
	o.Limits.setDefaults()
	if err := o.Limits.validate(); err != nil {
		return o, err
	}
	if o.StallAfter == 0 {
		o.StallAfter = DefaultStallAfter
	}
	if o.StallAfter < MinStallAfter || o.StallAfter > MaxStallAfter {
		return o, fmt.Errorf("%w: stall-after %v is outside %v..%v", ErrInvalidArgument, o.StallAfter, MinStallAfter, MaxStallAfter)
	}
	if o.HydrateDir != "" {
		if fi, err := os.Stat(o.HydrateDir); err != nil || !fi.IsDir() {
			return o, fmt.Errorf("%w: hydrate-dir %q is not a directory this process can use (create it first)", ErrInvalidArgument, o.HydrateDir)
		}
	}
	if err := o.Cache.normalize(); err != nil {
		return o, err
	}
	o.Checkpoint = o.Checkpoint.normalized()
	o.Defaults = mergeSettings(DefaultSettings(), o.Defaults)
	if err := o.Defaults.Validate(); err != nil {
		return o, fmt.Errorf("default shard settings: %w", err)
	}
	return o, nil
}

// mergeSettings fills the zero fields of req from def.
func mergeSettings(def, req Settings) Settings {
	out := req
	orDefault(&out.Mode, def.Mode)
	orDefault(&out.AckOrder, def.AckOrder)
	orDefault(&out.InlineLimit, def.InlineLimit)
	orDefault(&out.MaxSyncBytes, def.MaxSyncBytes)
	orDefault(&out.MaxInFlightBytes, def.MaxInFlightBytes)
	orDefault(&out.MaxPipeline, def.MaxPipeline)
	orDefault(&out.MaxGatherDelay, def.MaxGatherDelay)
	orDefault(&out.LeaseInterval, def.LeaseInterval)
	orDefault(&out.FreshnessInterval, def.FreshnessInterval)
	orDefault(&out.RetentionGens, def.RetentionGens)
	return out
}

// orDefault sets *v to def when it is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
