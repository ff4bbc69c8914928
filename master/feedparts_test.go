package master

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
)

// sendRoutes splits a snapshot or change into parts of at most the limit
// (a route over it alone), the first carrying snapshot, all but the last
// more, and nothing lost, reordered or repeated.
func TestSendRoutesParts(t *testing.T) {
	route := func(i, pad int) *Route {
		return &Route{Shard: fmt.Sprintf("s%05d-%s", i, strings.Repeat("x", pad)), Term: int64(i + 1), Node: "n", State: ShardOpen}
	}
	for _, tc := range []struct {
		name   string
		routes []*Route
		limit  int
		parts  int
	}{
		{"empty", nil, 1000, 1},
		{"one small", []*Route{route(0, 10)}, 1000, 1},
		{"one over the limit", []*Route{route(0, 5000)}, 1000, 1},
		{"fits exactly", []*Route{route(0, 10), route(1, 10)}, 2 * (proto.Size(route(0, 10)) + 8), 1},
		{"one byte short", []*Route{route(0, 10), route(1, 10)}, 2*(proto.Size(route(0, 10))+8) - 1, 2},
		{"many", func() []*Route {
			var rs []*Route
			for i := range 1000 {
				rs = append(rs, route(i, i%97))
			}
			return rs
		}(), 4096, -1},
		{"a big one among small ones", []*Route{route(0, 10), route(1, 9000), route(2, 10)}, 1000, 3},
	} {
		for _, snapshot := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/snapshot=%v", tc.name, snapshot), func(t *testing.T) {
				var msgs []*masterv1.WatchShardsResponse
				if err := sendRoutes(tc.routes, snapshot, tc.limit, func(m *masterv1.WatchShardsResponse) error {
					msgs = append(msgs, m)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if tc.parts > 0 && len(msgs) != tc.parts {
					t.Fatalf("%d parts, want %d", len(msgs), tc.parts)
				}
				var got []*Route
				for i, m := range msgs {
					if m.GetSnapshot() != (snapshot && i == 0) {
						t.Fatalf("part %d of %d: snapshot %v", i, len(msgs), m.GetSnapshot())
					}
					if m.GetMore() != (i < len(msgs)-1) {
						t.Fatalf("part %d of %d: more %v", i, len(msgs), m.GetMore())
					}
					if size := proto.Size(&masterv1.WatchShardsResponse{Routes: m.GetRoutes()}); size > tc.limit && len(m.GetRoutes()) > 1 {
						t.Fatalf("part %d: %d bytes of %d routes over the %d-byte limit", i, size, len(m.GetRoutes()), tc.limit)
					}
					if len(m.GetRoutes()) == 0 && len(tc.routes) > 0 {
						t.Fatalf("part %d is empty", i)
					}
					got = append(got, m.GetRoutes()...)
				}
				if len(got) != len(tc.routes) {
					t.Fatalf("%d routes sent, %d given", len(got), len(tc.routes))
				}
				for i := range got {
					if got[i] != tc.routes[i] {
						t.Fatalf("route %d is %s, want %s", i, got[i].GetShard(), tc.routes[i].GetShard())
					}
				}
			})
		}
	}
}

// A stock gRPC client (grpc-go, default options: 4 MiB receive limit)
// follows the routing feed of a table whose snapshot is about 6 MiB: it
// arrives in parts, the last without more, and then a change.
func TestRoutingFeedLargeTableStockGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 6 MiB table")
	}
	m, _ := newTestMaster(t, liveCfg(true), Options{Journal: &memJournal{}})
	register(t, m, "a")
	const shards = 40000
	name := func(i int) string { return fmt.Sprintf("shard-%06d-%s", i, strings.Repeat("p", 113)) }
	for i := range shards {
		assign(t, m, name(i), "a", true, false)
	}
	mux := http.NewServeMux()
	mux.Handle(NewFleetHandlerFunc(func() (*Master, error) { return m, nil }))
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+masterv1connect.MasterFleetServiceName+"/WatchShards")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&masterv1.WatchShardsRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	parts := 0
	for {
		res := &masterv1.WatchShardsResponse{}
		if err := st.RecvMsg(res); err != nil {
			t.Fatalf("part %d of the snapshot: %v", parts, err)
		}
		if res.GetSnapshot() != (parts == 0) {
			t.Fatalf("part %d: snapshot %v", parts, res.GetSnapshot())
		}
		parts++
		for _, r := range res.GetRoutes() {
			seen[r.GetShard()] = true
		}
		if !res.GetMore() {
			break
		}
	}
	if len(seen) != shards || parts < 6 {
		t.Fatalf("the snapshot named %d of %d shards in %d parts", len(seen), shards, parts)
	}
	assign(t, m, "after", "a", true, false)
	for {
		res := &masterv1.WatchShardsResponse{}
		if err := st.RecvMsg(res); err != nil {
			t.Fatal(err)
		}
		if res.GetSnapshot() {
			t.Fatal("a second snapshot")
		}
		if len(res.GetRoutes()) == 1 && res.GetRoutes()[0].GetShard() == "after" {
			break
		}
	}
	t.Logf("%d shards in %d parts", shards, parts)
}
