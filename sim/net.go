package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Network is the simulated network between the processes of one run: an
// http.RoundTripper per process that hands each request to the target
// process's http.Handler in this process, the request and response bodies
// through pipes (so server streams such as WatchAssignments, WatchShards
// and the sidecar's AppendStream work), with the faults the plan and the
// seed decide: a delay (time.Sleep in the bubble: virtual time), a dropped
// call (an error before the target sees it), and partitions and pauses
// (the call waits until they heal, or its context ends).
type Network struct {
	w *World

	mu    sync.Mutex
	hosts map[string]*host // by host name, as in the URLs
	calls map[*call]struct{}
}

// host is the process that answers at a name, while it is up.
type host struct {
	proc    *Proc
	handler http.Handler
}

// call is one request in flight, ended by a crash, a pause or a cut.
type call struct {
	from, to string
	cancel   context.CancelCauseFunc
}

var (
	errRefused = errors.New("sim: connection refused (the process is down)")
	errDropped = errors.New("sim: connection reset (message dropped)")
	errCut     = errors.New("sim: connection cut (partition, crash or pause)")
)

func newNetwork(w *World) *Network {
	return &Network{w: w, hosts: map[string]*host{}, calls: map[*call]struct{}{}}
}

// serve makes p answer at name with h until unserve.
func (n *Network) serve(name string, p *Proc, h http.Handler) {
	n.mu.Lock()
	n.hosts[name] = &host{proc: p, handler: h}
	n.mu.Unlock()
}

func (n *Network) unserve(name string) {
	n.mu.Lock()
	delete(n.hosts, name)
	n.mu.Unlock()
}

// cut ends every call between a and b (either direction); b "" is any,
// and a "" every call.
func (n *Network) cut(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.calls {
		if a == "" || (c.from == a && (b == "" || c.to == b)) || (c.to == a && (b == "" || c.from == b)) {
			c.cancel(errCut)
		}
	}
}

// Client returns the http.Client process p reaches the others with.
func (n *Network) Client(p *Proc) *http.Client {
	return &http.Client{Transport: &transport{n: n, from: p}}
}

type transport struct {
	n    *Network
	from *Proc
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	n, w := t.n, t.n.w
	to := req.URL.Host
	ctx := req.Context()
	// A message waits while its link is cut or an end is paused: a pause
	// stops the process; a partition hangs its connections.
	if err := w.waitLink(ctx, t.from, to); err != nil {
		closeBody(req)
		return nil, err
	}
	d, drop := w.linkDecision(t.from.Name, to)
	if d > 0 {
		if err := sleepCtx(ctx, d); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	if err := w.waitLink(ctx, t.from, to); err != nil {
		closeBody(req)
		return nil, err
	}
	if drop {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s to %s", errDropped, t.from.Name, to)
	}
	n.mu.Lock()
	h := n.hosts[to]
	n.mu.Unlock()
	if h == nil || !t.from.alive() {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s", errRefused, to)
	}
	return n.deliver(ctx, req, t.from, h)
}

// deliver runs the target's handler on a copy of req whose context ends
// with the caller's, the target process's, or a cut of the link.
func (n *Network) deliver(ctx context.Context, req *http.Request, from *Proc, h *host) (*http.Response, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(h.proc.ctx, func() { cancel(errCut) })
	c := &call{from: from.Name, to: h.proc.Name, cancel: cancel}
	n.mu.Lock()
	n.calls[c] = struct{}{}
	n.mu.Unlock()
	done := func() {
		stop()
		cancel(nil)
		n.mu.Lock()
		delete(n.calls, c)
		n.mu.Unlock()
	}
	sreq := req.Clone(cctx)
	// No compression: it is not what the simulation tests, and the
	// handlers' gzip set-up per message was an eighth of its CPU time.
	for _, h := range []string{"Accept-Encoding", "Connect-Accept-Encoding", "Grpc-Accept-Encoding"} {
		sreq.Header.Del(h)
	}
	sreq.ProtoMajor, sreq.ProtoMinor, sreq.Proto = 2, 0, "HTTP/2.0"
	sreq.RemoteAddr = from.Name + ":1"
	sreq.RequestURI = req.URL.RequestURI()
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	rw := &respWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer done()
		defer func() {
			rw.start(http.StatusOK)
			_ = pw.CloseWithError(context.Cause(cctx))
		}()
		h.handler.ServeHTTP(rw, sreq)
	}()
	select {
	case <-rw.ready:
	case <-cctx.Done():
		_ = pr.CloseWithError(context.Cause(cctx))
		return nil, context.Cause(cctx)
	}
	// The response ends with the call: a cut or crash ends the stream.
	body := &cutBody{r: pr, ctx: cctx}
	return &http.Response{StatusCode: rw.status, Status: http.StatusText(rw.status), Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: rw.header, Body: body, Trailer: rw.trailer(), Request: req, ContentLength: -1}, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// cutBody is a response body read through the pipe; a read after the call
// ended answers its cause.
type cutBody struct {
	r   *io.PipeReader
	ctx context.Context
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		if c := context.Cause(b.ctx); c != nil {
			return n, c
		}
	}
	return n, err
}

func (b *cutBody) Close() error { return b.r.CloseWithError(errCut) }

// respWriter is the handler's side of the response: headers are ready at
// the first write, flush or return; the body goes through the pipe.
type respWriter struct {
	mu      sync.Mutex
	header  http.Header
	status  int
	body    *io.PipeWriter
	ready   chan struct{}
	started bool
}

func (w *respWriter) Header() http.Header { return w.header }

func (w *respWriter) start(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return
	}
	w.started, w.status = true, code
	close(w.ready)
}

func (w *respWriter) WriteHeader(code int) { w.start(code) }

func (w *respWriter) Write(p []byte) (int, error) {
	w.start(http.StatusOK)
	return w.body.Write(p)
}

func (w *respWriter) Flush() { w.start(http.StatusOK) }

// trailer is empty: the Connect protocol the clients speak carries its
// end of stream and errors in the body and headers, not in trailers.
func (w *respWriter) trailer() http.Header { return http.Header{} }

// sleepCtx sleeps d of the bubble's time unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
