// Package rpcfuzz drives a ConnectRPC server's real HTTP handler with
// arbitrary request bodies, for the fuzz targets of the master and the
// sidecar. Only tests import it.
//
// One input is a procedure (an index into the service's procedures), a
// mode byte and the body bytes. The mode's low three bits pick how the
// body is sent:
//
//	0, 1  Connect (unary, or enveloped for streams), proto or JSON codec
//	2, 3  gRPC, proto or JSON codec
//	4, 5  gRPC-web, proto or JSON codec
//	6, 7  raw: the body is the whole HTTP body, framing included, under
//	      the content type bits 4-6 pick (RawContentTypes)
//
// Bit 3 compresses: the client gzips each message (modes 0-5), or the raw
// body is declared gzip (raw modes; the body is sent as it is, so it may
// or may not be gzip).
//
// Call asserts, on every input: the handler does not panic; it answers
// within a bound (a unary call never ends in deadline_exceeded or
// canceled: the call's deadline is generous) and returns soon after the
// call ended (a stream's once its client went away); the outcome is success or
// a Connect/gRPC code other than internal and unknown; the error message
// and its details are bounded; the server still answers afterwards
// (Options.Alive). The one internal code accepted is the Connect
// library's own answer to a raw body with broken gRPC/Connect framing
// ("protocol error: ...", framingError), which is what the gRPC protocol
// specifies for it.
package rpcfuzz

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Proc is one RPC procedure: its HTTP path and stream type.
type Proc struct {
	Path   string
	Stream connect.StreamType
}

// Procs lists the procedures of the services, in declaration order.
func Procs(services ...protoreflect.ServiceDescriptor) []Proc {
	var out []Proc
	for _, sd := range services {
		ms := sd.Methods()
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			st := connect.StreamTypeUnary
			if m.IsStreamingClient() {
				st |= connect.StreamTypeClient
			}
			if m.IsStreamingServer() {
				st |= connect.StreamTypeServer
			}
			out = append(out, Proc{Path: "/" + string(sd.FullName()) + "/" + string(m.Name()), Stream: st})
		}
	}
	return out
}

// Valid turns the valid requests of each procedure, written as JSON, into
// the seed bodies: each JSON body and the same request in protobuf. A
// JSON body that does not fit its request message fails tb.
func Valid(tb testing.TB, services []protoreflect.ServiceDescriptor, requests map[string][]string) map[string][][]byte {
	tb.Helper()
	out := map[string][][]byte{}
	for _, sd := range services {
		ms := sd.Methods()
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			path := "/" + string(sd.FullName()) + "/" + string(m.Name())
			for _, js := range requests[path] {
				msg := dynamicpb.NewMessage(m.Input())
				if err := protojson.Unmarshal([]byte(js), msg); err != nil {
					tb.Fatalf("seed %s %s: %v", path, js, err)
				}
				pb, err := proto.Marshal(msg)
				if err != nil {
					tb.Fatal(err)
				}
				out[path] = append(out[path], []byte(js), pb)
			}
		}
	}
	return out
}

// Mode bits.
const (
	ModeConnectProto = 0
	ModeConnectJSON  = 1
	ModeGRPCProto    = 2
	ModeGRPCJSON     = 3
	ModeWebProto     = 4
	ModeWebJSON      = 5
	ModeRaw          = 6
	ModeGzip         = 0x08
)

// RawMode is the mode byte of a raw body under RawContentTypes[ct].
func RawMode(ct int, gzip bool) uint8 {
	m := uint8(ModeRaw) | uint8(ct&7)<<4
	if gzip {
		m |= ModeGzip
	}
	return m
}

// RawContentTypes are the content types of raw bodies.
var RawContentTypes = [8]string{
	"application/json",
	"application/proto",
	"application/grpc",
	"application/grpc+json",
	"application/grpc-web+proto",
	"application/connect+proto",
	"application/connect+json",
	"application/json; charset=utf-8",
}

// Options configure a Target.
type Options struct {
	// MaxMessage bounds an error message (default 4 KiB).
	MaxMessage int
	// UnaryTimeout is a unary call's deadline (default 10s): reaching it
	// is a hang.
	UnaryTimeout time.Duration
	// StreamTimeout is a stream's deadline (default 200ms): a valid stream
	// may stay open until it (a watch), so reaching it is no failure.
	StreamTimeout time.Duration
	// Alive is called after every input; an error fails it (the server's
	// state invariants, where cheap: it still answers).
	Alive func(ctx context.Context, t *Target) error
}

// Target is a server under fuzzing: the handler behind an HTTP/2 (h2c)
// test server, and the procedures the fuzzer picks from.
type Target struct {
	URL    string
	Client *http.Client
	Procs  []Proc
	opts   Options

	mu       sync.Mutex
	panics   []string
	inflight atomic.Int64 // handlers running
}

// NewTarget serves h on a test server closed at the end of tb.
func NewTarget(tb testing.TB, h http.Handler, procs []Proc, opts Options) *Target {
	tb.Helper()
	if opts.MaxMessage == 0 {
		opts.MaxMessage = 4096
	}
	if opts.UnaryTimeout == 0 {
		opts.UnaryTimeout = 10 * time.Second
	}
	if opts.StreamTimeout == 0 {
		opts.StreamTimeout = 200 * time.Millisecond
	}
	tg := &Target{Procs: procs, opts: opts}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.inflight.Add(1)
		defer tg.inflight.Add(-1)
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				tg.mu.Lock()
				tg.panics = append(tg.panics, fmt.Sprintf("%s: panic: %v\n%s", r.URL.Path, v, debug.Stack()))
				tg.mu.Unlock()
				panic(http.ErrAbortHandler)
			}
		}()
		h.ServeHTTP(w, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	tb.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tb.Cleanup(tr.CloseIdleConnections)
	tg.URL = srv.URL
	tg.Client = &http.Client{Transport: tr}
	return tg
}

// rawMsg is a message as bytes: the codec passes them through, so the
// body is whatever the fuzzer made.
type rawMsg struct{ b []byte }

type rawCodec struct{ name string }

func (c rawCodec) Name() string { return c.name }

// Marshal and Unmarshal pass a rawMsg's bytes through; other messages
// (the gRPC status of an error) go through the codec's format.
func (c rawCodec) Marshal(v any) ([]byte, error) {
	if m, ok := v.(*rawMsg); ok {
		return m.b, nil
	}
	if c.name == "json" {
		return protojson.Marshal(v.(proto.Message))
	}
	return proto.Marshal(v.(proto.Message))
}

func (c rawCodec) Unmarshal(b []byte, v any) error {
	if m, ok := v.(*rawMsg); ok {
		m.b = append([]byte(nil), b...)
		return nil
	}
	if c.name == "json" {
		return protojson.Unmarshal(b, v.(proto.Message))
	}
	return proto.Unmarshal(b, v.(proto.Message))
}

// outcome is what one call ended with.
type outcome struct {
	code    connect.Code // 0: success (or an answer that is no RPC outcome, like 415)
	message string
	details int  // bytes of the error's details
	cut     bool // the call's own deadline ended it
}

// Call sends one input and checks the properties on its outcome.
func (tg *Target) Call(t *testing.T, proc, mode uint8, body []byte) {
	t.Helper()
	if len(tg.Procs) == 0 {
		t.Fatal("no procedures")
	}
	p := tg.Procs[int(proc)%len(tg.Procs)]
	unary := p.Stream == connect.StreamTypeUnary
	timeout := tg.opts.UnaryTimeout
	if !unary {
		timeout = tg.opts.StreamTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	var o outcome
	var err error
	if mode&7 >= ModeRaw {
		o, err = tg.raw(ctx, p, mode, body)
	} else {
		o = tg.client(ctx, p, mode, body)
	}
	// The client gives up at its deadline; the handler must end too (a
	// stream's once the client went away).
	for wait := time.Now().Add(10 * time.Second); tg.inflight.Load() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("%s mode %#x body %d bytes %.64q: the handler still runs 10s after the call ended", p.Path, mode, len(body), body)
		}
	}
	took := time.Since(start)
	what := fmt.Sprintf("%s mode %#x body %d bytes %.64q", p.Path, mode, len(body), body)
	tg.mu.Lock()
	panics := tg.panics
	tg.panics = nil
	tg.mu.Unlock()
	if len(panics) > 0 {
		t.Fatalf("%s: the handler panicked:\n%s", what, strings.Join(panics, "\n"))
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if took > timeout+5*time.Second {
		t.Fatalf("%s: the call took %v, its deadline was %v", what, took, timeout)
	}
	if unary && (o.cut || o.code == connect.CodeDeadlineExceeded || o.code == connect.CodeCanceled) {
		t.Fatalf("%s: a unary call did not answer within %v: %v %q", what, timeout, o.code, o.message)
	}
	switch o.code {
	case connect.CodeInternal:
		if mode&7 < ModeRaw || !framingError(o.message) {
			t.Fatalf("%s: code internal: %q", what, o.message)
		}
	case connect.CodeUnknown:
		t.Fatalf("%s: code unknown: %q", what, o.message)
	}
	if len(o.message) > tg.opts.MaxMessage {
		t.Fatalf("%s: %v error message of %d bytes (bound %d): %.200q...", what, o.code, len(o.message), tg.opts.MaxMessage, o.message)
	}
	if o.details > tg.opts.MaxMessage {
		t.Fatalf("%s: %v error details of %d bytes (bound %d)", what, o.code, o.details, tg.opts.MaxMessage)
	}
	if tg.opts.Alive != nil {
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer acancel()
		if err := tg.opts.Alive(actx, tg); err != nil {
			t.Fatalf("after %s: the server no longer answers: %v", what, err)
		}
	}
}

// framingError reports whether an internal error's message is the
// Connect library's verdict on a body whose gRPC/Connect framing is
// broken (a truncated envelope, unknown flags, a compressed flag without
// an encoding, an end-of-stream flag, which only servers send): the gRPC
// protocol makes those internal, before any message reaches the service.
func framingError(msg string) bool {
	for _, p := range []string{"protocol error: ", "corrupt response: ", "unmarshal end stream message: "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// client makes the call with a Connect client whose codec passes the
// body through as the message.
func (tg *Target) client(ctx context.Context, p Proc, mode uint8, body []byte) outcome {
	codec := rawCodec{"proto"}
	if mode&1 == 1 {
		codec.name = "json"
	}
	opts := []connect.ClientOption{connect.WithCodec(codec), connect.WithReadMaxBytes(64 << 20)}
	switch mode & 7 {
	case ModeGRPCProto, ModeGRPCJSON:
		opts = append(opts, connect.WithGRPC())
	case ModeWebProto, ModeWebJSON:
		opts = append(opts, connect.WithGRPCWeb())
	}
	if mode&ModeGzip != 0 {
		opts = append(opts, connect.WithSendGzip())
	}
	c := connect.NewClient[rawMsg, rawMsg](tg.Client, tg.URL+p.Path, opts...)
	var err error
	switch p.Stream {
	case connect.StreamTypeUnary:
		_, err = c.CallUnary(ctx, connect.NewRequest(&rawMsg{b: body}))
	case connect.StreamTypeServer:
		var s *connect.ServerStreamForClient[rawMsg]
		if s, err = c.CallServerStream(ctx, connect.NewRequest(&rawMsg{b: body})); err == nil {
			err = drain(s.Receive, s.Err)
			_ = s.Close()
		}
	case connect.StreamTypeClient:
		s := c.CallClientStream(ctx)
		if err = s.Send(&rawMsg{b: body}); err == nil || errors.Is(err, io.EOF) {
			_, err = s.CloseAndReceive()
		}
	case connect.StreamTypeBidi:
		s := c.CallBidiStream(ctx)
		if serr := s.Send(&rawMsg{b: body}); serr == nil || errors.Is(serr, io.EOF) {
			_ = s.CloseRequest()
			if _, err = s.Receive(); errors.Is(err, io.EOF) {
				err = nil
			}
		}
		_ = s.CloseResponse()
	}
	if err == nil {
		return outcome{}
	}
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		return outcome{code: connect.CodeUnknown, message: err.Error()}
	}
	o := outcome{code: ce.Code(), message: ce.Message(), cut: ctx.Err() != nil}
	for _, d := range ce.Details() {
		o.details += len(d.Bytes())
	}
	return o
}

// drain waits for a server stream's first message (the request was
// taken: a watch may send nothing more until its deadline) or its end.
func drain(receive func() bool, errf func() error) error {
	if receive() {
		return nil
	}
	return errf()
}

// raw posts the body as it is and reads the outcome from the answer's
// HTTP status, headers, trailers or end-of-stream message.
func (tg *Target) raw(ctx context.Context, p Proc, mode uint8, body []byte) (outcome, error) {
	ct := RawContentTypes[(mode>>4)&7]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.URL+p.Path, bytes.NewReader(body))
	if err != nil {
		return outcome{}, err
	}
	req.Header.Set("Content-Type", ct)
	if strings.HasPrefix(ct, "application/grpc") {
		req.Header.Set("Te", "trailers")
	}
	if mode&ModeGzip != 0 {
		switch {
		case strings.HasPrefix(ct, "application/grpc"):
			req.Header.Set("Grpc-Encoding", "gzip")
		case strings.HasPrefix(ct, "application/connect"):
			req.Header.Set("Connect-Content-Encoding", "gzip")
		default:
			req.Header.Set("Content-Encoding", "gzip")
		}
	}
	res, err := tg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return outcome{cut: true, code: connect.CodeDeadlineExceeded}, nil
		}
		return outcome{}, fmt.Errorf("no answer: %w", err)
	}
	defer res.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if rerr != nil && ctx.Err() != nil {
		return outcome{cut: true, code: connect.CodeDeadlineExceeded}, nil
	}
	rct := res.Header.Get("Content-Type")
	// gRPC: the status in the trailers, or in the headers of a
	// trailers-only answer.
	if st := res.Trailer.Get("Grpc-Status"); st != "" || res.Header.Get("Grpc-Status") != "" {
		h := res.Trailer
		if st == "" {
			h = res.Header
		}
		return grpcOutcome(h.Get("Grpc-Status"), h.Get("Grpc-Message"))
	}
	switch {
	case strings.HasPrefix(rct, "application/grpc-web"):
		for _, env := range envelopes(b) {
			if env.flags&0x80 == 0 {
				continue
			}
			h := http.Header{}
			for _, line := range strings.Split(string(env.data), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
				}
			}
			return grpcOutcome(h.Get("Grpc-Status"), h.Get("Grpc-Message"))
		}
	case strings.HasPrefix(rct, "application/connect"):
		for _, env := range envelopes(b) {
			if env.flags&0x02 == 0 {
				continue
			}
			var end struct {
				Error *wireError `json:"error"`
			}
			if err := json.Unmarshal(env.data, &end); err != nil {
				return outcome{}, fmt.Errorf("end-stream message %q: %w", env.data, err)
			}
			if end.Error == nil {
				return outcome{}, nil
			}
			return end.Error.outcome()
		}
	case res.StatusCode != http.StatusOK && strings.HasPrefix(rct, "application/json"):
		var we wireError
		if err := json.Unmarshal(b, &we); err != nil {
			return outcome{}, fmt.Errorf("HTTP %d error body %.200q: %w", res.StatusCode, b, err)
		}
		return we.outcome()
	}
	if res.StatusCode >= 500 {
		return outcome{}, fmt.Errorf("HTTP %d without an RPC status: %.200q", res.StatusCode, b)
	}
	return outcome{}, nil
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (we *wireError) outcome() (outcome, error) {
	var c connect.Code
	if err := c.UnmarshalText([]byte(we.Code)); err != nil {
		return outcome{}, fmt.Errorf("error code %q: %w", we.Code, err)
	}
	return outcome{code: c, message: we.Message}, nil
}

func grpcOutcome(status, message string) (outcome, error) {
	n, err := strconv.ParseUint(status, 10, 32)
	if err != nil {
		return outcome{}, fmt.Errorf("grpc-status %q", status)
	}
	if m, err := url.PathUnescape(message); err == nil {
		message = m
	}
	return outcome{code: connect.Code(n), message: message}, nil
}

type envelope struct {
	flags byte
	data  []byte
}

// envelopes splits a gRPC-web or Connect streaming body into its
// messages, decompressing compressed ones (a server answers a gzip
// request in gzip, its end-of-stream message included).
func envelopes(b []byte) []envelope {
	var out []envelope
	for len(b) >= 5 {
		n := binary.BigEndian.Uint32(b[1:5])
		if uint64(n) > uint64(len(b)-5) {
			break
		}
		env := envelope{flags: b[0], data: b[5 : 5+n]}
		if env.flags&1 == 1 {
			if zr, err := gzip.NewReader(bytes.NewReader(env.data)); err == nil {
				if d, err := io.ReadAll(io.LimitReader(zr, 1<<20)); err == nil {
					env.data = d
				}
			}
		}
		out = append(out, env)
		b = b[5+n:]
	}
	return out
}

// Envelope frames msg as one gRPC/Connect message (flags 0, or 1 for a
// compressed one), for raw seeds.
func Envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// Gzip compresses b, for seeds.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// Seed is one seed input.
type Seed struct {
	Proc uint8
	Mode uint8
	Body []byte
}

// Seeds are the seed inputs of the procedures, from their valid requests
// (Valid: a JSON and a protobuf body each): every valid body under each
// protocol, gzip and truncated ones included, and a share of the
// malformed ones (empty, unicode, huge, a gzip bomb, broken framing)
// spread over the procedures, so the corpus stays small enough for a
// brief fuzzing run to get through it.
func Seeds(procs []Proc, valid map[string][][]byte) []Seed {
	var out []Seed
	for i, p := range procs {
		pi := uint8(i)
		for _, b := range valid[p.Path] {
			if len(b) > 0 && b[0] == '{' {
				out = append(out, Seed{pi, ModeConnectJSON, b}, Seed{pi, ModeGRPCJSON | ModeGzip, b})
				if p.Stream == connect.StreamTypeUnary {
					out = append(out, Seed{pi, RawMode(0, false), b})
				} else {
					out = append(out, Seed{pi, RawMode(6, false), Envelope(0, b)})
				}
				continue
			}
			out = append(out,
				Seed{pi, ModeConnectProto | ModeGzip, b},
				Seed{pi, ModeGRPCProto, b},
				Seed{pi, ModeWebProto, b},
				Seed{pi, RawMode(2, true), Envelope(1, Gzip(b))},
			)
			if len(b) > 1 {
				out = append(out, Seed{pi, ModeConnectProto, b[:len(b)/2]})
			}
			if p.Stream == connect.StreamTypeUnary {
				out = append(out, Seed{pi, RawMode(1, true), Gzip(b)})
			}
		}
	}
	if len(procs) == 0 {
		return out
	}
	big := bytes.Repeat([]byte("\U0001F600"), 1<<14) // 64 KiB of 4-byte characters
	bomb := Gzip(append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), 8<<20)...), `"}`...))
	malformed := []Seed{
		{0, ModeConnectProto, nil},
		{0, ModeConnectJSON, []byte(`{}`)},
		{0, ModeConnectJSON, []byte(`{"shard":"\u202eevil\u0000","key":"\ud800","tenant":"日本語","node":"nœud"}`)},
		{0, ModeConnectJSON, append(append([]byte(`{"shard":"`), big...), `"}`...)},
		{0, ModeGRPCJSON, []byte(`{"nope":`)},
		{0, ModeConnectProto, []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{0, ModeConnectProto, []byte{0x0a, 0x05, 0xff, 0xfe, 0xc0, 0x80, 0x00}},
		{0, ModeConnectJSON | ModeGzip, big},
		{0, RawMode(0, true), bomb},
		{0, RawMode(2, false), []byte{0, 0, 0, 1}},
		{0, RawMode(2, false), []byte{1, 0, 0, 0, 2, 'h', 'i'}},
		{0, RawMode(2, true), Envelope(1, bomb)},
		{0, RawMode(4, false), []byte{0x80, 0, 0, 0, 0}},
		{0, RawMode(6, false), []byte{0, 0, 0, 0, 9, '{'}},
		{0, RawMode(6, false), Envelope('2', []byte("0000"))}, // an end-of-stream flag from a client
		{0, RawMode(7, false), []byte(`{"term":"1e309","size":"-1"}`)},
		{0, RawMode(5, false), Envelope(0, bytes.Repeat([]byte{0x0a, 0x01, 'x'}, 1000))},
		// protojson's errors repeat the token they could not take.
		{0, ModeConnectJSON, append(append([]byte(`{"shard":1`), bytes.Repeat([]byte("0"), 100_000)...), '}')},
		{0, ModeGRPCJSON, append(append([]byte(`{"x":t`), bytes.Repeat([]byte("r"), 100_000)...), '}')},
		{0, RawMode(0, false), append(append([]byte(`{"key":"\\`), bytes.Repeat([]byte("q"), 100_000)...), `"}`...)},
	}
	for i, m := range malformed {
		m.Proc = uint8((i * 7) % len(procs))
		out = append(out, m)
		m.Proc = uint8((i*7 + 3) % len(procs))
		out = append(out, m)
	}
	return out
}
