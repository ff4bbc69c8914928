// Package reqlimit bounds what the clients of an API server (the
// sidecar's, the master's) can make it hold: the size of one request body,
// the request bytes all calls hold at once, and how long a body may take
// to arrive. The server supplies its own errors, so a refusal reaches its
// clients typed in its own API.
package reqlimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// EnvelopeSlack is what a request body may carry beyond MaxRequestBytes:
// the gRPC envelope, and what compression adds to an incompressible
// message.
const EnvelopeSlack = 64 << 10

// Bounds of Limits.BodyReadTimeout.
const (
	MinBodyReadTimeout = 100 * time.Millisecond
	MaxBodyReadTimeout = 10 * time.Minute
)

// Limits are what one server takes from its clients.
type Limits struct {
	// MaxRequestBytes bounds one request message (connect's read limit,
	// which bounds a decompressed message too) and one request body.
	MaxRequestBytes int
	// MaxConcurrentRequestBytes bounds the request bytes all calls hold
	// at once; at least MaxRequestBytes.
	MaxConcurrentRequestBytes int64
	// BodyReadTimeout bounds how long a request body may take to arrive,
	// from the call's start.
	BodyReadTimeout time.Duration
	// MaxStreams bounds the open calls of each procedure in
	// Config.Capped (server streams that live as long as their client
	// wants); 0 leaves them unbounded.
	MaxStreams int
}

// MaxMaxStreams bounds Limits.MaxStreams.
const MaxMaxStreams = 1 << 20

// Validate says which limit is out of its range.
func (l Limits) Validate() error {
	switch {
	case l.MaxRequestBytes < 1:
		return fmt.Errorf("max request bytes %d is not positive", l.MaxRequestBytes)
	case l.MaxConcurrentRequestBytes < int64(l.MaxRequestBytes):
		return fmt.Errorf("max concurrent request bytes %d below max request bytes %d", l.MaxConcurrentRequestBytes, l.MaxRequestBytes)
	case l.BodyReadTimeout < MinBodyReadTimeout || l.BodyReadTimeout > MaxBodyReadTimeout:
		return fmt.Errorf("body read timeout %v is outside %v..%v", l.BodyReadTimeout, MinBodyReadTimeout, MaxBodyReadTimeout)
	case l.MaxStreams < 0 || l.MaxStreams > MaxMaxStreams:
		return fmt.Errorf("max streams %d is outside 0..%d", l.MaxStreams, MaxMaxStreams)
	}
	return nil
}

// Signal wakes the goroutines waiting for a condition a mutex guards: a
// sync.Cond whose Wait also ends with a context. The zero value is ready;
// its methods are called with the mutex held.
type Signal struct{ ch chan struct{} }

// Wait returns once ready() holds (it is evaluated with mu held: at once,
// then after each Broadcast) or ctx ends (ctx's error). It is called with
// mu held, and returns with mu held.
func (s *Signal) Wait(ctx context.Context, mu *sync.Mutex, ready func() bool) error {
	for !ready() {
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		mu.Unlock()
		select {
		case <-ch:
			mu.Lock()
		case <-ctx.Done():
			mu.Lock()
			return ctx.Err()
		}
	}
	return nil
}

// Broadcast wakes every Wait, to look at its condition again.
func (s *Signal) Broadcast() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Gate bounds the request bytes all API calls hold at once: each call
// holds its body's bytes from before it is read until it returns.
type Gate struct {
	mu    sync.Mutex
	avail int64
	freed Signal // bytes were released
}

// NewGate is a gate of capacity bytes.
func NewGate(capacity int64) *Gate {
	return &Gate{avail: capacity}
}

// Acquire takes n bytes, waiting until ctx ends for others to release.
func (g *Gate) Acquire(ctx context.Context, n int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.freed.Wait(ctx, &g.mu, func() bool { return g.avail >= n }); err != nil {
		return err
	}
	g.avail -= n
	return nil
}

// TryAcquire takes n bytes if they are free now.
func (g *Gate) TryAcquire(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.avail < n {
		return false
	}
	g.avail -= n
	return true
}

// Release gives n bytes back.
func (g *Gate) Release(n int64) {
	if n == 0 {
		return
	}
	g.mu.Lock()
	g.avail += n
	g.freed.Broadcast()
	g.mu.Unlock()
}

// Config is a Guard: the limits and the server's own words for refusals.
type Config struct {
	Limits
	// Server names the server in messages: "sidecar", "master".
	Server string
	// TooLarge and Busy are the errors a refusal wraps (errors.Is): a
	// body over MaxRequestBytes, and a gate that stayed full.
	TooLarge, Busy error
	// TooLargeHint says what a client does about a body too large
	// ("split the append").
	TooLargeHint string
	// APIError is a refusal as the error an API client reads
	// (resource_exhausted, with the server's error detail).
	APIError func(error) *connect.Error
	// OnRefuse, when set, is told of every refusal made before the call
	// (metrics).
	OnRefuse func(error)
	// Streams serves the procedures whose request body is a long-lived
	// stream of messages, keyed by path: they bound each message
	// themselves, with the guard's gate.
	Streams map[string]func(w http.ResponseWriter, r *http.Request, next http.Handler, gate *Gate)
	// Capped are the paths of procedures of which at most MaxStreams
	// calls each may be open at once; one more is refused with Busy.
	Capped []string
}

// Guard guards API handlers against slow and large clients; every handler
// it wraps shares one gate.
type Guard struct {
	cfg  Config
	gate *Gate
	errw *connect.ErrorWriter
	open map[string]*atomic.Int64 // open calls of each capped path
}

// New is a guard of cfg.
func New(cfg Config) *Guard {
	g := &Guard{cfg: cfg, gate: NewGate(cfg.MaxConcurrentRequestBytes), errw: connect.NewErrorWriter(), open: map[string]*atomic.Int64{}}
	if cfg.MaxStreams > 0 {
		for _, p := range cfg.Capped {
			g.open[p] = new(atomic.Int64)
		}
	}
	return g
}

// OpenStreams is how many calls of the capped procedure at path are open.
func (g *Guard) OpenStreams(path string) int64 {
	if n := g.open[path]; n != nil {
		return n.Load()
	}
	return 0
}

// Gate is the gate every call the guard wraps holds its bytes in.
func (g *Guard) Gate() *Gate { return g.gate }

func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, status int, err error) {
	if g.cfg.OnRefuse != nil {
		g.cfg.OnRefuse(err)
	}
	if g.errw.IsSupported(r) {
		_ = g.errw.Write(w, r, g.cfg.APIError(err))
		return
	}
	http.Error(w, err.Error(), status)
}

// Wrap guards next:
//   - a body announced larger than MaxRequestBytes is refused before any
//     of it is read;
//   - every call holds its body's bytes in the gate of
//     MaxConcurrentRequestBytes until it returns: a body with a
//     Content-Length takes them before it is read, waiting at most
//     BodyReadTimeout for room; a body of unknown length (gRPC) takes them
//     as they arrive, without waiting. Either fails with Busy when the
//     gate stays full;
//   - at most MaxStreams calls of each Capped procedure are open at
//     once; one more is refused with Busy before anything is read;
//   - the body must arrive within BodyReadTimeout of the call's start.
//     The deadline is lifted once the body was read, so a long wait for
//     an answer or a long server stream is not cut.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	lim := g.cfg.Limits
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open := g.open[r.URL.Path]; open != nil {
			if open.Add(1) > int64(lim.MaxStreams) {
				open.Add(-1)
				g.refuse(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: %d calls of %s are open, the %s takes at most %d at once (--max-streams); nothing was done, retry later",
					g.cfg.Busy, lim.MaxStreams, r.URL.Path, g.cfg.Server, lim.MaxStreams))
				return
			}
			defer open.Add(-1)
		}
		if serve := g.cfg.Streams[r.URL.Path]; serve != nil {
			serve(w, r, next, g.gate)
			return
		}
		if r.ContentLength > int64(lim.MaxRequestBytes)+EnvelopeSlack {
			g.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: the request body is %d bytes, the %s takes at most %d (--max-request-bytes): %s",
				g.cfg.TooLarge, r.ContentLength, g.cfg.Server, lim.MaxRequestBytes, g.cfg.TooLargeHint))
			return
		}
		deadline := time.Now().Add(lim.BodyReadTimeout)
		held := int64(0)
		if r.ContentLength > 0 {
			ctx, cancel := context.WithDeadline(r.Context(), deadline)
			err := g.gate.Acquire(ctx, r.ContentLength)
			cancel()
			if err != nil {
				g.refuse(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: %d bytes of requests are in flight (--max-concurrent-request-bytes); nothing was done, retry", g.cfg.Busy, lim.MaxConcurrentRequestBytes))
				return
			}
			held = r.ContentLength
		}
		b := &guardedBody{g: g, body: r.Body, timeout: lim.BodyReadTimeout,
			counted: r.ContentLength < 0, limit: int64(lim.MaxRequestBytes) + EnvelopeSlack}
		defer func() { g.gate.Release(held + b.taken) }()
		b.rc = http.NewResponseController(w)
		if b.rc.SetReadDeadline(deadline) != nil {
			b.rc = nil
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
	g       *Guard
	body    io.ReadCloser
	timeout time.Duration
	rc      *http.ResponseController
	counted bool  // take bytes from the gate as they are read
	taken   int64 // bytes taken from the gate by reads
	read    int64 // bytes read
	limit   int64 // most bytes a request may carry, envelope included
	done    bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.read += int64(n)
	cfg := b.g.cfg
	if b.read > b.limit {
		// A body of unknown length over the limit: stop here rather than
		// read (and discard) the rest of it.
		return 0, cfg.APIError(fmt.Errorf("%w: the request body is over %d bytes, the %s takes at most %d (--max-request-bytes): %s",
			cfg.TooLarge, b.limit, cfg.Server, cfg.MaxRequestBytes, cfg.TooLargeHint))
	}
	if n > 0 && b.counted {
		// Without waiting: bodies that each hold part of the gate and wait
		// for more would wait for one another.
		if !b.g.gate.TryAcquire(int64(n)) {
			return 0, cfg.APIError(fmt.Errorf("%w: too many request bytes in flight (--max-concurrent-request-bytes); nothing was done, retry", cfg.Busy))
		}
		b.taken += int64(n)
	}
	switch {
	case errors.Is(err, io.EOF):
		b.finish()
	case IsTimeout(err):
		err = fmt.Errorf("the request body did not arrive within %v (--body-read-timeout): %w", b.timeout, err)
	}
	return n, err
}

// Close leaves the deadline in place when the body was not read to its
// end: the server then discards the rest under the same deadline instead
// of waiting for a client that stopped sending.
func (b *guardedBody) Close() error { return b.body.Close() }

// finish lifts the read deadline once the whole body arrived: the rest of
// the call (a wait for an answer, a server stream) is not bounded by it.
func (b *guardedBody) finish() {
	if b.done {
		return
	}
	b.done = true
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// IsTimeout reports whether err is a timeout (a read deadline that
// passed).
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
