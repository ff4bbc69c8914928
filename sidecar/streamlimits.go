package sidecar

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/reqlimit"
)

// errStreamDone: the stream's call returned; its window takes nothing more.
var errStreamDone = errors.New("stream ended")

// streamWindow is the request bytes one streaming call holds: each message
// from when its envelope header arrived until the handler answered it
// (answered), oldest first. Its bytes are taken from the sidecar's request
// gate too, so streams and unary calls share MaxConcurrentRequestBytes.
type streamWindow struct {
	gate   *reqlimit.Gate
	window int64

	mu     sync.Mutex
	held   int64
	sizes  []int64         // the messages held, in the order they arrived
	freed  reqlimit.Signal // a message was answered, or the call returned
	closed bool
}

func newStreamWindow(gate *reqlimit.Gate, window int64) *streamWindow {
	return &streamWindow{gate: gate, window: window}
}

// admit takes n bytes for the next message: it waits until the stream
// holds room for it (or holds nothing: a message larger than the window is
// read alone) and the gate has n bytes free. Only the stream's reader
// calls it, one message at a time, so nothing it waits for is held by a
// message of its own that is still arriving: what it waits for is freed by
// answers, whatever other streams do.
func (sw *streamWindow) admit(ctx context.Context, n int64) error {
	sw.mu.Lock()
	err := sw.freed.Wait(ctx, &sw.mu, func() bool { return sw.closed || sw.held == 0 || sw.held+n <= sw.window })
	closed := sw.closed
	sw.mu.Unlock()
	switch {
	case closed:
		return errStreamDone
	case err != nil:
		return err
	}
	if err := sw.gate.Acquire(ctx, n); err != nil {
		return err
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.closed {
		sw.gate.Release(n)
		return errStreamDone
	}
	sw.held += n
	sw.sizes = append(sw.sizes, n)
	return nil
}

// answered frees the oldest message held: the handler answered it. Nil
// (a call not served over HTTP) holds nothing.
func (sw *streamWindow) answered() {
	if sw == nil {
		return
	}
	sw.mu.Lock()
	if sw.closed || len(sw.sizes) == 0 {
		sw.mu.Unlock()
		return
	}
	n := sw.sizes[0]
	sw.sizes = sw.sizes[1:]
	sw.held -= n
	sw.freed.Broadcast()
	sw.mu.Unlock()
	sw.gate.Release(n)
}

// close gives everything back when the call returns; later admits fail.
func (sw *streamWindow) close() {
	sw.mu.Lock()
	n := sw.held
	sw.held, sw.sizes, sw.closed = 0, nil, true
	sw.freed.Broadcast()
	sw.mu.Unlock()
	sw.gate.Release(n)
}

type streamWindowKey struct{}

// streamWindowOf is the window of the streaming call ctx belongs to; nil
// when the call was not served through the request guard.
func streamWindowOf(ctx context.Context) *streamWindow {
	sw, _ := ctx.Value(streamWindowKey{}).(*streamWindow)
	return sw
}

// serveStream serves a streaming call whose request messages are held in
// a window: no body read deadline for the stream, one per message.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, next http.Handler, gate *reqlimit.Gate) {
	lim := s.opts.Limits
	sw := newStreamWindow(gate, lim.StreamWindowBytes)
	defer sw.close()
	b := &streamBody{body: r.Body, win: sw, ctx: r.Context(), timeout: lim.BodyReadTimeout,
		limit: int64(lim.MaxRequestBytes) + reqlimit.EnvelopeSlack, maxRequest: lim.MaxRequestBytes}
	b.timer = time.AfterFunc(time.Hour, func() {
		b.timedOut.Store(true)
		_ = b.body.Close()
	})
	b.timer.Stop()
	defer b.timer.Stop()
	r2 := r.WithContext(context.WithValue(r.Context(), streamWindowKey{}, sw))
	r2.Body = b
	next.ServeHTTP(w, r2)
}

// streamBody reads a stream of enveloped messages (gRPC and Connect share
// the 5-byte envelope: flags, then a big-endian length): each message is
// admitted to the stream's window once its header is read, and must arrive
// within the body read timeout from there.
type streamBody struct {
	body    io.ReadCloser
	win     *streamWindow
	ctx     context.Context
	timeout time.Duration
	// timer closes the body when a message takes longer than timeout.
	timer    *time.Timer
	timedOut atomic.Bool
	limit    int64
	// maxRequest is --max-request-bytes, for the message.
	maxRequest int

	hdr    [5]byte
	hdrN   int
	inBody bool
	remain int64 // bytes of the current message still to read
	err    error // returned by the next Read (an admission failure)
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !b.inBody {
		// Connect reads the header on its own, then the message: a read
		// never spans two messages.
		p = p[:min(len(p), len(b.hdr)-b.hdrN)]
		n, err := b.body.Read(p)
		copy(b.hdr[b.hdrN:], p[:n])
		b.hdrN += n
		if b.hdrN < len(b.hdr) {
			return n, b.readErr(err)
		}
		size := int64(binary.BigEndian.Uint32(b.hdr[1:]))
		b.hdrN, b.inBody, b.remain = 0, size > 0, size
		switch {
		case size > b.limit:
			b.err = tooLarge(fmt.Errorf("%w: a stream message of %d bytes, the sidecar takes at most %d (--max-request-bytes): split the request", blobstore.ErrTooLarge, size, b.maxRequest))
		default:
			if aerr := b.win.admit(b.ctx, int64(len(b.hdr))+size); aerr != nil {
				b.err = aerr
			}
		}
		if b.err == nil && b.inBody {
			b.timer.Reset(b.timeout)
		}
		// The header is whole: an error comes with the next read, which
		// the caller makes for the message.
		return n, nil
	}
	p = p[:min(int64(len(p)), b.remain)]
	n, err := b.body.Read(p)
	b.remain -= int64(n)
	if b.remain == 0 {
		b.inBody = false
		b.timer.Stop()
	}
	return n, b.readErr(err)
}

// readErr says what a failed read means: a message that did not arrive in
// time names the timeout.
func (b *streamBody) readErr(err error) error {
	if err != nil && b.timedOut.Load() {
		return fmt.Errorf("a stream request message did not arrive within %v of its first bytes (--body-read-timeout): %w", b.timeout, err)
	}
	return err
}

func (b *streamBody) Close() error { return b.body.Close() }
