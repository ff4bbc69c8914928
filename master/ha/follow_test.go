package ha

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/sidecar/agent"
)

// servedNode is an electing master served over HTTP, advertising its URL.
type servedNode struct {
	*node
	srv *httptest.Server
}

// serveMasters starts m1 (primary) and the standbys m2 and m3 over store,
// electing at timeout et, each served over HTTP, and returns them and their
// URLs once m1 serves.
func serveMasters(t *testing.T, store *blobstore.Container, et time.Duration, live master.LivenessConfig) ([]*servedNode, []string) {
	t.Helper()
	var masters []*servedNode
	var urls []string
	for i, name := range []string{"m1", "m2", "m3"} {
		mux := http.NewServeMux()
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		n := start(t, store, i > 0, func(o *Options) {
			o.Node, o.Advertise, o.ElectionTimeout, o.ElectionSeed = name, srv.URL, et, uint64(i+1)
			o.Config.Liveness = live
		})
		n.Mount(mux)
		masters = append(masters, &servedNode{node: n, srv: srv})
		urls = append(urls, srv.URL)
	}
	primary(t, masters[0].node)
	return masters, urls
}

// A sidecar that knows every master follows an elected primary by itself:
// it registers with the new one before it could be called offline (within
// its ping interval on a quiet machine), reports its
// shards again (the new master shows them open, not assigned), and a
// master failover moves no shard of a node that keeps running, at the
// shortest client TTLs (1 s active + 1 s suspected).
func TestSidecarsFollowAnElectedMasterAndKeepTheirShards(t *testing.T) {
	store := mem.New()
	const et = 600 * time.Millisecond
	live := master.LivenessConfig{ActiveTTL: time.Second, SuspicionTTL: time.Second, MonitorInterval: 20 * time.Millisecond}
	masters, urls := serveMasters(t, store, et, live)

	shards := mem.New()
	srv, err := sidecar.New(context.Background(), shards, sidecar.Options{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	// The sidecar lists the masters in an order that starts with a
	// standby: it finds the primary anyway.
	ag, err := agent.New(agent.Options{Server: srv, Node: "a", Addr: "http://a", Store: "mem://shards", Masters: []string{urls[2], urls[1], urls[0]}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = ag.Run(ctx) }()
	defer func() { cancel(); <-agentDone }()
	waitFor(t, "the sidecar to register with the primary", func() bool { st := ag.Status(); return st.Registered && st.Master == urls[0] })
	m := primary(t, masters[0].node)
	if _, err := m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}
	openOn := func(m *master.Master) bool {
		info, err := m.ShardInfo("s1")
		return err == nil && info.State == master.ShardOpen && info.Assignment.GetNode() == "a"
	}
	waitFor(t, "s1 open on the first primary", func() bool { return openOn(m) })

	// The primary dies: its process stops and its address refuses.
	masters[0].stop(t)
	masters[0].srv.CloseClientConnections()
	masters[0].srv.Close()
	var np *servedNode
	waitFor(t, "a standby to be elected", func() bool {
		for _, s := range masters[1:] {
			if _, err := s.Serving(); err == nil {
				np = s
				return true
			}
		}
		return false
	})
	elected := time.Now()
	waitFor(t, "the sidecar to register with the elected master", func() bool { st := ag.Status(); return st.Registered && st.Master == np.srv.URL })
	// Its ping interval is 1 s; what must hold is that it is back before
	// the elected master could call it offline (active + suspected TTLs),
	// which would move its shard. The time itself is logged, not judged:
	// on a loaded machine a poll can miss a ping.
	took := time.Since(elected)
	t.Logf("the sidecar reached the elected master %v after its election", took)
	if limit := live.ActiveTTL + live.SuspicionTTL; took > limit {
		t.Errorf("the sidecar reached the elected master %v after its election, past the %v after which it would be offline", took, limit)
	}
	m2 := primary(t, np.node)
	waitFor(t, "s1 shown open on the elected master (the node reported again)", func() bool { return openOn(m2) })
	// Two whole TTLs later, nothing moved.
	time.Sleep(2*live.ActiveTTL + 2*live.SuspicionTTL)
	info, err := m2.ShardInfo("s1")
	if err != nil || info.Assignment.GetTerm() != 1 || info.Assignment.GetNode() != "a" || info.State != master.ShardOpen {
		t.Fatalf("s1 after the master failover: %+v %v (it must not move: its node kept running)", info, err)
	}
	for _, n := range m2.Nodes() {
		if n.Name == "a" && n.State != master.ClientActive {
			t.Fatalf("node a is %s after the master failover", n.State)
		}
	}
}
