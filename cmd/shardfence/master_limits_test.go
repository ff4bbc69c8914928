package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/reqlimit"
)

const masterPingPath = "/shardfence.master.v1.MasterService/Ping"

// masterRaw writes an HTTP/1.1 request head (and the start of a body) to
// the master and returns the connection, so a test can play a slow or
// lying client.
func masterRaw(t *testing.T, base string, contentLength int64, body string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", masterPingPath, u.Host, contentLength, body)
	return conn
}

// pingJSON posts a Connect JSON Ping whose client id is n bytes, gzipped
// when zip is set, and returns the status and body of the answer.
func pingJSON(t *testing.T, base string, n int, zip, chunked bool) (int, string) {
	t.Helper()
	var body bytes.Buffer
	msg := `{"clientId":"` + strings.Repeat("c", n) + `"}`
	if zip {
		zw := gzip.NewWriter(&body)
		_, _ = zw.Write([]byte(msg))
		_ = zw.Close()
	} else {
		body.WriteString(msg)
	}
	var r io.Reader = bytes.NewReader(body.Bytes())
	if chunked {
		r = io.MultiReader(r) // no length: chunked
	}
	req, err := http.NewRequest(http.MethodPost, base+masterPingPath, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if zip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The master bounds a request as the sidecar does: a body announced over
// --max-request-bytes is answered before any of it is sent, one without a
// length is stopped at the limit, and a small gzip body that would
// decompress past the limit (1 MiB on the wire used to become 1 GiB in
// the master's memory) is refused, all with resource_exhausted; a request
// within the limit goes through.
func TestMasterBoundsRequestBodies(t *testing.T) {
	base, _ := startMasterCmd(t, "--max-request-bytes", "1048576", "--max-concurrent-request-bytes", "4194304")

	conn := masterRaw(t, base, 40<<20, "")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a 40 MiB announcement without its body: %v", err)
	}
	res.Body.Close()
	if res.StatusCode < 400 {
		t.Fatalf("a 40 MiB announcement: status %d", res.StatusCode)
	}

	if code, body := pingJSON(t, base, 3<<20, false, true); code < 400 || !strings.Contains(body, "resource_exhausted") {
		t.Errorf("a chunked 3 MiB ping: %d %.300s", code, body)
	}
	if code, body := pingJSON(t, base, 3<<20, false, false); code < 400 || !strings.Contains(body, "resource_exhausted") || !strings.Contains(body, "--max-request-bytes") {
		t.Errorf("a 3 MiB ping: %d %.300s", code, body)
	}
	code, body := pingJSON(t, base, 64<<20, true, false)
	if code < 400 || !strings.Contains(body, "resource_exhausted") {
		t.Errorf("a gzip ping that decompresses to 64 MiB: %d %.300s", code, body)
	}
	if code, body := pingJSON(t, base, 1000, true, false); code != http.StatusOK {
		t.Errorf("a small gzip ping: %d %.300s", code, body)
	}
	if code, body := pingJSON(t, base, 1000, false, false); code != http.StatusOK {
		t.Errorf("a small ping: %d %.300s", code, body)
	}
}

// A client that sends its body too slowly is cut off after
// --body-read-timeout (200 trickling bodies used to hold the master's
// connections for as long as they trickled); a stream whose request
// arrived stays open past it; an idle connection is closed after
// --idle-timeout.
func TestMasterCutsSlowBodiesAndIdleConnections(t *testing.T) {
	base, _ := startMasterCmd(t, "--body-read-timeout", "300ms", "--idle-timeout", "1s",
		"--store", "file://"+t.TempDir(), "--cluster", "slow", "--snapshot-interval", "0")
	api := masterv1connect.NewMasterFleetServiceClient(http.DefaultClient, base)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var st *connect.ServerStreamForClient[masterv1.WatchShardsResponse]
	waitUntil(t, "the master serves the routing feed", func() bool {
		var err error
		st, err = api.WatchShards(ctx, connect.NewRequest(&masterv1.WatchShardsRequest{}))
		if err != nil {
			return false
		}
		if !st.Receive() {
			st.Close()
			return false
		}
		return true
	})
	ended := make(chan error, 1)
	go func() {
		for st.Receive() {
		}
		ended <- st.Err()
	}()

	conn := masterRaw(t, base, 1000, "0123456789")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := io.ReadAll(conn); reqlimit.IsTimeout(err) {
		t.Fatal("a client that stopped sending its body still holds the connection after 10s")
	}
	t.Logf("slow body cut after %v", time.Since(start))

	select {
	case err := <-ended:
		t.Fatalf("the routing feed ended while its client waited: %v", err)
	case <-time.After(time.Second):
	}

	// One keep-alive request, then nothing: the master closes the
	// connection once it was idle for --idle-timeout.
	u, _ := url.Parse(base)
	idle, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", u.Host)
	br := bufio.NewReader(idle)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection after 10s: %v, want it closed by the master", err)
	}
}

// The request bytes all calls hold at once are capped: while a routing
// feed whose request names 900 KiB of shards holds most of the cap, a
// sized call waits for room up to the body read timeout and one of
// unknown length does not wait; both are refused (MASTER_BUSY, nothing
// done) rather than given more memory. Once the feed ends, calls go
// through again.
func TestMasterCapsConcurrentRequestBytes(t *testing.T) {
	base, _ := startMasterCmd(t, "--max-request-bytes", "1048576", "--max-concurrent-request-bytes", "1048576", "--body-read-timeout", "1s",
		"--store", "file://"+t.TempDir(), "--cluster", "cap", "--snapshot-interval", "0")
	api := masterv1connect.NewMasterFleetServiceClient(http.DefaultClient, base)
	shards := make([]string, 9000)
	for i := range shards {
		shards[i] = fmt.Sprintf("%0100d", i)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var st *connect.ServerStreamForClient[masterv1.WatchShardsResponse]
	waitUntil(t, "the routing feed", func() bool {
		var err error
		st, err = api.WatchShards(ctx, connect.NewRequest(&masterv1.WatchShardsRequest{Shards: shards}))
		if err != nil {
			return false
		}
		if !st.Receive() {
			t.Logf("routing feed: %v", st.Err())
			st.Close()
			return false
		}
		return true
	})
	for _, chunked := range []bool{false, true} {
		code, body := pingJSON(t, base, 600<<10, false, chunked)
		if code < 400 || !strings.Contains(body, "MASTER_BUSY") {
			t.Errorf("a 600 KiB ping (chunked %v) while the feed holds the cap: %d %.300s", chunked, code, body)
		}
	}
	cancel()
	st.Close()
	waitUntil(t, "a 600 KiB ping once the feed ended", func() bool {
		code, _ := pingJSON(t, base, 600<<10, false, false)
		return code == http.StatusOK
	})
}

// Streams are capped per procedure: with --max-streams 3, a fourth
// routing feed is refused MASTER_BUSY before it holds anything, the
// nodes' assignment streams have their own cap, and a feed that ends
// frees its place.
func TestMasterCapsStreams(t *testing.T) {
	base, _ := startMasterCmd(t, "--max-streams", "3", "--store", "file://"+t.TempDir(), "--cluster", "streams", "--snapshot-interval", "0")
	api := masterv1connect.NewMasterFleetServiceClient(http.DefaultClient, base)
	open := func(ctx context.Context) (*connect.ServerStreamForClient[masterv1.WatchShardsResponse], error) {
		st, err := api.WatchShards(ctx, connect.NewRequest(&masterv1.WatchShardsRequest{}))
		if err != nil {
			return nil, err
		}
		if !st.Receive() {
			st.Close()
			return nil, st.Err()
		}
		return st, nil
	}
	var cancels []context.CancelFunc
	waitUntil(t, "three routing feeds", func() bool {
		for len(cancels) < 3 {
			ctx, cancel := context.WithCancel(t.Context())
			if _, err := open(ctx); err != nil {
				cancel()
				return false
			}
			cancels = append(cancels, cancel)
		}
		return true
	})
	_, err := open(t.Context())
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-streams") {
		t.Fatalf("a fourth routing feed: %v", err)
	}
	// Another procedure has its own cap: a node's assignment stream is
	// not refused for the routing feeds (it fails only for the unknown
	// session).
	wa, err := api.WatchAssignments(t.Context(), connect.NewRequest(&masterv1.WatchAssignmentsRequest{Node: "n1", Session: "s"}))
	if err == nil {
		for wa.Receive() {
		}
		err = wa.Err()
		wa.Close()
	}
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		t.Fatalf("an assignment stream refused for the routing feeds: %v", err)
	}
	cancels[0]()
	waitUntil(t, "a routing feed once one ended", func() bool {
		ctx, cancel := context.WithCancel(t.Context())
		cancels = append(cancels, cancel)
		_, err := open(ctx)
		return err == nil
	})
	for _, c := range cancels {
		c()
	}
}

// A stock gRPC client (grpc-go, default options) checks the master's
// health without the token, as probes do, and lists its API by server
// reflection, which needs the token.
func TestMasterGRPCHealthAndReflection(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("master-health-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startMasterCmd(t, "--auth-token-file", tok)
	u, _ := url.Parse(base)
	cc, err := grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName} {
		res, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v", svc, res.GetStatus(), err)
		}
	}
	if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 1<<20)}); status.Code(err) != codes.NotFound || len(err.Error()) > 2048 {
		t.Errorf("health of an unknown 1 MiB service name: %d-byte error, code %v", len(fmt.Sprint(err)), status.Code(err))
	}

	list := func(ctx context.Context) ([]string, error) {
		rc, err := reflectpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		// A server that refuses the stream at once may end it before
		// the request is sent: Send then says io.EOF and the status
		// comes from Recv, as grpc-go documents.
		if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		res, err := rc.Recv()
		if err != nil {
			return nil, err
		}
		var out []string
		for _, s := range res.GetListServicesResponse().GetService() {
			out = append(out, s.GetName())
		}
		return out, nil
	}
	if _, err := list(t.Context()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("reflection without the token: %v", err)
	}
	names, err := list(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer master-health-token-0123"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName, healthpb.Health_ServiceDesc.ServiceName} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("reflection lists %q, without %s", names, want)
		}
	}

	// A watcher hears the process stop serving when the master shuts down.
	w, err := hc.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: ""})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.Recv(); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch: %v, %v", res.GetStatus(), err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = stop() })
	res, err := w.Recv()
	if err == nil && res.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health watch during shutdown: %v", res.GetStatus())
	}
	wg.Wait()
}

// Every duration flag of the master has a range, and a tenant quota
// names its tenant: 1ns of liveness interval burned a core, and a lease
// TTL of 0 or 876000h, a negative snapshot interval or standby lag and a
// quota for the tenant "" were accepted.
func TestMasterFlagsAreBounded(t *testing.T) {
	for _, args := range [][]string{
		{"--liveness-interval", "1ns"},
		{"--liveness-interval", "2s"},
		{"--lease-ttl", "0"},
		{"--lease-ttl", "876000h"},
		{"--recovery-lease-ttl", "876000h"},
		{"--soft-pin-ttl", "100000h"},
		{"--snapshot-interval", "-1s"},
		{"--standby-max-lag", "-1s"},
		{"--standby-max-lag", "0"},
		{"--fence-check-interval", "-1s"},
		{"--eviction-interval", "0"},
		{"--tenant-quota", "=5"},
		{"--max-request-bytes", "0"},
		{"--max-request-bytes", "2097152", "--max-concurrent-request-bytes", "1048576"},
		{"--body-read-timeout", "1ms"},
		{"--body-read-timeout", "1h"},
		{"--idle-timeout", "0s"},
		{"--idle-timeout", "100h"},
		{"--max-streams", "0"},
		{"--max-streams", "-1"},
		{"--max-streams", "2000000"},
	} {
		var out, errOut syncBuffer
		if err := runMaster(t.Context(), append([]string{"--listen", "127.0.0.1:0"}, args...), &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
