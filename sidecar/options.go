package sidecar

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/blobstore"
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
	MinBodyReadTimeout = 100 * time.Millisecond
	MaxBodyReadTimeout = 10 * time.Minute
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
