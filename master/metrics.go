package master

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the master's Prometheus metrics. They are aggregates only:
// recovery touches millions of objects and logs nothing per object.
type Metrics struct {
	remountMatched    prometheus.Gauge
	remountAssign     prometheus.Histogram
	remountTotal      prometheus.Histogram
	recoveryTTL       prometheus.Gauge
	remountVisibleTTL prometheus.Gauge
	remountFailures   prometheus.Counter
	skippedUnreadable prometheus.Counter
	evictedObjects    prometheus.Counter

	snapshotRestoresV1      prometheus.Counter
	snapshotRestoresV2      prometheus.Counter
	clockConversionFailures prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests and benchmarks).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 4, 12)
	m := &Metrics{
		remountMatched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_remount_matched_objects",
			Help: "Objects matched by the last successful segment remount.",
		}),
		remountAssign: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardfence_master_remount_lease_assign_seconds", Buckets: buckets,
			Help: "Time to assign the recovery lease to every matched object of a remount.",
		}),
		remountTotal: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardfence_master_remount_seconds", Buckets: buckets,
			Help: "Total duration of successful segment remounts.",
		}),
		recoveryTTL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_recovery_lease_ttl_seconds",
			Help: "Effective recovery lease TTL (recovery_kv_lease_ttl, or the read lease TTL when unset).",
		}),
		remountVisibleTTL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_remount_visible_ttl_seconds",
			Help: "Recovery lease left when the last remounted segment was published as serviceable.",
		}),
		remountFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_remount_failures_total",
			Help: "Remounts that failed verification and published nothing.",
		}),
		skippedUnreadable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_eviction_skipped_unreadable_replicas_total",
			Help: "Lease-expired memory replicas eviction passed over because they are unreadable (segment awaiting remount).",
		}),
		evictedObjects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_evicted_objects_total",
			Help: "Objects that lost memory replicas to eviction.",
		}),
		snapshotRestoresV1: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_snapshot_restores_total", ConstLabels: prometheus.Labels{"version": SnapshotVersion1},
			Help: "Complete snapshots restored, by format version.",
		}),
		snapshotRestoresV2: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_snapshot_restores_total", ConstLabels: prometheus.Labels{"version": SnapshotVersion2},
			Help: "Complete snapshots restored, by format version.",
		}),
		clockConversionFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_snapshot_clock_conversion_failures_total",
			Help: "Complete snapshot candidates refused because a deadline did not convert without overflow.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.remountMatched, m.remountAssign, m.remountTotal, m.recoveryTTL,
			m.remountVisibleTTL, m.remountFailures, m.skippedUnreadable, m.evictedObjects,
			m.snapshotRestoresV1, m.snapshotRestoresV2, m.clockConversionFailures)
	}
	return m
}
