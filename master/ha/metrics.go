package ha

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/master/internal/metricdef"
)

// Metrics are the operation log's, the standby's and the complete
// snapshots' metrics (the master's own are master.Metrics).
type Metrics struct {
	appends       prometheus.Counter
	appendSeconds prometheus.Histogram
	entries       prometheus.Counter

	standbyLagEntries prometheus.Gauge
	standbyLagSeconds prometheus.Gauge
	standbyApplied    prometheus.Counter
	standbyRebuilds   prometheus.Counter

	candidateFallbacks prometheus.Counter
	snapshots          prometheus.Counter
	snapshotFailures   prometheus.Counter
	snapshotSeconds    prometheus.Histogram
	snapshotBytes      prometheus.Gauge
	snapshotObjects    prometheus.Gauge
	snapshotPause      prometheus.Gauge
	promotionSeconds   prometheus.Gauge
	term               prometheus.Gauge
	elections          prometheus.Counter
	stepDowns          prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	secs := prometheus.ExponentialBuckets(0.0005, 4, 12)
	m := &Metrics{
		appends: metricdef.Counter("shardfence_master_oplog_appends_total",
			"Appends to the operation log (each one generation: a md create and a fence CAS)."),
		appendSeconds: metricdef.Histogram("shardfence_master_oplog_append_seconds",
			"Time from handing a batch of entries to the log to its acknowledgement.", secs),
		entries: metricdef.Counter("shardfence_master_oplog_entries_total",
			"Entries acknowledged by the operation log."),
		standbyLagEntries: metricdef.Gauge("shardfence_master_standby_lag_entries",
			"Entries of the operation log a standby has not applied yet (as of its last look at the log's tip)."),
		standbyLagSeconds: metricdef.Gauge("shardfence_master_standby_lag_seconds",
			"Time since a standby last found nothing left to apply (0 while caught up)."),
		standbyApplied: metricdef.Counter("shardfence_master_standby_applied_entries_total",
			"Entries a standby applied while tailing the log."),
		standbyRebuilds: metricdef.Counter("shardfence_master_standby_rebuilds_total",
			"Times a standby reloaded from the newest snapshot (its position was collected or cut off the lineage)."),
		candidateFallbacks: metricdef.Counter("shardfence_master_snapshot_candidate_fallbacks_total",
			"Complete snapshot candidates refused on restore (malformed, bad clock mapping, corrupt file), each followed by an older one."),
		snapshots: metricdef.Counter("shardfence_master_snapshots_total",
			"Complete snapshots published."),
		snapshotFailures: metricdef.Counter("shardfence_master_snapshot_failures_total",
			"Complete snapshots that were not published."),
		snapshotSeconds: metricdef.Histogram("shardfence_master_snapshot_seconds",
			"Duration of a complete snapshot: freeze, encode, upload, publish.", secs),
		snapshotBytes: metricdef.Gauge("shardfence_master_snapshot_bytes",
			"Size of the last complete snapshot published."),
		snapshotObjects: metricdef.Gauge("shardfence_master_snapshot_objects",
			"Objects in the last complete snapshot published."),
		snapshotPause: metricdef.Gauge("shardfence_master_snapshot_pause_seconds",
			"How long the last snapshot's freeze held changes back (reads went on)."),
		promotionSeconds: metricdef.Gauge("shardfence_master_promotion_seconds",
			"Duration of the last promotion, from the request to serving."),
		term: metricdef.Gauge("shardfence_master_term",
			"Term of the operation log this master holds (0 when it holds none)."),
		elections: metricdef.Counter("shardfence_master_elections_won_total",
			"Times this master claimed the operation log by itself, after the primary showed no sign of life for the election timeout."),
		stepDowns: metricdef.Counter("shardfence_master_step_downs_total",
			"Times this master stopped being primary (fenced by a newer one, its leadership lapsed, or its log failed) and turned standby."),
	}
	metricdef.Register(reg, m.appends, m.appendSeconds, m.entries, m.standbyLagEntries, m.standbyLagSeconds,
		m.standbyApplied, m.standbyRebuilds, m.candidateFallbacks, m.snapshots, m.snapshotFailures,
		m.snapshotSeconds, m.snapshotBytes, m.snapshotObjects, m.snapshotPause, m.promotionSeconds, m.term, m.elections, m.stepDowns)
	return m
}
