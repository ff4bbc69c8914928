package sidecar

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
)

// h2cServe serves srv's handler over h2c and HTTP/1.1 on loopback, as
// `shardfence serve` does, and returns the API's base URL and a client
// that speaks h2c (streams need HTTP/2).
func h2cServe(t *testing.T, srv *Server, ho HandlerOptions) (string, *http.Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(ho), ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		_ = hs.Close()
	})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return "http://" + ln.Addr().String(), &http.Client{Transport: tr}
}

// streamEnv is a sidecar (the production opener) served over h2c.
func streamEnv(t *testing.T, store *blobstore.Container, opts Options) (*Server, sidecarv1connect.SidecarServiceClient, string, *http.Client) {
	t.Helper()
	srv, err := New(t.Context(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	base, hc := h2cServe(t, srv, HandlerOptions{})
	return srv, sidecarv1connect.NewSidecarServiceClient(hc, base), base, hc
}

type appendStreamClient = connect.BidiStreamForClient[sidecarv1.AppendStreamRequest, sidecarv1.AppendStreamResponse]

func sendReq(t *testing.T, st *appendStreamClient, id uint64, shard string, ops ...string) {
	t.Helper()
	req := &sidecarv1.AppendStreamRequest{RequestId: id, Shard: shard}
	for _, o := range ops {
		req.Ops = append(req.Ops, []byte(o))
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("send request %d: %v", id, err)
	}
}

func recvResp(t *testing.T, st *appendStreamClient) *sidecarv1.AppendStreamResponse {
	t.Helper()
	r, err := st.Receive()
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return r
}

// endOf waits for the stream's end and returns its code and detail.
func endOf(t *testing.T, st *appendStreamClient) (connect.Code, *sidecarv1.ErrorDetail, error) {
	t.Helper()
	for {
		r, err := st.Receive()
		if err != nil {
			code, d := detailOf(t, err)
			return code, d, err
		}
		t.Fatalf("an answer (%v) where the stream should end", r)
	}
}

// One stream: answers in request order, a refused request does not end
// it, sequence numbers follow the requests, a request id that goes back
// ends it with the last admitted id, and another stream on the same
// connection goes on.
func TestAppendStreamAnswersInOrderRefusesAndEnds(t *testing.T) {
	srv, c, _, _ := streamEnv(t, mem.New(), Options{Limits: Limits{MaxOpBytes: 1024}})
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	st := c.AppendStream(t.Context())
	other := c.AppendStream(t.Context())
	sendReq(t, other, 1, "s", "other-1")
	sendReq(t, st, 3, "s", "a", "b")
	sendReq(t, st, 7, "", strings.Repeat("x", 2000)) // over --max-op-bytes
	sendReq(t, st, 9, "", "c")
	r1, r2, r3 := recvResp(t, st), recvResp(t, st), recvResp(t, st)
	if r1.GetRequestId() != 3 || r1.GetAck().GetCount() != 2 || r2.GetRequestId() != 7 || r2.GetRefused() == nil || r3.GetRequestId() != 9 || r3.GetAck() == nil {
		t.Fatalf("answers %v / %v / %v", r1, r2, r3)
	}
	if r := r2.GetRefused(); r.GetCode() != "invalid_argument" || r.GetDetail().GetReason() != "too_large" || !strings.Contains(r.GetMessage(), "max-op-bytes") {
		t.Errorf("refusal %v", r)
	}
	if r3.GetAck().GetFirstSeqNo() < r1.GetAck().GetFirstSeqNo()+2 {
		t.Errorf("request 9 got seq %d before request 3's ops (%d..)", r3.GetAck().GetFirstSeqNo(), r1.GetAck().GetFirstSeqNo())
	}
	sendReq(t, st, 9, "", "again")
	code, d, err := endOf(t, st)
	if code != connect.CodeInvalidArgument || d.GetReason() != "invalid_argument" || d.GetLastAdmittedRequestId() != 9 || !strings.Contains(err.Error(), "not above") {
		t.Fatalf("end after a repeated id: %v %v %v", code, d, err)
	}
	// The other stream is untouched.
	if r := recvResp(t, other); r.GetAck() == nil {
		t.Fatalf("other stream: %v", r)
	}
	sendReq(t, other, 2, "", "other-2")
	if r := recvResp(t, other); r.GetRequestId() != 2 || r.GetAck() == nil {
		t.Fatalf("other stream after the first ended: %v", r)
	}
	if err := other.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Receive(); !errors.Is(err, io.EOF) {
		t.Fatalf("a stream closed by its client ends cleanly: %v", err)
	}
}

func TestAppendStreamUnknownShardAndRebinding(t *testing.T) {
	srv, c, _, _ := streamEnv(t, mem.New(), Options{})
	st := c.AppendStream(t.Context())
	sendReq(t, st, 1, "nope", "x")
	if code, d, _ := endOf(t, st); code != connect.CodeNotFound || d.GetReason() != "not_open" || d.GetShard() != "nope" || d.GetLastAdmittedRequestId() != 0 {
		t.Fatalf("unknown shard: %v %v", code, d)
	}
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	st = c.AppendStream(t.Context())
	sendReq(t, st, 1, "s", "x")
	recvResp(t, st)
	sendReq(t, st, 2, "t", "y")
	if code, d, _ := endOf(t, st); code != connect.CodeInvalidArgument || d.GetLastAdmittedRequestId() != 1 {
		t.Fatalf("a request naming another shard: %v %v", code, d)
	}
}

// envelope frames msg as one gRPC message.
func envelope(msg []byte) []byte {
	out := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:5], uint32(len(msg)))
	copy(out[5:], msg)
	return out
}

// rawStream starts an AppendStream over gRPC with a body the test writes
// byte by byte.
func rawStream(t *testing.T, hc *http.Client, base string) (*io.PipeWriter, <-chan *http.Response) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+sidecarv1connect.SidecarServiceAppendStreamProcedure, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	out := make(chan *http.Response, 1)
	go func() {
		res, err := hc.Do(req)
		if err != nil {
			t.Errorf("raw stream: %v", err)
			close(out)
			return
		}
		out <- res
	}()
	return pw, out
}

// grpcStatus reads the response to its end and returns its grpc-status
// and message.
func grpcStatus(t *testing.T, res *http.Response) (string, string) {
	t.Helper()
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	st, msg := res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
	if st == "" {
		st, msg = res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
	}
	return st, msg
}

// A frame that is not a request, a message over --max-request-bytes, and a
// message that stops arriving end their own stream with an error; a stream
// idle longer than --body-read-timeout between messages is not cut, and
// other streams go on.
func TestAppendStreamMalformedOversizedAndStalledFrames(t *testing.T) {
	srv, c, base, hc := streamEnv(t, mem.New(), Options{Limits: Limits{MaxRequestBytes: 1 << 20, MaxConcurrentRequestBytes: 4 << 20, BodyReadTimeout: 300 * time.Millisecond}})
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	healthy := c.AppendStream(t.Context())
	sendReq(t, healthy, 1, "s", "h1")
	recvResp(t, healthy)

	// Not a protobuf message.
	pw, resc := rawStream(t, hc, base)
	if _, err := pw.Write(envelope([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})); err != nil {
		t.Fatal(err)
	}
	if st, msg := grpcStatus(t, <-resc); st == "0" || st == "" {
		t.Errorf("malformed frame: grpc-status %q %q", st, msg)
	}
	pw.Close()

	// A header announcing more than the sidecar takes.
	pw, resc = rawStream(t, hc, base)
	hdr := make([]byte, 5)
	binary.BigEndian.PutUint32(hdr[1:], 8<<20)
	if _, err := pw.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if st, msg := grpcStatus(t, <-resc); st != fmt.Sprint(int(connect.CodeResourceExhausted)) || !strings.Contains(msg, "max-request-bytes") {
		t.Errorf("oversized message: grpc-status %q %q", st, msg)
	}
	pw.Close()

	// A message that starts and stalls.
	pw, resc = rawStream(t, hc, base)
	binary.BigEndian.PutUint32(hdr[1:], 1000)
	if _, err := pw.Write(append(hdr, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if st, msg := grpcStatus(t, <-resc); st == "0" || st == "" || !strings.Contains(msg, "body-read-timeout") {
		t.Errorf("stalled message: grpc-status %q %q", st, msg)
	}
	pw.Close()

	// Idle for longer than the body read timeout between messages.
	time.Sleep(3 * 300 * time.Millisecond)
	sendReq(t, healthy, 2, "", "h2")
	if r := recvResp(t, healthy); r.GetRequestId() != 2 || r.GetAck() == nil {
		t.Fatalf("healthy stream after the others failed: %v", r)
	}
}

// When the store stalls the stream's sender blocks: the sidecar reads no
// more than the shard's in-flight bytes and the stream's window (plus
// HTTP/2's own flow-control window), and everything read is acknowledged,
// in order, once the store takes writes again.
func TestAppendStreamBackpressureWhenTheStoreStalls(t *testing.T) {
	f := faulty.New(mem.New(), 1)
	var stalled atomic.Bool
	release := make(chan struct{})
	f.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if stalled.Load() && strings.Contains(r.Key, "/translog/") {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	srv, c, _, _ := streamEnv(t, f.Container, Options{Limits: Limits{StreamWindowBytes: MinStreamWindowBytes}})
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{MaxInFlightBytes: 64 << 10, MaxSyncBytes: 16 << 10}, nil); err != nil {
		t.Fatal(err)
	}
	stalled.Store(true)
	st := c.AppendStream(t.Context())
	const opSize, limit = 1024, 20000
	var sent atomic.Int64
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		op := bytes.Repeat([]byte("b"), opSize)
		for i := 1; i <= limit; i++ {
			req := &sidecarv1.AppendStreamRequest{RequestId: uint64(i), Ops: [][]byte{op}}
			if i == 1 {
				req.Shard = "s"
			}
			if st.Send(req) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// Wait until the sender is stuck: no progress for a second.
	last := int64(-1)
	for deadline := time.Now().Add(60 * time.Second); ; {
		time.Sleep(time.Second)
		n := sent.Load()
		if n == last {
			break
		}
		last = n
		if time.Now().After(deadline) || n == limit {
			t.Fatalf("the sender never blocked: %d requests of %d B sent while the store stalled", n, opSize)
		}
	}
	// In flight (64 KiB), the window (64 KiB), HTTP/2's stream window (a
	// few MiB at most) and the client's buffers: far below what an
	// unbounded reader would have taken.
	if last > 6000 {
		t.Errorf("%d requests (%d KiB) sent while the store stalled", last, last*opSize>>10)
	}
	t.Logf("the sender blocked after %d requests of %d B", last, opSize)
	close(release)
	stalled.Store(false)
	var prev int64 = -1
	for i := int64(1); i <= last; i++ {
		r := recvResp(t, st)
		if r.GetRequestId() != uint64(i) || r.GetAck() == nil || r.GetAck().GetFirstSeqNo() <= prev {
			t.Fatalf("answer %d: %v (previous seq %d)", i, r, prev)
		}
		prev = r.GetAck().GetFirstSeqNo()
	}
	_ = st.CloseRequest()
	st.CloseResponse()
	<-sendDone
}

// A stream whose shard a successor fences ends with fenced and the
// successor's term; everything it acknowledged is in the successor's
// lineage, and nothing is acknowledged after the error.
func TestAppendStreamFencedMidStream(t *testing.T) {
	store := mem.New()
	a, ca, _, _ := streamEnv(t, store, Options{Node: "a"})
	b, cb, _, _ := streamEnv(t, store, Options{Node: "b"})
	if _, err := a.Open(t.Context(), "s", 1, "a1", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	st := ca.AppendStream(t.Context())
	var mu sync.Mutex
	acked := map[string]bool{}
	answers := make(chan error, 1)
	go func() {
		for {
			r, err := st.Receive()
			if err != nil {
				answers <- err
				return
			}
			mu.Lock()
			acked[fmt.Sprint("op-", r.GetRequestId())] = true
			mu.Unlock()
		}
	}()
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		time.Sleep(100 * time.Millisecond)
		if _, err := b.Open(t.Context(), "s", 2, "b1", Settings{}, nil); err != nil {
			t.Errorf("open term 2: %v", err)
		}
	}()
	var id uint64
	for {
		id++
		req := &sidecarv1.AppendStreamRequest{RequestId: id, Ops: [][]byte{fmt.Appendf(nil, "op-%d", id)}}
		if id == 1 {
			req.Shard = "s"
		}
		if st.Send(req) != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	err := <-answers
	<-opened
	code, d := detailOf(t, err)
	if code != connect.CodeFailedPrecondition || d.GetReason() != "fenced" || d.GetSuccessorTerm() != 2 {
		t.Fatalf("end of a fenced stream: %v", err)
	}
	got, err := readAll(t, cb, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]bool{}
	for _, op := range got {
		inLog[op] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for op := range acked {
		if !inLog[op] {
			t.Errorf("acknowledged %s is not in the successor's lineage", op)
		}
	}
	if len(acked) == 0 {
		t.Errorf("nothing was acknowledged before the fence")
	}
	t.Logf("%d acknowledged, %d in the lineage, stream ended after request %d (last admitted %d)", len(acked), len(got), id, d.GetLastAdmittedRequestId())
}

// Cutting a stream from the client side while requests are in flight
// leaves the sidecar's guards clean: its window goes back to the gate, and
// a new stream takes the whole window again.
func TestAppendStreamCutByTheClientFreesItsWindow(t *testing.T) {
	f := faulty.New(mem.New(), 1)
	release := make(chan struct{})
	var stalled atomic.Bool
	f.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if stalled.Load() && strings.Contains(r.Key, "/translog/") {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	// The gate holds two windows: a leaked window would stall the second
	// stream below.
	lim := Limits{MaxRequestBytes: 64 << 10, MaxConcurrentRequestBytes: 2 * MinStreamWindowBytes, StreamWindowBytes: MinStreamWindowBytes}
	srv, c, _, _ := streamEnv(t, f.Container, Options{Limits: lim})
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	stalled.Store(true)
	for range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		st := c.AppendStream(ctx)
		op := bytes.Repeat([]byte("c"), 8<<10)
		for i := 1; i <= 7; i++ { // 7 x 8 KiB: most of one window
			sendReq(t, st, uint64(i), "s", string(op))
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
	}
	close(release)
	stalled.Store(false)
	st := c.AppendStream(t.Context())
	for i := 1; i <= 20; i++ {
		sendReq(t, st, uint64(i), "s", strings.Repeat("d", 8<<10))
		if r := recvResp(t, st); r.GetAck() == nil {
			t.Fatalf("after cut streams: %v", r)
		}
	}
}

// A stream that asks for batch_answers gets the answers of the requests a
// sync completed together in one message: every request answered once, in
// order, refusals included, in fewer messages than requests.
func TestAppendStreamBatchesAnswersWhenAsked(t *testing.T) {
	f := faulty.New(mem.New(), 1)
	var stalled atomic.Bool
	release := make(chan struct{})
	f.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if stalled.Load() && strings.Contains(r.Key, "/translog/") {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	srv, c, _, _ := streamEnv(t, f.Container, Options{Limits: Limits{MaxOpBytes: 1024}})
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	stalled.Store(true)
	st := c.AppendStream(t.Context())
	const n = 40
	for i := uint64(1); i <= n; i++ {
		req := &sidecarv1.AppendStreamRequest{RequestId: i, Ops: [][]byte{[]byte(fmt.Sprintf("op-%d", i))}}
		if i == 1 {
			req.Shard, req.BatchAnswers = "s", true
		}
		if i == 20 {
			req.Ops = [][]byte{bytes.Repeat([]byte("x"), 2000)} // over --max-op-bytes: refused
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	// Let the sidecar read them all while the first sync is held.
	time.Sleep(300 * time.Millisecond)
	stalled.Store(false)
	close(release)
	next, messages, batched := uint64(1), 0, 0
	var prev int64 = -1
	for next <= n {
		r := recvResp(t, st)
		messages++
		answers := append([]*sidecarv1.AppendStreamResponse{r}, r.GetMore()...)
		if len(answers) > 1 {
			batched++
		}
		for i, a := range answers {
			if a.GetRequestId() != next || (i > 0 && len(a.GetMore()) != 0) {
				t.Fatalf("answer %v where request %d's was due", a, next)
			}
			switch {
			case next == 20:
				if a.GetRefused().GetDetail().GetReason() != "too_large" || a.GetAck() != nil {
					t.Fatalf("request 20 should be refused: %v", a)
				}
			case a.GetAck().GetCount() != 1 || a.GetAck().GetFirstSeqNo() <= prev:
				t.Fatalf("request %d: %v (previous seq %d)", next, a, prev)
			default:
				prev = a.GetAck().GetFirstSeqNo()
			}
			next++
		}
	}
	if batched == 0 || messages >= n {
		t.Fatalf("%d requests answered in %d messages, %d of them batched: nothing was batched", n, messages, batched)
	}
	t.Logf("%d requests answered in %d messages", n, messages)
	if err := st.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); !errors.Is(err, io.EOF) {
		t.Fatalf("a stream closed by its client ends cleanly: %v", err)
	}
}
