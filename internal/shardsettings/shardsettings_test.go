package shardsettings_test

import (
	"errors"
	"math"
	"testing"
	"time"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/internal/shardsettings"
	"github.com/shardfence/shardfence/seal"
)

func TestFromProto(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     *sidecarv1.ShardSettings
		want   shardsettings.Settings
		detail string // the refusal's Detail; empty when accepted
	}{
		{name: "nil is all defaults", in: nil},
		{name: "zero is all defaults", in: &sidecarv1.ShardSettings{}},
		{name: "units", in: &sidecarv1.ShardSettings{
			FencingDisabled: true, Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, AckOrder: sidecarv1.AckOrder_ACK_ORDER_SEQUENCED,
			InlineLimitBytes: 100, MaxSyncBytes: 200, MaxInFlightBytes: 300, MaxPipeline: 4, MaxGatherDelayUs: 1500,
			LeaseIntervalMs: 250, FreshnessIntervalMs: 3000, RetentionGens: 7,
		}, want: shardsettings.Settings{
			FencingDisabled: true, Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, AckOrder: sidecarv1.AckOrder_ACK_ORDER_SEQUENCED,
			InlineLimit: 100, MaxSyncBytes: 200, MaxInFlightBytes: 300, MaxPipeline: 4, MaxGatherDelay: 1500 * time.Microsecond,
			LeaseInterval: 250 * time.Millisecond, FreshnessInterval: 3 * time.Second, RetentionGens: 7,
		}},
		{name: "negative gather delay disables", in: &sidecarv1.ShardSettings{MaxGatherDelayUs: math.MinInt64}, want: shardsettings.Settings{MaxGatherDelay: -1}},
		{name: "bounds are inclusive", in: &sidecarv1.ShardSettings{MaxPipeline: shardsettings.MaxPipeline, LeaseIntervalMs: 600000},
			want: shardsettings.Settings{MaxPipeline: shardsettings.MaxPipeline, LeaseInterval: 10 * time.Minute}},
		{name: "unknown mode", in: &sidecarv1.ShardSettings{Mode: 9}, detail: "fencing mode 9"},
		{name: "unknown ack order", in: &sidecarv1.ShardSettings{AckOrder: 3}, detail: "ack order 3"},
		{name: "inline limit above", in: &sidecarv1.ShardSettings{InlineLimitBytes: 1<<30 + 1}, detail: "inline_limit_bytes 1073741825 is outside 0..1073741824"},
		{name: "negative sync bytes", in: &sidecarv1.ShardSettings{MaxSyncBytes: -1}, detail: "max_sync_bytes -1 is outside 0..1073741824"},
		{name: "pipeline above", in: &sidecarv1.ShardSettings{MaxPipeline: 65}, detail: "max_pipeline 65 is outside 0..64"},
		{name: "gather delay above", in: &sidecarv1.ShardSettings{MaxGatherDelayUs: 1000001}, detail: "max_gather_delay_us 1000001 is outside -9223372036854775808..1000000"},
		{name: "huge lease does not overflow", in: &sidecarv1.ShardSettings{LeaseIntervalMs: math.MaxInt64}, detail: "lease_interval_ms 9223372036854775807 is outside 0..600000"},
		{name: "first refusal wins", in: &sidecarv1.ShardSettings{FreshnessIntervalMs: -5, RetentionGens: -1}, detail: "freshness_interval_ms -5 is outside 0..600000"},
		{name: "retention above", in: &sidecarv1.ShardSettings{RetentionGens: 1<<40 + 1}, detail: "retention_gens 1099511627777 is outside 0..1099511627776"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shardsettings.FromProto(tc.in)
			if tc.detail == "" {
				if err != nil || got != tc.want {
					t.Fatalf("FromProto = %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			var se *shardsettings.Error
			if !errors.As(err, &se) || se.Detail != tc.detail {
				t.Fatalf("FromProto error %v, want detail %q", err, tc.detail)
			}
			if !errors.Is(err, ident.ErrInvalidArgument) || err.Error() != "invalid argument: "+tc.detail {
				t.Fatalf("error %q is not the invalid argument %q", err, tc.detail)
			}
			if got != (shardsettings.Settings{}) {
				t.Fatalf("refused settings came back as %+v", got)
			}
		})
	}
}

// The bound the master checks is the one the sidecar's seal enforces.
func TestMaxLeaseIntervalIsSeals(t *testing.T) {
	if shardsettings.MaxLeaseInterval != seal.MaxLeaseInterval {
		t.Fatalf("MaxLeaseInterval %v, seal's %v", shardsettings.MaxLeaseInterval, seal.MaxLeaseInterval)
	}
}
