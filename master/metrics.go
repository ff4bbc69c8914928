package master

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/master/internal/metricdef"
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
		remountMatched: metricdef.Gauge("shardfence_master_remount_matched_objects",
			"Objects matched by the last successful segment remount."),
		remountAssign: metricdef.Histogram("shardfence_master_remount_lease_assign_seconds",
			"Time to assign the recovery lease to every matched object of a remount.", buckets),
		remountTotal: metricdef.Histogram("shardfence_master_remount_seconds",
			"Total duration of successful segment remounts.", buckets),
		recoveryTTL: metricdef.Gauge("shardfence_master_recovery_lease_ttl_seconds",
			"Effective recovery lease TTL (recovery_kv_lease_ttl, or the read lease TTL when unset)."),
		remountVisibleTTL: metricdef.Gauge("shardfence_master_remount_visible_ttl_seconds",
			"Recovery lease left when the last remounted segment was published as serviceable."),
		remountFailures: metricdef.Counter("shardfence_master_remount_failures_total",
			"Remounts that failed verification and published nothing."),
		skippedUnreadable: metricdef.Counter("shardfence_master_eviction_skipped_unreadable_replicas_total",
			"Lease-expired memory replicas eviction passed over because they are unreadable (segment awaiting remount)."),
		evictedObjects: metricdef.Counter("shardfence_master_evicted_objects_total",
			"Objects that lost memory replicas to eviction."),
		snapshotRestoresV1: snapshotRestores(SnapshotVersion1),
		snapshotRestoresV2: snapshotRestores(SnapshotVersion2),
		clockConversionFailures: metricdef.Counter("shardfence_master_snapshot_clock_conversion_failures_total",
			"Complete snapshot candidates refused because a deadline did not convert without overflow."),
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardfence_master_clients",
			Help: "Client incarnations (memory clients and sidecar nodes) by liveness state.",
		}, []string{"state"}),
		clientTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardfence_master_client_transitions_total",
			Help: "Liveness transitions committed (active to suspected, suspected to active on a signal, suspected to offline).",
		}, []string{"from", "to"}),
		livenessStalls: metricdef.Counter("shardfence_master_liveness_monitor_stalls_total",
			"Monitor passes that found the monitor itself had not observed for longer than its stall threshold; the unobserved time was not counted against any client."),
		livenessLogWaits: metricdef.Counter("shardfence_master_liveness_log_waits_total",
			"Monitor passes that stopped waiting for the operation log to acknowledge a takeover or placement after one monitor interval (the change is published once the log holds it)."),
		offboardingSubmitted: metricdef.Counter("shardfence_master_offboarding_jobs_submitted_total",
			"Client offboarding jobs prepared (the client went offline)."),
		offboardingQueue: metricdef.Gauge("shardfence_master_offboarding_queue_depth",
			"Offboarding jobs waiting to be completed (queued or waiting for a retry)."),
		offboardingRetries: metricdef.Counter("shardfence_master_offboarding_retries_total",
			"Offboarding job attempts after a failure."),
		offboardingJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardfence_master_offboarding_attempts_total",
			Help: "Offboarding job attempts by result (completed, failed).",
		}, []string{"result"}),
		offboardingBatch: metricdef.Histogram("shardfence_master_offboarding_batch_jobs",
			"Jobs completed together in one executor round.", prometheus.ExponentialBuckets(1, 2, 8)),
		offboardingSeconds: metricdef.Histogram("shardfence_master_offboarding_batch_seconds",
			"Time to complete one round of offboarding jobs.", buckets),
		takeovers: metricdef.Counter("shardfence_master_shard_takeovers_total",
			"Shards moved to another node at a higher term (owner offline or suspected, stood-down handoff, unassigned shard placed)."),
	}
	metricdef.Register(reg, m.remountMatched, m.remountAssign, m.remountTotal, m.recoveryTTL,
		m.remountVisibleTTL, m.remountFailures, m.skippedUnreadable, m.evictedObjects,
		m.snapshotRestoresV1, m.snapshotRestoresV2, m.clockConversionFailures,
		m.clients, m.clientTransitions, m.livenessStalls, m.livenessLogWaits, m.offboardingSubmitted, m.offboardingQueue,
		m.offboardingRetries, m.offboardingJobs, m.offboardingBatch, m.offboardingSeconds, m.takeovers)
	return m
}

// snapshotRestores counts the restores of one snapshot format version.
func snapshotRestores(version string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardfence_master_snapshot_restores_total", ConstLabels: prometheus.Labels{"version": version},
		Help: "Complete snapshots restored, by format version.",
	})
}
