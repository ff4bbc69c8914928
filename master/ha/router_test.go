package ha

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/sidecar/agent"
)

// servedSidecar is a sidecar with its agent, served over HTTP.
type servedSidecar struct {
	srv    *sidecar.Server
	hs     *httptest.Server
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *servedSidecar) kill() {
	s.cancel()
	<-s.done
	s.hs.CloseClientConnections()
	s.hs.Close()
	_ = s.srv.Shutdown(context.Background())
}

// A client that knows only the masters routes appends and reads to a shard
// through a sidecar failover and a master failover, with no polling of its
// own: the routing feed names each new owner, and the router follows the
// elected master's feed. Every acknowledged op is read back once.
func TestRouterFollowsShardAndMasterFailovers(t *testing.T) {
	store, shards := mem.New(), mem.New()
	const et = 600 * time.Millisecond
	live := master.LivenessConfig{ActiveTTL: 300 * time.Millisecond, SuspicionTTL: 300 * time.Millisecond, MonitorInterval: 20 * time.Millisecond}
	masters, urls := serveMasters(t, store, et, live)
	sidecars := map[string]*servedSidecar{}
	for _, name := range []string{"a", "b"} {
		srv, err := sidecar.New(context.Background(), shards, sidecar.Options{Node: name})
		if err != nil {
			t.Fatal(err)
		}
		// The client's append streams need HTTP/2 (h2c here, as serve does).
		hs := httptest.NewUnstartedServer(srv.Handler(sidecar.HandlerOptions{}))
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetHTTP1(true)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
		ag, err := agent.New(agent.Options{Server: srv, Node: name, Addr: hs.URL, Store: "mem://shards", Masters: urls})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s := &servedSidecar{srv: srv, hs: hs, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(s.done); _ = ag.Run(ctx) }()
		sidecars[name] = s
		t.Cleanup(func() {
			select {
			case <-s.done:
			default:
				s.kill()
			}
		})
	}
	m := primary(t, masters[0].node)
	waitFor(t, "both sidecars registered", func() bool { return len(m.Nodes()) == 2 })
	if _, err := m.AssignShard(context.Background(), master.AssignRequest{Shard: "s1", Node: "a", AutoRestore: true}); err != nil {
		t.Fatal(err)
	}

	r, err := client.NewRouter(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var acked []string
	appendN := func(n int) {
		t.Helper()
		for range n {
			op := fmt.Sprintf("op-%d", len(acked))
			if _, err := r.Append(ctx, "s1", []byte(op)); err != nil {
				if client.IsOutcomeUnknown(err) {
					continue // not counted: it may or may not be there
				}
				t.Fatalf("append %s: %v", op, err)
			}
			acked = append(acked, op)
		}
	}
	appendN(20)
	if rt, _ := r.Route(ctx, "s1"); rt.Node != "a" || rt.Term != 1 {
		t.Fatalf("route of s1: %+v", rt)
	}
	// The owner's sidecar dies: the router waits for the feed to name b.
	sidecars["a"].kill()
	appendN(20)
	if rt, _ := r.Route(ctx, "s1"); rt.Node != "b" || rt.Term != 2 {
		t.Fatalf("route of s1 after a died: %+v", rt)
	}
	// The primary master dies: the router follows the elected one.
	masters[0].stop(t)
	masters[0].srv.CloseClientConnections()
	masters[0].srv.Close()
	appendN(20)
	waitFor(t, "the router on the elected master's feed", func() bool {
		for _, s := range masters[1:] {
			if _, err := s.Serving(); err == nil {
				return true
			}
		}
		return false
	})
	appendN(10)
	seen := map[string]int{}
	if err := r.Read(ctx, "s1", 0, 0, func(b client.Batch) error {
		for _, op := range b.Ops {
			seen[string(op)]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, op := range acked {
		if seen[op] != 1 {
			t.Fatalf("acknowledged op %s read back %d times", op, seen[op])
		}
	}
	t.Logf("%d acknowledged ops through a sidecar failover and a master failover, each read back once", len(acked))
}
