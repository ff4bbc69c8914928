package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
)

// envelopeSlack is what a request body may carry beyond MaxRequestBytes:
// the gRPC envelope, and what compression adds to an incompressible
// message.
const envelopeSlack = 64 << 10

// requestGate bounds the request bytes all API calls hold at once: each
// call holds its body's bytes from before it is read until it returns.
type requestGate struct {
	mu    sync.Mutex
	avail int64
	freed chan struct{} // closed and replaced when bytes are released
}

func newRequestGate(capacity int64) *requestGate {
	return &requestGate{avail: capacity, freed: make(chan struct{})}
}

// acquire takes n bytes, waiting until ctx ends for others to release.
func (g *requestGate) acquire(ctx context.Context, n int64) error {
	for {
		g.mu.Lock()
		if g.avail >= n {
			g.avail -= n
			g.mu.Unlock()
			return nil
		}
		freed := g.freed
		g.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes n bytes if they are free now.
func (g *requestGate) tryAcquire(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.avail < n {
		return false
	}
	g.avail -= n
	return true
}

func (g *requestGate) release(n int64) {
	if n == 0 {
		return
	}
	g.mu.Lock()
	g.avail += n
	close(g.freed)
	g.freed = make(chan struct{})
	g.mu.Unlock()
}

// streamingRequests are procedures whose request body is a long-lived
// stream of messages: each message is held in the stream's window (and the
// gate) from its header until the handler answered it, and the body read
// deadline bounds one message, not the stream.
var streamingRequests = map[string]bool{
	sidecarv1connect.SidecarServiceAppendStreamProcedure: true,
}

// limitRequests guards an API handler against slow and large clients:
//   - a body announced larger than MaxRequestBytes is refused before any
//     of it is read;
//   - every call holds its body's bytes in a gate of
//     MaxConcurrentRequestBytes until it returns: a body with a
//     Content-Length takes them before it is read, waiting at most
//     BodyReadTimeout for room; a body of unknown length (gRPC) takes them
//     as they arrive, without waiting. Either fails with ErrBusy when the
//     gate stays full;
//   - the body must arrive within BodyReadTimeout of the call's start.
//     The deadline is lifted once the body was read, so a long Append
//     wait or a long Read or Open stream is not cut.
func (s *Server) limitRequests(next http.Handler) http.Handler {
	lim := s.opts.Limits
	gate := newRequestGate(lim.MaxConcurrentRequestBytes)
	errw := connect.NewErrorWriter()
	fail := func(w http.ResponseWriter, r *http.Request, status int, err error) {
		s.metrics.errors.WithLabelValues("http", reasonLabel(err)).Inc()
		if errw.IsSupported(r) {
			_ = errw.Write(w, r, tooLarge(err))
			return
		}
		http.Error(w, err.Error(), status)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if streamingRequests[r.URL.Path] {
			s.serveStream(w, r, next, gate)
			return
		}
		if r.ContentLength > int64(lim.MaxRequestBytes)+envelopeSlack {
			fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: the request body is %d bytes, the sidecar takes at most %d (--max-request-bytes): split the append", blobstore.ErrTooLarge, r.ContentLength, lim.MaxRequestBytes))
			return
		}
		deadline := time.Now().Add(lim.BodyReadTimeout)
		held := int64(0)
		if r.ContentLength > 0 {
			ctx, cancel := context.WithDeadline(r.Context(), deadline)
			err := gate.acquire(ctx, r.ContentLength)
			cancel()
			if err != nil {
				fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: %d bytes of requests are in flight (--max-concurrent-request-bytes); nothing was done, retry", ErrBusy, lim.MaxConcurrentRequestBytes))
				return
			}
			held = r.ContentLength
		}
		b := &guardedBody{body: r.Body, gate: gate, deadline: deadline, timeout: lim.BodyReadTimeout, ctx: r.Context(),
			counted: r.ContentLength < 0, limit: int64(lim.MaxRequestBytes) + envelopeSlack, maxRequest: lim.MaxRequestBytes}
		defer func() { gate.release(held + b.taken) }()
		if !streamingRequests[r.URL.Path] {
			b.rc = http.NewResponseController(w)
			if b.rc.SetReadDeadline(deadline) != nil {
				b.rc = nil
			}
		}
		// A shallow copy carries the guarded body: the server's own request
		// keeps its body, which it inspects after the call to decide
		// whether the connection can be reused (not when the call stopped
		// reading a body early).
		r2 := r.WithContext(r.Context())
		r2.Body = b
		next.ServeHTTP(w, r2)
	})
}

// guardedBody lifts the body read deadline once the body is read, and for
// a body of unknown length takes its bytes from the gate as they arrive.
type guardedBody struct {
	body     io.ReadCloser
	gate     *requestGate
	ctx      context.Context
	deadline time.Time
	timeout  time.Duration
	rc       *http.ResponseController
	counted  bool  // take bytes from the gate as they are read
	taken    int64 // bytes taken from the gate by reads
	read     int64 // bytes read
	limit    int64 // most bytes a request may carry, envelope included
	// maxRequest is --max-request-bytes, for the message.
	maxRequest int
	done       bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		// A body of unknown length over the limit: stop here rather than
		// read (and discard) the rest of it.
		return 0, tooLarge(fmt.Errorf("%w: the request body is over %d bytes, the sidecar takes at most %d (--max-request-bytes): split the append", blobstore.ErrTooLarge, b.limit, b.maxRequest))
	}
	if n > 0 && b.counted {
		// Without waiting: bodies that each hold part of the gate and wait
		// for more would wait for one another.
		if !b.gate.tryAcquire(int64(n)) {
			return 0, tooLarge(fmt.Errorf("%w: too many request bytes in flight (--max-concurrent-request-bytes); nothing was done, retry", ErrBusy))
		}
		b.taken += int64(n)
	}
	switch {
	case errors.Is(err, io.EOF):
		b.finish()
	case isTimeout(err):
		err = fmt.Errorf("the request body did not arrive within %v (--body-read-timeout): %w", b.timeout, err)
	}
	return n, err
}

// tooLarge is err as the API error a body reader returns: connect passes a
// *connect.Error from the reader on to the client as it is.
func tooLarge(err error) error {
	ce := connect.NewError(connect.CodeResourceExhausted, err)
	if d, derr := connect.NewErrorDetail(&sidecarv1.ErrorDetail{Reason: Reason(err)}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// Close leaves the deadline in place when the body was not read to its
// end: the server then discards the rest under the same deadline instead
// of waiting for a client that stopped sending.
func (b *guardedBody) Close() error { return b.body.Close() }

// finish lifts the read deadline once the whole body arrived: the rest of
// the call (an Append waiting for its ack, a stream of Read or Open) is not
// bounded by it.
func (b *guardedBody) finish() {
	if b.done {
		return
	}
	b.done = true
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
