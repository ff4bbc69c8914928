// Package metered is a blobstore middleware that counts requests by kind and
// outcome and records their latency, exported as Prometheus collectors. The
// protocol's cost is measured in requests (one CAS per sync, a LIST per
// claim), so benches read a cheap Snapshot of the counts as well.
package metered

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/blobstore"
)

// Outcome labels, in the words of the blobstore error classes.
type outcome uint8

const (
	outOK outcome = iota
	outNotFound
	outAlreadyExists
	outPreconditionFailed
	outConflict
	outUnavailable
	outAmbiguous
	outInvalidKey
	outTooLarge
	outUnsupported
	outCanceled
	outDeadlineExceeded
	outError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "not_found", "already_exists", "precondition_failed", "conflict", "unavailable", "ambiguous", "invalid_key", "too_large", "unsupported", "canceled", "deadline_exceeded", "error"}

// classify puts an error in one class. Ambiguity is checked first: an
// ambiguous timeout also matches context.DeadlineExceeded, and what matters
// to an operator is that the outcome was unknown.
func classify(err error) outcome {
	switch {
	case err == nil:
		return outOK
	case errors.Is(err, blobstore.ErrAmbiguous):
		return outAmbiguous
	case errors.Is(err, blobstore.ErrConflict):
		return outConflict
	case errors.Is(err, blobstore.ErrUnavailable):
		return outUnavailable
	case errors.Is(err, blobstore.ErrNotFound):
		return outNotFound
	case errors.Is(err, blobstore.ErrAlreadyExists):
		return outAlreadyExists
	case errors.Is(err, blobstore.ErrPreconditionFailed):
		return outPreconditionFailed
	case errors.Is(err, blobstore.ErrInvalidKey):
		return outInvalidKey
	case errors.Is(err, blobstore.ErrTooLarge):
		return outTooLarge
	case errors.Is(err, blobstore.ErrUnsupported):
		return outUnsupported
	case errors.Is(err, context.Canceled):
		return outCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return outDeadlineExceeded
	}
	return outError
}

// Container is a container whose calls are counted and timed; the embedded
// *blobstore.Container is what callers use as the store. It is a
// prometheus.Collector: register it, once, with the registry that should
// export it.
type Container struct {
	*blobstore.Container
	inner *blobstore.Container
	name  string

	requests [blobstore.NumOps][numOutcomes]atomic.Uint64
	written  atomic.Uint64
	read     atomic.Uint64
	latency  [blobstore.NumOps]prometheus.Histogram

	requestsDesc *prometheus.Desc
	bytesDesc    *prometheus.Desc
}

var _ prometheus.Collector = (*Container)(nil)

// Metric names, for dashboards and tests.
const (
	RequestsMetric = "shardfence_blobstore_requests_total"
	BytesMetric    = "shardfence_blobstore_body_bytes_total"
	LatencyMetric  = "shardfence_blobstore_request_duration_seconds"
)

// latencyBuckets span a local disk's sub-millisecond writes to a slow cloud
// request's tens of seconds.
var latencyBuckets = prometheus.ExponentialBucketsRange(0.0002, 30, 18)

// New wraps c; name is the store label on every metric (a shard's store, a
// bench's store), so several wrapped containers can share a registry.
func New(c *blobstore.Container, name string) *Container {
	m := &Container{
		inner: c,
		name:  name,
		requestsDesc: prometheus.NewDesc(RequestsMetric,
			"Object-store requests by operation and outcome.",
			[]string{"op", "outcome"}, prometheus.Labels{"store": name}),
		bytesDesc: prometheus.NewDesc(BytesMetric,
			"Object body bytes of successful writes (direction=write) and reads (direction=read).",
			[]string{"direction"}, prometheus.Labels{"store": name}),
	}
	for o := range blobstore.NumOps {
		m.latency[o] = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        LatencyMetric,
			Help:        "Object-store request latency by operation, whatever the outcome.",
			ConstLabels: prometheus.Labels{"store": name, "op": o.String()},
			Buckets:     latencyBuckets,
		})
	}
	m.Container = c.With("", m.observe)
	return m
}

// Describe implements prometheus.Collector.
func (c *Container) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requestsDesc
	ch <- c.bytesDesc
	for _, h := range c.latency {
		h.Describe(ch)
	}
}

// Collect implements prometheus.Collector. Only op/outcome pairs that
// occurred are exported, to keep a dozen outcomes per op from flooding a
// dashboard with zeros.
func (c *Container) Collect(ch chan<- prometheus.Metric) {
	for o := range blobstore.NumOps {
		for out := range numOutcomes {
			if n := c.requests[o][out].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(c.requestsDesc, prometheus.CounterValue, float64(n), o.String(), outcomeNames[out])
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.bytesDesc, prometheus.CounterValue, float64(c.written.Load()), "write")
	ch <- prometheus.MustNewConstMetric(c.bytesDesc, prometheus.CounterValue, float64(c.read.Load()), "read")
	for _, h := range c.latency {
		h.Collect(ch)
	}
}

// Snapshot is a point-in-time copy of the request counts, cheap enough to
// take around every bench iteration.
type Snapshot struct {
	Get, Stat, Put, CreateIfAbsent, CompareAndSwap, Delete, DeleteIfMatch, List uint64
	// GetRange counts the streams and ranges opened (GET-priced).
	GetRange uint64
	// Errors counts requests of any kind that returned an error, definite
	// answers such as not-found included.
	Errors uint64
	// BytesWritten and BytesRead count the bodies of successful writes and
	// reads, not protocol overhead.
	BytesWritten, BytesRead uint64
}

// Requests is the number of requests of every kind.
func (s Snapshot) Requests() uint64 {
	return s.Get + s.Stat + s.Put + s.CreateIfAbsent + s.CompareAndSwap + s.Delete + s.DeleteIfMatch + s.List + s.GetRange
}

// Writes is the number of requests that change the store (PUT-priced on
// every cloud): Put, CreateIfAbsent, CompareAndSwap.
func (s Snapshot) Writes() uint64 { return s.Put + s.CreateIfAbsent + s.CompareAndSwap }

// Sub returns the counts accumulated since an earlier snapshot.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	return Snapshot{
		Get: s.Get - earlier.Get, Stat: s.Stat - earlier.Stat, Put: s.Put - earlier.Put,
		CreateIfAbsent: s.CreateIfAbsent - earlier.CreateIfAbsent, CompareAndSwap: s.CompareAndSwap - earlier.CompareAndSwap,
		Delete: s.Delete - earlier.Delete, DeleteIfMatch: s.DeleteIfMatch - earlier.DeleteIfMatch, List: s.List - earlier.List,
		GetRange: s.GetRange - earlier.GetRange,
		Errors:   s.Errors - earlier.Errors, BytesWritten: s.BytesWritten - earlier.BytesWritten, BytesRead: s.BytesRead - earlier.BytesRead,
	}
}

// Snapshot returns the counts so far.
func (c *Container) Snapshot() Snapshot {
	var per [blobstore.NumOps]uint64
	var errs uint64
	for o := range blobstore.NumOps {
		for out := range numOutcomes {
			n := c.requests[o][out].Load()
			per[o] += n
			if out != outOK {
				errs += n
			}
		}
	}
	return Snapshot{
		Get: per[blobstore.OpGet], Stat: per[blobstore.OpStat], Put: per[blobstore.OpPut], CreateIfAbsent: per[blobstore.OpCreateIfAbsent],
		CompareAndSwap: per[blobstore.OpCompareAndSwap], Delete: per[blobstore.OpDelete], DeleteIfMatch: per[blobstore.OpDeleteIfMatch], List: per[blobstore.OpList],
		GetRange: per[blobstore.OpGetRange],
		Errors:   errs, BytesWritten: c.written.Load(), BytesRead: c.read.Load(),
	}
}

// Inner returns the wrapped container.
func (c *Container) Inner() *blobstore.Container { return c.inner }

// observe counts and times one call, and the body bytes a successful read
// or write moved.
func (c *Container) observe(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
	start := time.Now()
	res, err := next(ctx, call)
	c.latency[call.Op].Observe(time.Since(start).Seconds())
	c.requests[call.Op][classify(err)].Add(1)
	if err == nil {
		switch call.Op {
		case blobstore.OpGet:
			c.read.Add(uint64(len(res.Object.Body)))
		case blobstore.OpGetRange:
			// A stream's bytes count as they are read; its latency is
			// the time to open it (the first byte).
			res.Reader = &countingReader{rc: res.Reader, n: &c.read}
		case blobstore.OpPut, blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap:
			c.written.Add(uint64(len(call.Body)))
		}
	}
	return res, err
}

// countingReader adds the bytes read from a stream to a counter.
type countingReader struct {
	rc io.ReadCloser
	n  *atomic.Uint64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.n.Add(uint64(n))
	return n, err
}

func (r *countingReader) Close() error { return r.rc.Close() }
