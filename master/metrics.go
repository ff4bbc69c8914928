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

	clients              *prometheus.GaugeVec
	clientTransitions    *prometheus.CounterVec
	livenessStalls       prometheus.Counter
	livenessLogWaits     prometheus.Counter
	offboardingSubmitted prometheus.Counter
	offboardingQueue     prometheus.Gauge
	offboardingRetries   prometheus.Counter
	offboardingJobs      *prometheus.CounterVec
	offboardingBatch     prometheus.Histogram
	offboardingSeconds   prometheus.Histogram
	takeovers            prometheus.Counter
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
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardfence_master_clients",
			Help: "Client incarnations (memory clients and sidecar nodes) by liveness state.",
		}, []string{"state"}),
		clientTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardfence_master_client_transitions_total",
			Help: "Liveness transitions committed (active to suspected, suspected to active on a signal, suspected to offline).",
		}, []string{"from", "to"}),
		livenessStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_liveness_monitor_stalls_total",
			Help: "Monitor passes that found the monitor itself had not observed for longer than its stall threshold; the unobserved time was not counted against any client.",
		}),
		livenessLogWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_liveness_log_waits_total",
			Help: "Monitor passes that stopped waiting for the operation log to acknowledge a takeover or placement after one monitor interval (the change is published once the log holds it).",
		}),
		offboardingSubmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_offboarding_jobs_submitted_total",
			Help: "Client offboarding jobs prepared (the client went offline).",
		}),
		offboardingQueue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_offboarding_queue_depth",
			Help: "Offboarding jobs waiting to be completed (queued or waiting for a retry).",
		}),
		offboardingRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_offboarding_retries_total",
			Help: "Offboarding job attempts after a failure.",
		}),
		offboardingJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardfence_master_offboarding_attempts_total",
			Help: "Offboarding job attempts by result (completed, failed).",
		}, []string{"result"}),
		offboardingBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardfence_master_offboarding_batch_jobs", Buckets: prometheus.ExponentialBuckets(1, 2, 8),
			Help: "Jobs completed together in one executor round.",
		}),
		offboardingSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardfence_master_offboarding_batch_seconds", Buckets: buckets,
			Help: "Time to complete one round of offboarding jobs.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_shard_takeovers_total",
			Help: "Shards moved to another node at a higher term (owner offline or suspected, stood-down handoff, unassigned shard placed).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.remountMatched, m.remountAssign, m.remountTotal, m.recoveryTTL,
			m.remountVisibleTTL, m.remountFailures, m.skippedUnreadable, m.evictedObjects,
			m.snapshotRestoresV1, m.snapshotRestoresV2, m.clockConversionFailures,
			m.clients, m.clientTransitions, m.livenessStalls, m.livenessLogWaits, m.offboardingSubmitted, m.offboardingQueue,
			m.offboardingRetries, m.offboardingJobs, m.offboardingBatch, m.offboardingSeconds, m.takeovers)
	}
	return m
}
