package sidecar

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/shardfence/shardfence/blobstore/metered"
)

func counterValue(t *testing.T, e *env, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				total += m.GetCounter().GetValue()
			case m.Histogram != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			case m.Gauge != nil:
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestMetricsCountAppendsSyncsAndStoreRequests(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	openShard(t, e.client, "m", 1, "a")
	for i := range 5 {
		if _, err := appendOps(t.Context(), e.client, "m", "op", strings.Repeat("y", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := appendOps(t.Context(), e.client, "nope", "x"); err == nil {
		t.Fatal("append to an unknown shard succeeded")
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{AppendsMetric, map[string]string{"result": "ok"}, 5},
		{AppendsMetric, map[string]string{"result": "not_open"}, 1},
		{AckedOpsMetric, nil, 10},
		{AckLatencyMetric, nil, 5},
		{SyncsMetric, map[string]string{"shard": "m"}, 5},
		{SyncedOpsMetric, map[string]string{"shard": "m"}, 10},
		{CASWritesMetric, map[string]string{"shard": "m"}, 5},
		{OpensMetric, map[string]string{"result": "ok"}, 1},
		{OpenShardsMetric, map[string]string{"state": "open"}, 1},
	} {
		if got := counterValue(t, e, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Fence CASes are store requests by kind and outcome.
	if got := counterValue(t, e, metered.RequestsMetric, map[string]string{"op": "CompareAndSwap", "outcome": "ok"}); got < 5 {
		t.Errorf("CAS ok requests = %v, want at least 5", got)
	}
}
