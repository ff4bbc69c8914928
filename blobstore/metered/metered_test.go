package metered_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/blobstore/metered"
)

func TestCountsByKindAndOutcome(t *testing.T) {
	ctx := t.Context()
	// faulty underneath produces the retryable outcomes no healthy store
	// gives on demand.
	f := faulty.New(mem.New(), 1)
	m := metered.New(f.Container, "shard-a")
	other := metered.New(mem.New(), "shard-b")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m, other)

	tok, err := m.Put(ctx, "k", []byte("12345"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_, _ = m.Get(ctx, "missing")
	_, _ = m.CreateIfAbsent(ctx, "k", []byte("x"))
	if _, err := m.CompareAndSwap(ctx, "k", tok, []byte("123")); err != nil {
		t.Fatal(err)
	}
	_, _ = m.CompareAndSwap(ctx, "k", tok, []byte("x")) // stale
	_, _ = m.Stat(ctx, "a//b")
	_, _ = m.List(ctx, "", "", 10)
	f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: faulty.Conflict, Times: 1})
	f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpDelete), Fault: faulty.LostResponse, Times: 1})
	f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpDeleteIfMatch), Fault: faulty.Unavailable, Times: 1})
	_, _ = m.CompareAndSwap(ctx, "k", tok, []byte("x"))
	_ = m.Delete(ctx, "k")
	_ = m.DeleteIfMatch(ctx, "k", tok)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = m.Get(cancelled, "k")
	if _, err := other.Put(ctx, "k", []byte("b")); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP shardfence_blobstore_requests_total Object-store requests by operation and outcome.
# TYPE shardfence_blobstore_requests_total counter
shardfence_blobstore_requests_total{op="CompareAndSwap",outcome="conflict",store="shard-a"} 1
shardfence_blobstore_requests_total{op="CompareAndSwap",outcome="ok",store="shard-a"} 1
shardfence_blobstore_requests_total{op="CompareAndSwap",outcome="precondition_failed",store="shard-a"} 1
shardfence_blobstore_requests_total{op="CreateIfAbsent",outcome="already_exists",store="shard-a"} 1
shardfence_blobstore_requests_total{op="Delete",outcome="ambiguous",store="shard-a"} 1
shardfence_blobstore_requests_total{op="DeleteIfMatch",outcome="unavailable",store="shard-a"} 1
shardfence_blobstore_requests_total{op="Get",outcome="canceled",store="shard-a"} 1
shardfence_blobstore_requests_total{op="Get",outcome="not_found",store="shard-a"} 1
shardfence_blobstore_requests_total{op="Get",outcome="ok",store="shard-a"} 1
shardfence_blobstore_requests_total{op="List",outcome="ok",store="shard-a"} 1
shardfence_blobstore_requests_total{op="Put",outcome="ok",store="shard-a"} 1
shardfence_blobstore_requests_total{op="Put",outcome="ok",store="shard-b"} 1
shardfence_blobstore_requests_total{op="Stat",outcome="invalid_key",store="shard-a"} 1
# HELP shardfence_blobstore_body_bytes_total Object body bytes of successful writes (direction=write) and reads (direction=read).
# TYPE shardfence_blobstore_body_bytes_total counter
shardfence_blobstore_body_bytes_total{direction="read",store="shard-a"} 5
shardfence_blobstore_body_bytes_total{direction="write",store="shard-a"} 8
shardfence_blobstore_body_bytes_total{direction="read",store="shard-b"} 0
shardfence_blobstore_body_bytes_total{direction="write",store="shard-b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metered.RequestsMetric, metered.BytesMetric); err != nil {
		t.Error(err)
	}

	// One latency series per op and store, each counting that op's calls.
	if n, err := testutil.GatherAndCount(reg, metered.LatencyMetric); err != nil || n != 2*int(blobstore.NumOps) {
		t.Errorf("latency series = %d (%v), want %d ops x 2 stores", n, err, blobstore.NumOps)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]uint64{}
	for _, fam := range fams {
		if fam.GetName() != metered.LatencyMetric {
			continue
		}
		for _, mt := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			samples[labels["store"]+"/"+labels["op"]] = mt.GetHistogram().GetSampleCount()
		}
	}
	for key, want := range map[string]uint64{"shard-a/Get": 3, "shard-a/CompareAndSwap": 3, "shard-a/Put": 1, "shard-b/Put": 1, "shard-b/Get": 0} {
		if samples[key] != want {
			t.Errorf("latency samples for %s = %d, want %d", key, samples[key], want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %+v", err, problems)
	}

	s := m.Snapshot()
	wantSnap := metered.Snapshot{Get: 3, Stat: 1, Put: 1, CreateIfAbsent: 1, CompareAndSwap: 3, Delete: 1, DeleteIfMatch: 1, List: 1, Errors: 8, BytesWritten: 8, BytesRead: 5}
	if s != wantSnap {
		t.Errorf("Snapshot = %+v\nwant       %+v", s, wantSnap)
	}
	if s.Requests() != 12 || s.Writes() != 5 {
		t.Errorf("Requests() = %d, Writes() = %d; want 12 and 5", s.Requests(), s.Writes())
	}
	if _, err := m.Get(ctx, "missing"); err == nil {
		t.Fatal("Get of a missing key succeeded")
	}
	if d := m.Snapshot().Sub(s); d != (metered.Snapshot{Get: 1, Errors: 1}) {
		t.Errorf("delta after one failed Get = %+v", d)
	}
}

func TestPassesThroughUnchanged(t *testing.T) {
	ctx := t.Context()
	inner := mem.New()
	m := metered.New(inner, "x")
	if m.String() != inner.String() || m.Capabilities() != inner.Capabilities() || m.Inner() != inner {
		t.Errorf("wrapper changes the store's identity or capabilities")
	}
	tok, err := m.Put(ctx, "k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := inner.Get(ctx, "k")
	if err != nil || obj.Token != tok || string(obj.Body) != "v" {
		t.Errorf("inner store holds %+v (%v) after Put through the wrapper", obj, err)
	}
}

// TestConcurrentUseAndScrape is for the race detector: scrapes run while
// requests are counted, and no count is lost.
func TestConcurrentUseAndScrape(t *testing.T) {
	ctx := t.Context()
	m := metered.New(mem.New(), "race")
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				_, _ = m.Put(ctx, fmt.Sprintf("k%d-%d", w, i), []byte("v"))
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if s := m.Snapshot(); s.Put != 400 || s.BytesWritten != 400 {
		t.Errorf("after 400 concurrent Puts of 1 byte: %+v", s)
	}
}

// BenchmarkOverhead prints what metering adds to a request on the in-memory
// store, the cheapest a request can be.
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		c    *blobstore.Container
	}{{"mem", mem.New()}, {"metered-mem", metered.New(mem.New(), "bench").Container}} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := tc.c.Put(ctx, "k", []byte("v")); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := tc.c.Stat(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A stream counts as one GetRange request and its bytes as they are read.
func TestCountsStreamsAndTheirBytes(t *testing.T) {
	ctx := t.Context()
	m := metered.New(mem.New(), "s")
	if _, err := m.Put(ctx, "k", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	before := m.Snapshot()
	rc, _, err := m.NewRangeReader(ctx, "k", 2, 5, "")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := rc.Read(buf); err != nil {
		t.Fatal(err)
	}
	mid := m.Snapshot().Sub(before)
	rest, err := io.ReadAll(rc)
	if err != nil || string(buf)+string(rest) != "23456" {
		t.Fatalf("stream read %q%q (%v)", buf, rest, err)
	}
	_ = rc.Close()
	d := m.Snapshot().Sub(before)
	if mid.GetRange != 1 || mid.BytesRead != 3 || d.GetRange != 1 || d.BytesRead != 5 || d.Requests() != 1 {
		t.Errorf("after 3 bytes: %+v; after the stream: %+v; want one GetRange, 3 then 5 bytes read", mid, d)
	}
}
