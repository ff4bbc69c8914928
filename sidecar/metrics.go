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
	FenceChecksMetric   = "shardfence_sidecar_fence_checks_total"
	ObservedMetric      = "shardfence_sidecar_fencing_observed_total"
	OpensMetric         = "shardfence_sidecar_opens_total"
	ServiceErrorsMetric = "shardfence_sidecar_errors_total"
	BarriersMetric      = "shardfence_sidecar_barriers_total"
	BarrierReadsMetric  = "shardfence_sidecar_barrier_reads_total"
	StoreRetriesMetric  = "shardfence_sidecar_store_retries_total"
	RetryingMetric      = "shardfence_sidecar_store_retrying_seconds"
	LastSyncMetric      = "shardfence_sidecar_last_sync_timestamp_seconds"
	StalledMetric       = "shardfence_sidecar_shard_stalled"
	BacklogBytesMetric  = "shardfence_sidecar_replay_backlog_bytes"
	BacklogGensMetric   = "shardfence_sidecar_replay_backlog_gens"

	// Warm serving (OpenRequest.warm).
	CacheHitsMetric        = "shardfence_sidecar_checkpoint_cache_hits_total"
	CacheMissesMetric      = "shardfence_sidecar_checkpoint_cache_misses_total"
	CacheCorruptMetric     = "shardfence_sidecar_checkpoint_cache_corrupt_blocks_total"
	CacheWriteErrorsMetric = "shardfence_sidecar_checkpoint_cache_write_errors_total"
	FetchLatencyMetric     = "shardfence_sidecar_checkpoint_fetch_seconds"
	CacheBytesMetric       = "shardfence_sidecar_checkpoint_cache_bytes"
	LocalityMetric         = "shardfence_sidecar_shard_partial"
	LocalBytesMetric       = "shardfence_sidecar_checkpoint_local_bytes"
	TotalBytesMetric       = "shardfence_sidecar_checkpoint_total_bytes"
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
	// barriers counts read barriers by how they ended (local: inside the
	// lease; store: proven by a fence key read; fenced; error);
	// barrierReads the fence key reads they sent (shared by concurrent
	// barriers).
	barriers     *prometheus.CounterVec
	barrierReads prometheus.Counter

	cacheHits        prometheus.Counter
	cacheMisses      prometheus.Counter
	cacheCorrupt     prometheus.Counter
	cacheWriteErrors prometheus.Counter
	fetchLatency     prometheus.Histogram
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
		barriers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: BarriersMetric,
			Help: "Read barriers by result: local (inside the lease), store (proven by a fence key read), fenced, error."}, []string{"result"}),
		barrierReads: prometheus.NewCounter(prometheus.CounterOpts{Name: BarrierReadsMetric,
			Help: "Fence key reads sent for read barriers (concurrent barriers share one)."}),
	}
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{Name: CacheHitsMetric,
		Help: "ReadCheckpointFile blocks served from a local copy or the block cache."})
	m.cacheMisses = prometheus.NewCounter(prometheus.CounterOpts{Name: CacheMissesMetric,
		Help: "ReadCheckpointFile blocks fetched from the store on demand."})
	m.cacheCorrupt = prometheus.NewCounter(prometheus.CounterOpts{Name: CacheCorruptMetric,
		Help: "Cached blocks that failed their checksum and were fetched again."})
	m.cacheWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: CacheWriteErrorsMetric,
		Help: "Blocks the cache could not store (disk full or unwritable); they were served from memory."})
	m.fetchLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: FetchLatencyMetric,
		Help:    "Time to fetch one checkpoint block from the store on demand, retries included.",
		Buckets: prometheus.ExponentialBucketsRange(0.0005, 30, 20)})
	if reg != nil {
		reg.MustRegister(m.appends, m.ackedOps, m.ackLatency, m.fenced, m.hydration, m.opens, m.errors, m.barriers, m.barrierReads, &writerCollector{s: s},
			m.cacheHits, m.cacheMisses, m.cacheCorrupt, m.cacheWriteErrors, m.fetchLatency)
	}
	return m
}

var (
	syncsDesc        = prometheus.NewDesc(SyncsMetric, "Translog syncs of the shards open now.", []string{"shard"}, nil)
	syncedOpsDesc    = prometheus.NewDesc(SyncedOpsMetric, "Ops written by the syncs of the shards open now.", []string{"shard"}, nil)
	casDesc          = prometheus.NewDesc(CASWritesMetric, "Fence CAS writes sent by syncs of the shards open now.", []string{"shard"}, nil)
	leaseSkipsDesc   = prometheus.NewDesc(LeaseSkipsMetric, "Syncs acknowledged inside the lease without a CAS.", []string{"shard"}, nil)
	checksDesc       = prometheus.NewDesc(FenceChecksMetric, "Fence key reads of create-only writers of the shards open now.", []string{"shard"}, nil)
	observedDesc     = prometheus.NewDesc(ObservedMetric, "Syncs an observe-mode writer acknowledged that per-sync fencing would have failed.", []string{"shard"}, nil)
	openDesc         = prometheus.NewDesc(OpenShardsMetric, "Shards open on this sidecar, by state.", []string{"state"}, nil)
	retriesDesc      = prometheus.NewDesc(StoreRetriesMetric, "Store errors the syncs of the shards open now retried.", []string{"shard"}, nil)
	retryingDesc     = prometheus.NewDesc(RetryingMetric, "How long the shard's syncs have been retrying store errors (0: they are not).", []string{"shard"}, nil)
	backlogBytesDesc = prometheus.NewDesc(BacklogBytesMetric, "Bytes of ops after the shard's newest checkpoint: what a takeover replays.", []string{"shard"}, nil)
	backlogGensDesc  = prometheus.NewDesc(BacklogGensMetric, "Generations after the shard's newest checkpoint: what a takeover replays.", []string{"shard"}, nil)
	lastSyncDesc     = prometheus.NewDesc(LastSyncMetric, "Unix time of the shard's last acknowledged sync (0: none yet).", []string{"shard"}, nil)
	stalledDesc      = prometheus.NewDesc(StalledMetric, "1 while the shard's syncs have been retrying store errors for longer than --stall-after.", []string{"shard"}, nil)
	partialDesc      = prometheus.NewDesc(LocalityMetric, "1 while a warm-opened shard is partial (checkpoint files read from the store), 0 once full.", []string{"shard"}, nil)
	localDesc        = prometheus.NewDesc(LocalBytesMetric, "Checkpoint bytes of a warm-opened shard copied locally.", []string{"shard"}, nil)
	totalDesc        = prometheus.NewDesc(TotalBytesMetric, "Checkpoint bytes of a warm-opened shard.", []string{"shard"}, nil)
	cacheBytesDesc   = prometheus.NewDesc(CacheBytesMetric, "Bytes held by the block cache.", nil, nil)
)

// writerCollector reads the open writers' counters at scrape time.
type writerCollector struct{ s *Server }

func (c *writerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{syncsDesc, syncedOpsDesc, casDesc, leaseSkipsDesc, checksDesc, observedDesc, openDesc, retriesDesc, retryingDesc, lastSyncDesc, stalledDesc, partialDesc, localDesc, totalDesc, cacheBytesDesc, backlogBytesDesc, backlogGensDesc} {
		ch <- d
	}
}

func (c *writerCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[ShardState]int{}
	for _, sh := range c.s.reg.all() {
		st := sh.status()
		states[st.State]++
		if st.State == ShardOpen {
			ch <- prometheus.MustNewConstMetric(backlogBytesDesc, prometheus.GaugeValue, float64(st.ReplayBacklogBytes), sh.name)
			ch <- prometheus.MustNewConstMetric(backlogGensDesc, prometheus.GaugeValue, float64(st.ReplayBacklogGens), sh.name)
		}
		if ws := sh.warmShard(); ws != nil {
			wst := ws.stats()
			partial := 0.0
			if wst.Locality == LocalityPartial {
				partial = 1
			}
			ch <- prometheus.MustNewConstMetric(partialDesc, prometheus.GaugeValue, partial, sh.name)
			ch <- prometheus.MustNewConstMetric(localDesc, prometheus.GaugeValue, float64(wst.BytesLocal), sh.name)
			ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(wst.BytesTotal), sh.name)
		}
		w := sh.writer()
		if w == nil {
			continue
		}
		ws := w.Stats()
		ch <- prometheus.MustNewConstMetric(syncsDesc, prometheus.CounterValue, float64(ws.Syncs), sh.name)
		ch <- prometheus.MustNewConstMetric(syncedOpsDesc, prometheus.CounterValue, float64(ws.Ops), sh.name)
		ch <- prometheus.MustNewConstMetric(casDesc, prometheus.CounterValue, float64(ws.CASWrites), sh.name)
		ch <- prometheus.MustNewConstMetric(leaseSkipsDesc, prometheus.CounterValue, float64(ws.LeaseSkips), sh.name)
		ch <- prometheus.MustNewConstMetric(checksDesc, prometheus.CounterValue, float64(ws.FenceChecks), sh.name)
		ch <- prometheus.MustNewConstMetric(observedDesc, prometheus.CounterValue, float64(ws.FencingObserved), sh.name)
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
	if c := c.s.warmCache(); c != nil {
		used, _ := c.usage()
		ch <- prometheus.MustNewConstMetric(cacheBytesDesc, prometheus.GaugeValue, float64(used))
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(n), st.String())
	}
}
