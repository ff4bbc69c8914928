package sidecar

import (
	"fmt"
	"strings"
	"time"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/shardsettings"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Settings are fixed when a shard opens: a live shard never switches its
// write witness. The fencing fields (FencingDisabled, Mode, LeaseInterval)
// are the shard's own, fixed at its first open: a later Open or
// AdoptHandoff runs the stored mode and reports it in ShardStatus.Settings.
type Settings struct {
	FencingDisabled   bool                 `json:"fencing_disabled,omitempty"`
	Mode              translog.FencingMode `json:"mode"`
	AckOrder          translog.AckOrder    `json:"ack_order"`
	InlineLimit       int                  `json:"inline_limit_bytes"`
	MaxSyncBytes      int64                `json:"max_sync_bytes"`
	MaxInFlightBytes  int64                `json:"max_in_flight_bytes"`
	MaxPipeline       int                  `json:"max_pipeline"`
	MaxGatherDelay    time.Duration        `json:"max_gather_delay"`
	LeaseInterval     time.Duration        `json:"lease_interval"`
	FreshnessInterval time.Duration        `json:"freshness_interval"`
	RetentionGens     int64                `json:"retention_gens"`
}

// DefaultSettings are the settings of a shard whose Open leaves them zero:
// the writer's (translog.DefaultOptions), a 5s freshness interval and no
// retained generations.
func DefaultSettings() Settings {
	w := translog.DefaultOptions()
	return Settings{
		Mode:              w.FencingMode,
		AckOrder:          w.AckOrder,
		InlineLimit:       w.InlineLimit,
		MaxSyncBytes:      w.MaxSyncBytes,
		MaxInFlightBytes:  w.MaxInFlightBytes,
		MaxPipeline:       w.MaxPipeline,
		MaxGatherDelay:    w.MaxGatherDelay,
		LeaseInterval:     w.LeaseInterval,
		FreshnessInterval: 5 * time.Second,
		RetentionGens:     0,
	}
}

// The ranges of the per-shard settings. An Open (or a sidecar default)
// outside them is refused with ErrInvalidArgument; zero takes the default.
const (
	MinLeaseInterval     = seal.MinLeaseInterval // 10ms
	MaxLeaseInterval     = seal.MaxLeaseInterval // 10m
	MinFreshnessInterval = 10 * time.Millisecond
	MaxFreshnessInterval = shardsettings.MaxFreshnessInterval
	// MaxGatherDelayLimit bounds the gather delay; a negative delay
	// disables it.
	MaxGatherDelayLimit = shardsettings.MaxGatherDelay
	MaxInlineLimit      = shardsettings.MaxInlineLimit
	MaxSyncBytesLimit   = shardsettings.MaxSyncBytes
	MaxInFlightLimit    = shardsettings.MaxInFlightBytes
	MaxPipelineLimit    = shardsettings.MaxPipeline
	MaxRetentionGens    = shardsettings.MaxRetentionGens
)

// settingsFromProto converts the API's settings: the bounds and units are
// package shardsettings' (the master checks with it too), the mode and
// ack order map to the writer's.
func settingsFromProto(p *sidecarv1.ShardSettings) (Settings, error) {
	v, err := shardsettings.FromProto(p)
	if err != nil {
		return Settings{}, err
	}
	return Settings{
		FencingDisabled: v.FencingDisabled,
		Mode: map[sidecarv1.FencingMode]translog.FencingMode{
			sidecarv1.FencingMode_FENCING_MODE_PER_SYNC:    translog.PerSync,
			sidecarv1.FencingMode_FENCING_MODE_LEASE:       translog.Lease,
			sidecarv1.FencingMode_FENCING_MODE_CREATE_ONLY: translog.CreateOnly,
			sidecarv1.FencingMode_FENCING_MODE_OBSERVE:     translog.Observe,
		}[v.Mode],
		AckOrder: map[sidecarv1.AckOrder]translog.AckOrder{
			sidecarv1.AckOrder_ACK_ORDER_CONCURRENT: translog.Concurrent,
			sidecarv1.AckOrder_ACK_ORDER_SEQUENCED:  translog.Sequenced,
		}[v.AckOrder],
		InlineLimit: v.InlineLimit, MaxSyncBytes: v.MaxSyncBytes, MaxInFlightBytes: v.MaxInFlightBytes,
		MaxPipeline: v.MaxPipeline, MaxGatherDelay: v.MaxGatherDelay,
		LeaseInterval: v.LeaseInterval, FreshnessInterval: v.FreshnessInterval, RetentionGens: v.RetentionGens,
	}, nil
}

// Validate reports the first setting outside its range.
func (s Settings) Validate() error {
	for _, c := range []struct {
		what string
		bad  bool
		val  any
		rng  string
	}{
		{"inline limit", s.InlineLimit < 0 || s.InlineLimit > MaxInlineLimit, s.InlineLimit, fmt.Sprintf("0..%d bytes", MaxInlineLimit)},
		{"max sync bytes", s.MaxSyncBytes < 0 || s.MaxSyncBytes > MaxSyncBytesLimit, s.MaxSyncBytes, fmt.Sprintf("1..%d bytes", MaxSyncBytesLimit)},
		{"max in-flight bytes", s.MaxInFlightBytes < 0 || s.MaxInFlightBytes > MaxInFlightLimit, s.MaxInFlightBytes, fmt.Sprintf("1..%d bytes", int64(MaxInFlightLimit))},
		{"max pipeline", s.MaxPipeline < 0 || s.MaxPipeline > MaxPipelineLimit, s.MaxPipeline, fmt.Sprintf("1..%d", MaxPipelineLimit)},
		{"max gather delay", s.MaxGatherDelay > MaxGatherDelayLimit, s.MaxGatherDelay, fmt.Sprintf("up to %v (negative disables)", MaxGatherDelayLimit)},
		{"lease interval", s.LeaseInterval != 0 && (s.LeaseInterval < MinLeaseInterval || s.LeaseInterval > MaxLeaseInterval), s.LeaseInterval, fmt.Sprintf("%v..%v", MinLeaseInterval, MaxLeaseInterval)},
		{"freshness interval", s.FreshnessInterval != 0 && (s.FreshnessInterval < MinFreshnessInterval || s.FreshnessInterval > MaxFreshnessInterval), s.FreshnessInterval, fmt.Sprintf("%v..%v", MinFreshnessInterval, MaxFreshnessInterval)},
		{"retention generations", s.RetentionGens < 0 || s.RetentionGens > MaxRetentionGens, s.RetentionGens, fmt.Sprintf("0..%d", int64(MaxRetentionGens))},
		{"fencing mode", s.Mode < translog.PerSync || s.Mode > translog.Observe, int(s.Mode), "per_sync, lease, create_only or observe"},
		{"ack order", s.AckOrder != translog.Concurrent && s.AckOrder != translog.Sequenced, int(s.AckOrder), "concurrent or sequenced"},
	} {
		if c.bad {
			return fmt.Errorf("%w: %s %v is outside %s", ErrInvalidArgument, c.what, c.val, c.rng)
		}
	}
	if s.MaxSyncBytes > 0 && s.MaxInFlightBytes > 0 && s.MaxSyncBytes > s.MaxInFlightBytes {
		return fmt.Errorf("%w: max sync bytes %d above max in-flight bytes %d", ErrInvalidArgument, s.MaxSyncBytes, s.MaxInFlightBytes)
	}
	return nil
}

// String lists the settings as an operator reads them (and as the
// settings-mismatch error shows them).
func (s Settings) String() string {
	fencing := seal.FencingOf(s.WriterOptions()).String()
	gather := s.MaxGatherDelay.String()
	if s.MaxGatherDelay < 0 {
		gather = "off"
	}
	return fmt.Sprintf("fencing %s, ack order %s, inline limit %d, max sync bytes %d, max in-flight bytes %d, max pipeline %d, max gather delay %s, freshness %v, retention %d gens",
		fencing, s.AckOrder, s.InlineLimit, s.MaxSyncBytes, s.MaxInFlightBytes, s.MaxPipeline, gather, s.FreshnessInterval, s.RetentionGens)
}

// diff names the settings of s that differ from o, as "name a (not b)".
func (s Settings) diff(o Settings) string {
	var out []string
	add := func(name string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %v (not %v)", name, a, b))
		}
	}
	add("fencing", seal.FencingOf(s.WriterOptions()).String(), seal.FencingOf(o.WriterOptions()).String())
	add("ack order", s.AckOrder.String(), o.AckOrder.String())
	add("inline limit", s.InlineLimit, o.InlineLimit)
	add("max sync bytes", s.MaxSyncBytes, o.MaxSyncBytes)
	add("max in-flight bytes", s.MaxInFlightBytes, o.MaxInFlightBytes)
	add("max pipeline", s.MaxPipeline, o.MaxPipeline)
	add("max gather delay", s.MaxGatherDelay, o.MaxGatherDelay)
	add("freshness interval", s.FreshnessInterval, o.FreshnessInterval)
	add("retention generations", s.RetentionGens, o.RetentionGens)
	return strings.Join(out, ", ")
}

// withFencing returns s running f.
func (s Settings) withFencing(f seal.Fencing) Settings {
	s.FencingDisabled, s.Mode = f.Disabled, f.Mode
	if f.Mode == translog.Lease {
		s.LeaseInterval = f.LeaseInterval
	}
	return s
}

// WriterOptions are the translog options a shard opened with s writes
// with (its identity and start point come from the open).
func (s Settings) WriterOptions() translog.Options { return s.writerOptions(openParams{}, 0, 0) }

// writerOptions are the translog options of a shard opened with s.
func (s Settings) writerOptions(p openParams, startGen, startSeq int64) translog.Options {
	return translog.Options{
		Shard: p.Shard, Term: p.Term, Allocation: p.Allocation,
		StartGen: startGen, StartSeqNo: startSeq,
		AckOrder: s.AckOrder, FencingDisabled: s.FencingDisabled, FencingMode: s.Mode, LeaseInterval: s.LeaseInterval,
		InlineLimit: s.InlineLimit, MaxSyncBytes: s.MaxSyncBytes, MaxInFlightBytes: s.MaxInFlightBytes,
		MaxPipeline: s.MaxPipeline, MaxGatherDelay: s.MaxGatherDelay,
	}
}
