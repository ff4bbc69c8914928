package fleetbench

import (
	"errors"
	"math"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/internal/harness/cost"
)

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"one node", Config{Nodes: 1, Shards: 10, LostShards: 1}, false},
		{"no shards", Config{Nodes: 2, Shards: 0, LostShards: 1}, false},
		{"no lost shard", Config{Nodes: 2, Shards: 10, LostShards: 0}, false},
		{"more lost than shards", Config{Nodes: 2, Shards: 10, LostShards: 11}, false},
		{"smallest", Config{Nodes: 2, Shards: 1, LostShards: 1}, true},
	} {
		got, err := tc.cfg.withDefaults()
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok %v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && (got.Registrations != 32 || got.Assigns != 16 || got.Progress == nil) {
			t.Errorf("%s: defaults %d registrations, %d assigns, progress %v", tc.name, got.Registrations, got.Assigns, got.Progress)
		}
	}
	got, _ := Config{Nodes: 2, Shards: 1, LostShards: 1, Registrations: 5, Assigns: 3}.withDefaults()
	if got.Registrations != 5 || got.Assigns != 3 {
		t.Errorf("set values replaced: %d registrations, %d assigns", got.Registrations, got.Assigns)
	}
}

func TestAssignRequest(t *testing.T) {
	for _, tc := range []struct {
		i, lost  int
		wantNode string
	}{
		{0, 3, "sim-00000"}, {2, 3, "sim-00000"}, {3, 3, ""}, {9, 3, ""},
	} {
		req := assignRequest(tc.i, tc.lost, "sim-00000")
		if req.GetNode() != tc.wantNode || req.GetShard() != shardName(tc.i) || !req.GetAutoRestore() || req.GetTakeover() != masterv1.TakeoverPoint_TAKEOVER_POINT_OFFLINE {
			t.Errorf("shard %d of %d lost: %v", tc.i, tc.lost, req)
		}
	}
}

func counter(name string, v float64, labels ...string) *dto.MetricFamily {
	m := &dto.Metric{Counter: &dto.Counter{Value: proto.Float64(v)}}
	for i := 0; i+1 < len(labels); i += 2 {
		m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(labels[i]), Value: proto.String(labels[i+1])})
	}
	return &dto.MetricFamily{Name: proto.String(name), Metric: []*dto.Metric{m}}
}

func gaugeFam(name string, v float64) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(v)}}}}
}

// scrapeOf is a master's /metrics with the given counters.
func scrapeOf(cpu, puts, lists, gets, written, appends, rss float64) map[string]*dto.MetricFamily {
	reqs := &dto.MetricFamily{Name: proto.String(metered.RequestsMetric)}
	for _, c := range []*dto.MetricFamily{counter("", puts, "op", "Put"), counter("", lists, "op", "List"), counter("", gets, "op", "Get")} {
		reqs.Metric = append(reqs.Metric, c.Metric...)
	}
	bytes := counter(metered.BytesMetric, written, "direction", "write")
	bytes.Metric = append(bytes.Metric, counter("", 1e9, "direction", "read").Metric...)
	return map[string]*dto.MetricFamily{
		"process_cpu_seconds_total":             counter("process_cpu_seconds_total", cpu),
		metered.RequestsMetric:                  reqs,
		metered.BytesMetric:                     bytes,
		"shardfence_master_oplog_appends_total": counter("shardfence_master_oplog_appends_total", appends),
		"process_resident_memory_bytes":         gaugeFam("process_resident_memory_bytes", rss),
		"go_memstats_heap_inuse_bytes":          gaugeFam("go_memstats_heap_inuse_bytes", rss/2),
		"go_goroutines":                         gaugeFam("go_goroutines", 40),
	}
}

// Over a 10 s window: both masters' requests add up, per hour; the
// pings, CPU and log are per second or hour; memory is the end's.
func TestSteadyFigures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s0 := sample{primary: scrapeOf(1, 100, 10, 50, 1e6, 20, 1<<20), standby: scrapeOf(0, 10, 0, 5, 0, 0, 1<<20), pings: 1000, pingErrs: 2, sessions: 5, at: t0}
	s1 := sample{primary: scrapeOf(3, 200, 30, 150, 2e6, 40, 64<<20), standby: scrapeOf(0.5, 20, 0, 10, 1e5, 0, 32<<20), pings: 6000, pingErrs: 3, sessions: 5, at: t0.Add(10 * time.Second)}
	var res Result
	steadyFigures(&res, s0, s1, cost.Price{PutPer1k: 0.005, GetPer1k: 0.0004})
	want := map[string][2]float64{
		"window s":          {res.Window.Seconds(), 10},
		"pings/s":           {res.PingsPerSec, 500},
		"ping errors":       {float64(res.PingErrors), 1},
		"registrations":     {float64(res.Registrations), 0},
		"CPU":               {res.CPU, 0.2},
		"standby CPU":       {res.StandbyCPU, 0.05},
		"PUT-class/h":       {res.PutPerHour, (100 + 20 + 10) * 360},
		"writes/h":          {res.WritesPerHour, (100 + 10) * 360},
		"GET-class/h":       {res.GetPerHour, (100 + 5) * 360},
		"bytes written/h":   {res.BytesPerHour, (1e6 + 1e5) * 360},
		"log generations/h": {res.LogGensPerHour, 20 * 360},
		"RSS":               {res.RSS, 64 << 20},
		"standby RSS":       {res.StandbyRSS, 32 << 20},
		"heap":              {res.Heap, 32 << 20},
		"USD/h":             {res.USDPerHour, 130*360*0.005/1000 + 105*360*0.0004/1000},
	}
	for name, gw := range want {
		if math.Abs(gw[0]-gw[1]) > 1e-9*math.Max(1, math.Abs(gw[1])) {
			t.Errorf("%s: %v, want %v", name, gw[0], gw[1])
		}
	}
}

func TestGaugeOfAMissingMetricIsNaN(t *testing.T) {
	if g := gauge(map[string]*dto.MetricFamily{}, "go_goroutines"); !math.IsNaN(g) {
		t.Errorf("gauge %v, want NaN", g)
	}
	if d := delta(nil, map[string]*dto.MetricFamily{"c": counter("c", 3)}, "c", nil); d != 3 {
		t.Errorf("delta from nothing %v, want 3", d)
	}
}

func info(shard, node string, term int64, alloc, state string) *masterv1.ShardInfo {
	return &masterv1.ShardInfo{State: state, Assignment: &masterv1.ShardAssignment{Shard: shard, Node: node, Term: term, Allocation: alloc}}
}

func TestOwnedBy(t *testing.T) {
	table := map[string]*masterv1.ShardInfo{
		"s2": info("s2", "lost", 1, "a", "open"), "s1": info("s1", "lost", 1, "a", "open"), "s3": info("s3", "other", 1, "a", "open"),
	}
	got := ownedBy(table, "lost")
	if len(got) != 2 || got[0] != "s1" || got[1] != "s2" {
		t.Errorf("ownedBy %v, want [s1 s2]", got)
	}
}

func TestApplyRoutesAndMoveCount(t *testing.T) {
	route := func(shard, node, state string, removed bool) *masterv1.ShardRoute {
		return &masterv1.ShardRoute{Shard: shard, Node: node, State: state, Removed: removed}
	}
	routes := map[string]*masterv1.ShardRoute{}
	names := []string{"s1", "s2", "s3"}
	steps := []struct {
		msg         *masterv1.WatchShardsResponse
		taken, open int
	}{
		{&masterv1.WatchShardsResponse{Snapshot: true, Routes: []*masterv1.ShardRoute{route("s1", "lost", "open", false), route("s2", "lost", "open", false), route("s3", "lost", "open", false)}}, 0, 0},
		{&masterv1.WatchShardsResponse{Routes: []*masterv1.ShardRoute{route("s1", "n2", "assigned", false)}}, 1, 0},
		{&masterv1.WatchShardsResponse{Routes: []*masterv1.ShardRoute{route("s1", "n2", "open", false), route("s2", "", "assigned", false)}}, 1, 1},
		{&masterv1.WatchShardsResponse{Routes: []*masterv1.ShardRoute{route("s2", "n3", "open", false), route("s3", "n3", "open", true)}}, 2, 2},
		// A snapshot drops what it does not name.
		{&masterv1.WatchShardsResponse{Snapshot: true, Routes: []*masterv1.ShardRoute{route("s3", "n4", "open", false)}}, 1, 1},
	}
	for i, st := range steps {
		applyRoutes(routes, st.msg)
		if taken, open := moveCount(names, routes, "lost"); taken != st.taken || open != st.open {
			t.Errorf("step %d: taken %d open %d, want %d %d", i, taken, open, st.taken, st.open)
		}
	}
}

func TestObserveMove(t *testing.T) {
	var res Result
	for i, st := range []struct {
		taken, open        int
		at                 time.Duration
		done               bool
		wantTaken, wantMov time.Duration
	}{
		{1, 0, 4 * time.Second, false, 0, 0},
		{3, 1, 5 * time.Second, false, 5 * time.Second, 0},
		{3, 2, 6 * time.Second, false, 5 * time.Second, 0}, // MoveTaken stays the first
		{3, 3, 7 * time.Second, true, 5 * time.Second, 7 * time.Second},
	} {
		done := observeMove(&res, st.taken, st.open, 3, st.at)
		if done != st.done || res.MoveTaken != st.wantTaken || res.Move != st.wantMov || res.MovedOpen != st.open {
			t.Errorf("look %d: done %v, taken at %v, moved at %v, open %d; want %v %v %v %d", i, done, res.MoveTaken, res.Move, res.MovedOpen, st.done, st.wantTaken, st.wantMov, st.open)
		}
	}
}

func TestSameOwnersAndMovedShards(t *testing.T) {
	before := map[string]*masterv1.ShardInfo{
		"s1": info("s1", "n1", 1, "a1", "open"),
		"s2": info("s2", "n2", 1, "a2", "open"),
		"s3": info("s3", "n3", 1, "a3", "open"),
		"s4": info("s4", "n4", 1, "a4", "open"),
	}
	after := map[string]*masterv1.ShardInfo{
		"s1": info("s1", "n1", 1, "a1", "open"), // the same
		"s2": info("s2", "n2", 1, "b2", "open"), // same node and term, new allocation
		"s3": info("s3", "n5", 2, "a5", "open"), // moved
		// s4 missing
	}
	if n := sameOwners(before, after); n != 1 {
		t.Errorf("sameOwners %d, want 1", n)
	}
	if n := movedShards(before, after); n != 2 {
		t.Errorf("movedShards %d, want 2 (s3 moved, s4 missing)", n)
	}
}

func TestTargets(t *testing.T) {
	r := &Result{ActiveTTL: 10 * time.Second, SuspicionTT: 20 * time.Second, Move: 31 * time.Second, Promote: 5 * time.Second}
	if limit, met := moveTarget(r); limit != 31*time.Second || !met {
		t.Errorf("move target %v %v, want 31s met", limit, met)
	}
	r.Move += time.Millisecond
	if _, met := moveTarget(r); met {
		t.Error("a move past detection + 1 s met the target")
	}
	if limit, met := promotionTarget(r, 3*time.Second); limit != 5*time.Second || !met {
		t.Errorf("promotion target %v %v, want 5s met", limit, met)
	}
	if _, met := promotionTarget(r, 2*time.Second); met {
		t.Error("a promotion past the election timeout + 2 s met the target")
	}
}

func TestIsNotPrimary(t *testing.T) {
	withReason := func(code connect.Code, reason string) error {
		ce := connect.NewError(code, errors.New(reason))
		d, err := connect.NewErrorDetail(&masterv1.ErrorDetail{Reason: reason})
		if err != nil {
			t.Fatal(err)
		}
		ce.AddDetail(d)
		return ce
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{withReason(connect.CodeUnavailable, "NOT_PRIMARY"), true},
		{withReason(connect.CodeUnavailable, "FENCED"), true},
		{withReason(connect.CodeUnavailable, "LOG_FAILED"), true},
		{withReason(connect.CodeUnavailable, "OVERLOADED"), false},
		{withReason(connect.CodeFailedPrecondition, "NOT_PRIMARY"), false},
		{connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), false},
	} {
		if got := isNotPrimary(tc.err); got != tc.want {
			t.Errorf("isNotPrimary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
