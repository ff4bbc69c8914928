package ha

import "github.com/prometheus/client_golang/prometheus"

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
		appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_oplog_appends_total",
			Help: "Appends to the operation log (each one generation: a md create and a fence CAS).",
		}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardfence_master_oplog_append_seconds", Buckets: secs,
			Help: "Time from handing a batch of entries to the log to its acknowledgement.",
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_oplog_entries_total",
			Help: "Entries acknowledged by the operation log.",
		}),
		standbyLagEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_standby_lag_entries",
			Help: "Entries of the operation log a standby has not applied yet (as of its last look at the log's tip).",
		}),
		standbyLagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_standby_lag_seconds",
			Help: "Time since a standby last found nothing left to apply (0 while caught up).",
		}),
		standbyApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_standby_applied_entries_total",
			Help: "Entries a standby applied while tailing the log.",
		}),
		standbyRebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_standby_rebuilds_total",
			Help: "Times a standby reloaded from the newest snapshot (its position was collected or cut off the lineage).",
		}),
		candidateFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_snapshot_candidate_fallbacks_total",
			Help: "Complete snapshot candidates refused on restore (malformed, bad clock mapping, corrupt file), each followed by an older one.",
		}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_snapshots_total",
			Help: "Complete snapshots published.",
		}),
		snapshotFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_snapshot_failures_total",
			Help: "Complete snapshots that were not published.",
		}),
		snapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardfence_master_snapshot_seconds", Buckets: secs,
			Help: "Duration of a complete snapshot: freeze, encode, upload, publish.",
		}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_snapshot_bytes",
			Help: "Size of the last complete snapshot published.",
		}),
		snapshotObjects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_snapshot_objects",
			Help: "Objects in the last complete snapshot published.",
		}),
		snapshotPause: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_snapshot_pause_seconds",
			Help: "How long the last snapshot's freeze held changes back (reads went on).",
		}),
		promotionSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_promotion_seconds",
			Help: "Duration of the last promotion, from the request to serving.",
		}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardfence_master_term",
			Help: "Term of the operation log this master holds (0 when it holds none).",
		}),
		elections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_elections_won_total",
			Help: "Times this master claimed the operation log by itself, after the primary showed no sign of life for the election timeout.",
		}),
		stepDowns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardfence_master_step_downs_total",
			Help: "Times this master stopped being primary (fenced by a newer one, its leadership lapsed, or its log failed) and turned standby.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.appends, m.appendSeconds, m.entries, m.standbyLagEntries, m.standbyLagSeconds,
			m.standbyApplied, m.standbyRebuilds, m.candidateFallbacks, m.snapshots, m.snapshotFailures,
			m.snapshotSeconds, m.snapshotBytes, m.snapshotObjects, m.snapshotPause, m.promotionSeconds, m.term, m.elections, m.stepDowns)
	}
	return m
}
