package master

import (
	"context"
	"errors"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// feed records what WatchShards sent.
type feed struct {
	msgs chan feedMsg
}

type feedMsg struct {
	routes   []*Route
	snapshot bool
}

func watchRoutes(t *testing.T, m *Master, shards ...string) *feed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &feed{msgs: make(chan feedMsg, 100)}
	go func() {
		_ = m.WatchShards(ctx, shards, func(routes []*Route, snapshot bool) error {
			f.msgs <- feedMsg{routes, snapshot}
			return nil
		})
	}()
	return f
}

// next waits for a message whose route of shard satisfies ok.
func (f *feed) next(t *testing.T, what, shard string, ok func(*Route) bool) *Route {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case msg := <-f.msgs:
			for _, r := range msg.routes {
				if r.GetShard() == shard && ok(r) {
					return r
				}
			}
		case <-deadline:
			t.Fatalf("the feed never said %s", what)
		}
	}
}

// The routing feed: a snapshot first, then each change the log made
// durable: a new shard (assigned), its owner reporting it open, a new term
// on another node after the owner went offline, a node's new address, a
// shard leaving the table.
func TestRoutingFeedFollowsTheTable(t *testing.T) {
	m, clk := newTestMaster(t, liveCfg(true), Options{Journal: &memJournal{}})
	for _, n := range []string{"a", "b"} {
		register(t, m, n)
	}
	assign(t, m, "s0", "a", true, false)
	f := watchRoutes(t, m)
	first := <-f.msgs
	if !first.snapshot || len(first.routes) != 1 || first.routes[0].GetShard() != "s0" || first.routes[0].GetState() != ShardAssigned || first.routes[0].GetAddr() != "http://a" {
		t.Fatalf("the first message is not the table: %+v", first)
	}
	assign(t, m, "s1", "a", true, false)
	f.next(t, "s1 assigned to a", "s1", func(r *Route) bool { return r.GetNode() == "a" && r.GetState() == ShardAssigned && r.GetTerm() == 1 })
	a1 := row(t, m, "s1")
	report(t, m, "a", a1, a1.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	f.next(t, "s1 open on a", "s1", func(r *Route) bool { return r.GetState() == ShardOpen && r.GetAddr() == "http://a" })
	// a goes offline: s1 moves to b at term 2, assigned until b reports.
	m.CheckLiveness(context.Background())
	keepAlive(t, m, clk, 30*time.Second, "b")
	r := f.next(t, "s1 at term 2 on b", "s1", func(r *Route) bool { return r.GetTerm() == 2 })
	if r.GetNode() != "b" || r.GetAddr() != "http://b" || r.GetState() != ShardAssigned {
		t.Fatalf("s1 after the takeover: %+v", r)
	}
	b2 := row(t, m, "s1")
	report(t, m, "b", b2, b2.GetAllocation(), masterv1.ShardReport_SHARD_REPORT_OPEN, nil)
	f.next(t, "s1 open on b", "s1", func(r *Route) bool { return r.GetState() == ShardOpen && r.GetNode() == "b" })
	// b registers a new address, and its application's: its shards'
	// routes follow.
	if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "b", Addr: "http://b2", AppAddr: "http://app-b:8080", Store: "s3://b/p", Fencing: true, Session: "b-1"}); err != nil {
		t.Fatal(err)
	}
	f.next(t, "s1's new addresses", "s1", func(r *Route) bool { return r.GetAddr() == "http://b2" && r.GetAppAddr() == "http://app-b:8080" })
	if err := m.UnassignShard(context.Background(), "s1"); err != nil {
		t.Fatal(err)
	}
	f.next(t, "s1 removed", "s1", func(r *Route) bool { return r.GetRemoved() })
	// A feed of named shards sends only those.
	g := watchRoutes(t, m, "s0")
	if msg := <-g.msgs; len(msg.routes) != 1 || msg.routes[0].GetShard() != "s0" {
		t.Fatalf("a feed of s0 sent %+v", msg.routes)
	}
	if err := m.WatchShards(context.Background(), []string{"bad/name"}, nil); err == nil {
		t.Fatal("a feed of an invalid shard id was accepted")
	}
}

// The routing feed publishes node addresses to clients: only an http(s)
// URL of a host, without credentials, path or query, is registered.
func TestRegisterNodeRefusesAddressesClientsMustNotFollow(t *testing.T) {
	m, _ := newTestMaster(t, liveCfg(true), Options{Journal: &memJournal{}})
	for _, addr := range []string{"", "javascript:alert(1)", "ftp://h:1", "http://user:pw@h:1", "http://h:1/x", "http://h:1?q=1", "http://:80", "h:1"} {
		_, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "n", Addr: addr, Store: "s3://b", Fencing: true, Session: "s"})
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("RegisterNode with address %q: %v, want invalid argument", addr, err)
		}
	}
	for _, addr := range []string{"http://10.0.0.1:7400", "https://sidecar.example:7400/", "http://[::1]:7400"} {
		if _, err := m.RegisterNode(context.Background(), NodeRegistration{Name: "n", Addr: addr, Store: "s3://b", Fencing: true, Session: "s"}); err != nil {
			t.Errorf("RegisterNode with address %q: %v", addr, err)
		}
	}
}
