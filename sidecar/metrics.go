package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for dashboards and tests.
const (
	AppendsMetric       = "shardfence_sidecar_appends_total"
	AckedOpsMetric      = "shardfence_sidecar_acked_ops_total"
	AckLatencyMetric    = "shardfence_sidecar_ack_latency_seconds"
	FencedMetric        = "shardfence_sidecar_fenced_total"
	HydrationMetric     = "shardfence_sidecar_hydration_bytes_total"
	OpenShardsMetric    = "shardfence_sidecar_open_shards"
	SyncsMetric         = "shardfence_sidecar_syncs_total"
	SyncedOpsMetric     = "shardfence_sidecar_synced_ops_total"
	CASWritesMetric     = "shardfence_sidecar_cas_writes_total"
	LeaseSkipsMetric    = "shardfence_sidecar_lease_skips_total"
	OpensMetric         = "shardfence_sidecar_opens_total"
	ServiceErrorsMetric = "shardfence_sidecar_errors_total"
	StoreRetriesMetric  = "shardfence_sidecar_store_retries_total"
	RetryingMetric      = "shardfence_sidecar_store_retrying_seconds"
	LastSyncMetric      = "shardfence_sidecar_last_sync_timestamp_seconds"
	StalledMetric       = "shardfence_sidecar_shard_stalled"
)

// metrics are the service's Prometheus metrics. Store requests (CAS results
// by outcome among them) are counted by the metered store the sidecar
// wraps around its container; per-sync counters are read from the writers
// at scrape time, so ops per sync is rate(synced_ops)/rate(syncs).
type metrics struct {
	appends    *prometheus.CounterVec
	ackedOps   prometheus.Counter
	ackLatency prometheus.Histogram
	fenced     prometheus.Counter
	hydration  prometheus.Counter
	opens      *prometheus.CounterVec
	errors     *prometheus.CounterVec
}

// newMetrics registers the service's metrics with reg (nil: unregistered,
// for tests that do not scrape) and the collector of s's writers.
func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		appends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: AppendsMetric,
			Help: "Append calls by result (ok, or the error reason)."}, []string{"result"}),
		ackedOps: prometheus.NewCounter(prometheus.CounterOpts{Name: AckedOpsMetric,
			Help: "Ops acknowledged durable and fenced."}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: AckLatencyMetric,
			Help:    "Time from an Append reaching the writer to its acknowledgement.",
			Buckets: prometheus.ExponentialBucketsRange(0.0002, 30, 20)}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: FencedMetric,
			Help: "Shards this sidecar saw fenced by a successor."}),
		hydration: prometheus.NewCounter(prometheus.CounterOpts{Name: HydrationMetric,
			Help: "Bytes of checkpoint files and replayed ops streamed by Open."}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: OpensMetric,
			Help: "Open calls by result."}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ServiceErrorsMetric,
			Help: "Failed API calls by method and reason."}, []string{"method", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.appends, m.ackedOps, m.ackLatency, m.fenced, m.hydration, m.opens, m.errors, &writerCollector{s: s})
	}
	return m
}

var (
	syncsDesc      = prometheus.NewDesc(SyncsMetric, "Translog syncs of the shards open now.", []string{"shard"}, nil)
	syncedOpsDesc  = prometheus.NewDesc(SyncedOpsMetric, "Ops written by the syncs of the shards open now.", []string{"shard"}, nil)
	casDesc        = prometheus.NewDesc(CASWritesMetric, "Fence CAS writes sent by syncs of the shards open now.", []string{"shard"}, nil)
	leaseSkipsDesc = prometheus.NewDesc(LeaseSkipsMetric, "Syncs acknowledged inside the lease without a CAS.", []string{"shard"}, nil)
	openDesc       = prometheus.NewDesc(OpenShardsMetric, "Shards open on this sidecar, by state.", []string{"state"}, nil)
	retriesDesc    = prometheus.NewDesc(StoreRetriesMetric, "Store errors the syncs of the shards open now retried.", []string{"shard"}, nil)
	retryingDesc   = prometheus.NewDesc(RetryingMetric, "How long the shard's syncs have been retrying store errors (0: they are not).", []string{"shard"}, nil)
	lastSyncDesc   = prometheus.NewDesc(LastSyncMetric, "Unix time of the shard's last acknowledged sync (0: none yet).", []string{"shard"}, nil)
	stalledDesc    = prometheus.NewDesc(StalledMetric, "1 while the shard's syncs have been retrying store errors for longer than --stall-after.", []string{"shard"}, nil)
)

// writerCollector reads the open writers' counters at scrape time.
type writerCollector struct{ s *Server }

func (c *writerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{syncsDesc, syncedOpsDesc, casDesc, leaseSkipsDesc, openDesc, retriesDesc, retryingDesc, lastSyncDesc, stalledDesc} {
		ch <- d
	}
}

func (c *writerCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[ShardState]int{}
	for _, sh := range c.s.reg.all() {
		st := sh.status()
		states[st.State]++
		w := sh.writer()
		if w == nil {
			continue
		}
		ws := w.Stats()
		ch <- prometheus.MustNewConstMetric(syncsDesc, prometheus.CounterValue, float64(ws.Syncs), sh.name)
		ch <- prometheus.MustNewConstMetric(syncedOpsDesc, prometheus.CounterValue, float64(ws.Ops), sh.name)
		ch <- prometheus.MustNewConstMetric(casDesc, prometheus.CounterValue, float64(ws.CASWrites), sh.name)
		ch <- prometheus.MustNewConstMetric(leaseSkipsDesc, prometheus.CounterValue, float64(ws.LeaseSkips), sh.name)
		h := w.StoreHealth()
		now := time.Now()
		retrying, last, stalled := 0.0, 0.0, 0.0
		if h.Retrying() {
			retrying = now.Sub(h.RetryingSince).Seconds()
		}
		if !h.LastSync.IsZero() {
			last = float64(h.LastSync.UnixNano()) / 1e9
		}
		if storeHealthOf(h, sh.stallAfter, now) == HealthStalled {
			stalled = 1
		}
		ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(h.Retries), sh.name)
		ch <- prometheus.MustNewConstMetric(retryingDesc, prometheus.GaugeValue, retrying, sh.name)
		ch <- prometheus.MustNewConstMetric(lastSyncDesc, prometheus.GaugeValue, last, sh.name)
		ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, stalled, sh.name)
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(n), st.String())
	}
}
