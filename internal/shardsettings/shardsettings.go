// Package shardsettings reads a shard's settings off the API
// (sidecarv1.ShardSettings) into Go units, refusing what is outside the
// ranges. It is the one conversion: the master runs it when it assigns a
// shard (to refuse now what every open would refuse later), the sidecar
// when it opens one (sidecar.SettingsFromProto maps the result to its
// translog options). It imports only the API and the shared
// invalid-argument sentinel, so the master needs no protocol package for
// it.
package shardsettings

import (
	"fmt"
	"math"
	"time"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/ident"
)

// The upper bounds of the settings. MaxLeaseInterval is seal's
// (seal.MaxLeaseInterval; a test keeps the two equal).
const (
	MaxLeaseInterval     = 10 * time.Minute
	MaxFreshnessInterval = 10 * time.Minute
	// MaxGatherDelay bounds the gather delay; a negative delay disables
	// it.
	MaxGatherDelay   = time.Second
	MaxInlineLimit   = 1 << 30
	MaxSyncBytes     = 1 << 30
	MaxInFlightBytes = 16 << 30
	MaxPipeline      = 64
	MaxRetentionGens = 1 << 40
)

// Settings are a shard's settings in Go units. Zero fields leave the
// choice to the sidecar's defaults, and so does an unspecified (zero)
// Mode or AckOrder; a negative MaxGatherDelay (-1) disables gathering.
type Settings struct {
	FencingDisabled   bool
	Mode              sidecarv1.FencingMode
	AckOrder          sidecarv1.AckOrder
	InlineLimit       int
	MaxSyncBytes      int64
	MaxInFlightBytes  int64
	MaxPipeline       int
	MaxGatherDelay    time.Duration
	LeaseInterval     time.Duration
	FreshnessInterval time.Duration
	RetentionGens     int64
}

// Error is a setting FromProto refuses. It is an invalid argument
// (errors.Is(err, ident.ErrInvalidArgument)); Detail says which setting and
// why, without the sentinel's text, for a caller that words its own
// message around it.
type Error struct {
	Detail string
}

func (e *Error) Error() string { return ident.ErrInvalidArgument.Error() + ": " + e.Detail }

// Unwrap makes an Error an invalid argument.
func (e *Error) Unwrap() error { return ident.ErrInvalidArgument }

// FromProto converts p (nil is all defaults). It refuses, with an *Error,
// an unknown mode or ack order and a number outside its range; bounds are
// checked before the unit conversions, so nothing overflows into a value
// that means something else (a huge delay turning negative would disable
// gathering).
func FromProto(p *sidecarv1.ShardSettings) (Settings, error) {
	var s Settings
	if p == nil {
		return s, nil
	}
	s.FencingDisabled = p.GetFencingDisabled()
	s.Mode, s.AckOrder = p.GetMode(), p.GetAckOrder()
	if _, ok := sidecarv1.FencingMode_name[int32(s.Mode)]; !ok {
		return Settings{}, &Error{Detail: fmt.Sprintf("fencing mode %d", s.Mode)}
	}
	if _, ok := sidecarv1.AckOrder_name[int32(s.AckOrder)]; !ok {
		return Settings{}, &Error{Detail: fmt.Sprintf("ack order %d", s.AckOrder)}
	}
	var err error
	bounded := func(what string, v, lo, hi int64) int64 {
		if err == nil && (v < lo || v > hi) {
			err = &Error{Detail: fmt.Sprintf("%s %d is outside %d..%d", what, v, lo, hi)}
		}
		return v
	}
	s.InlineLimit = int(bounded("inline_limit_bytes", p.GetInlineLimitBytes(), 0, MaxInlineLimit))
	s.MaxSyncBytes = bounded("max_sync_bytes", p.GetMaxSyncBytes(), 0, MaxSyncBytes)
	s.MaxInFlightBytes = bounded("max_in_flight_bytes", p.GetMaxInFlightBytes(), 0, MaxInFlightBytes)
	s.MaxPipeline = int(bounded("max_pipeline", int64(p.GetMaxPipeline()), 0, MaxPipeline))
	gather := bounded("max_gather_delay_us", p.GetMaxGatherDelayUs(), math.MinInt64, MaxGatherDelay.Microseconds())
	if gather < 0 {
		s.MaxGatherDelay = -1 // disabled
	} else {
		s.MaxGatherDelay = time.Duration(gather) * time.Microsecond
	}
	s.LeaseInterval = time.Duration(bounded("lease_interval_ms", p.GetLeaseIntervalMs(), 0, MaxLeaseInterval.Milliseconds())) * time.Millisecond
	s.FreshnessInterval = time.Duration(bounded("freshness_interval_ms", p.GetFreshnessIntervalMs(), 0, MaxFreshnessInterval.Milliseconds())) * time.Millisecond
	s.RetentionGens = bounded("retention_gens", p.GetRetentionGens(), 0, MaxRetentionGens)
	if err != nil {
		return Settings{}, err
	}
	return s, nil
}
