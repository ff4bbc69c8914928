package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// streamEnd is the error that ends an append stream: its cause, and the
// highest request id whose ops went to the shard's writer. Every request
// above it was not written; one at or below it that was not acknowledged
// may or may not be in the log.
type streamEnd struct {
	err      error
	admitted uint64
}

func (e *streamEnd) Error() string {
	return fmt.Sprintf("%v (append stream ended; requests above id %d were not written)", e.err, e.admitted)
}

func (e *streamEnd) Unwrap() error { return e.err }

// streamItem is one request of a stream on its way to its answer, or the
// end of the stream's requests.
type streamItem struct {
	id      uint64
	pending *translog.Pending
	w       *translog.Writer
	start   time.Time
	sent    int64 // steady time before it was queued: the ownership proof's bound
	refused error // nothing of it was written; answered at once
	end     bool  // no request follows: err ends the stream (nil: the client closed its side)
	err     error
}

// appendStream is one AppendStream call. Its reader takes requests in
// order, refuses or queues each in the shard's writer (waiting for
// in-flight room: the stream's flow control), and hands them on; the
// call's own goroutine answers them in the same order, each once its
// append completed. The writer acknowledges in the order it queued, so
// that is the order of durability.
type appendStream struct {
	s     *Server
	items chan streamItem
	done  chan struct{} // closed when the call returns
	win   *streamWindow

	// Set by the reader alone.
	name         string
	sh           *shard
	expectedTerm int64
	lastID       uint64
	// batchAnswers is set from the first request, before it is handed
	// on: the call's goroutine reads it after taking that request.
	batchAnswers bool

	// actx is what queueing waits under; stopAdmit cancels it when the
	// call ends, and mu makes admitted final once stopped is set: the
	// reader holds mu from its check of stopped until the request it
	// queues is counted.
	actx      context.Context
	stopAdmit context.CancelFunc
	mu        sync.Mutex
	stopped   bool
	admitted  uint64
}

// streamQueue bounds the requests read ahead of their answers, besides the
// stream's window (bytes) and the writer's in-flight bytes.
const streamQueue = 1024

// AppendStream appends the ops of a stream of requests to one shard (the
// API's AppendStream): recv returns the next request (io.EOF once the
// client closed its side), send answers one. It returns nil once every
// request of a closed stream was answered, or the error that ended the
// stream, a *streamEnd naming the last request admitted.
func (s *Server) AppendStream(ctx context.Context, recv func() (*sidecarv1.AppendStreamRequest, error), send func(*sidecarv1.AppendStreamResponse) error) error {
	actx, stop := context.WithCancel(ctx)
	st := &appendStream{s: s, items: make(chan streamItem, streamQueue), done: make(chan struct{}), win: streamWindowOf(ctx), actx: actx, stopAdmit: stop}
	defer close(st.done)
	defer st.end(nil)
	go st.read(recv)
	var held *streamItem // taken from items, answered by the next message
	for {
		var it streamItem
		if held != nil {
			it, held = *held, nil
		} else {
			select {
			case it = <-st.items:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if it.end {
			return it.err
		}
		resp, err := st.answer(ctx, it)
		if err != nil {
			return err
		}
		n := 1
		var ended error
		// With batch_answers, the requests already complete ride along:
		// one message and one flush for all a sync acknowledged.
		for st.batchAnswers && len(resp.More) < maxBatchedAnswers {
			var next streamItem
			select {
			case next = <-st.items:
			default:
			}
			if next.id == 0 && !next.end {
				break // nothing queued
			}
			if next.end || (next.refused == nil && !isDone(next.pending)) {
				held = &next
				break
			}
			r, err := st.answer(ctx, next)
			if err != nil {
				ended = err
				break
			}
			resp.More = append(resp.More, r)
			n++
		}
		if err := send(resp); err != nil {
			return err
		}
		for range n {
			st.win.answered()
		}
		if ended != nil {
			return ended
		}
	}
}

// maxBatchedAnswers bounds the answers of one response message.
const maxBatchedAnswers = 256

func isDone(p *translog.Pending) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// answer waits for it's append and returns its answer, or the error that
// ends the stream (the shard fenced, closed or failed).
func (st *appendStream) answer(ctx context.Context, it streamItem) (*sidecarv1.AppendStreamResponse, error) {
	s := st.s
	resp := &sidecarv1.AppendStreamResponse{RequestId: it.id}
	if it.refused != nil {
		s.metrics.appends.WithLabelValues(reasonLabel(it.refused)).Inc()
		resp.Refused = refusalProto(st.name, it.refused)
		return resp, nil
	}
	select {
	case <-it.pending.Done():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ack, err := it.pending.Result()
	if err != nil {
		err = s.appendFailed("AppendStream", st.sh, context.Background(), it.w, err)
		s.metrics.appends.WithLabelValues(reasonLabel(err)).Inc()
		return nil, st.end(err)
	}
	s.metrics.appends.WithLabelValues("ok").Inc()
	s.metrics.ackedOps.Add(float64(ack.Count))
	s.metrics.ackLatency.Observe(time.Since(it.start).Seconds())
	st.sh.acked(ack, it.sent)
	s.noteObserved(st.sh, ack)
	resp.Ack = appendResponse(ack)
	return resp, nil
}

// end stops admissions for good and returns err as the stream's end (nil
// stays nil): from here on no request of the stream reaches the writer.
func (st *appendStream) end(err error) error {
	st.stopAdmit()
	st.mu.Lock()
	st.stopped = true
	admitted := st.admitted
	st.mu.Unlock()
	if err == nil {
		return nil
	}
	return &streamEnd{err: err, admitted: admitted}
}

// push hands an item to the call's goroutine; false once the call ended.
func (st *appendStream) push(it streamItem) bool {
	select {
	case st.items <- it:
		return true
	case <-st.done:
		return false
	}
}

// read takes the stream's requests until it ends.
func (st *appendStream) read(recv func() (*sidecarv1.AppendStreamRequest, error)) {
	for {
		req, err := recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				st.push(streamItem{end: true})
				return
			}
			st.push(streamItem{end: true, err: st.endHere(fmt.Errorf("reading the stream: %w", err), "")})
			return
		}
		it, ok := st.admit(req)
		if !ok {
			return
		}
		if !st.push(it) || it.end {
			return
		}
	}
}

// endHere is the reader's end of the stream: err, which no request
// admitted before it changes.
func (st *appendStream) endHere(err error, hint string) error {
	var ce *connect.Error
	var e *Error
	if !errors.As(err, &ce) && !errors.As(err, &e) {
		err = opErr("AppendStream", st.name, err, hint)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.stopped = true
	return &streamEnd{err: err, admitted: st.admitted}
}

// admit refuses req, queues it in the writer, or ends the stream on it;
// false when the call already ended.
func (st *appendStream) admit(req *sidecarv1.AppendStreamRequest) (streamItem, bool) {
	const op = "AppendStream"
	s := st.s
	end := func(err error, hint string) (streamItem, bool) {
		return streamItem{end: true, err: st.endHere(err, hint)}, true
	}
	id := req.GetRequestId()
	if id <= st.lastID {
		return end(fmt.Errorf("%w: request id %d is not above the previous request's %d", ErrInvalidArgument, id, st.lastID), "number the requests of a stream from 1 up")
	}
	st.lastID = id
	if st.sh == nil {
		st.name, st.expectedTerm, st.batchAnswers = req.GetShard(), req.GetExpectedTerm(), req.GetBatchAnswers()
		sh, err := s.get(op, st.name)
		if err != nil {
			return streamItem{end: true, err: st.endHere(err, "")}, true
		}
		st.sh = sh
	} else if (req.GetShard() != "" && req.GetShard() != st.name) || (req.GetExpectedTerm() != 0 && req.GetExpectedTerm() != st.expectedTerm) {
		return end(fmt.Errorf("%w: request %d names shard %q at term %d; the stream is bound to shard %q at term %d by its first request", ErrInvalidArgument, id, clip(req.GetShard()), req.GetExpectedTerm(), st.name, st.expectedTerm), "open one stream per shard")
	}
	ops := req.GetOps()
	if hint, err := s.opts.Limits.checkOps(ops); err != nil {
		return streamItem{id: id, refused: opErr(op, st.name, err, hint)}, true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		return streamItem{}, false
	}
	sh := st.sh
	if cur := s.reg.lookup(st.name); cur != sh {
		st.stopped = true
		return streamItem{end: true, err: &streamEnd{admitted: st.admitted,
			err: opErr(op, st.name, fmt.Errorf("%w: the shard this stream appended to was closed or replaced here", translog.ErrClosed), "open a new stream")}}, true
	}
	if err := s.appendable(op, sh, st.expectedTerm); err != nil {
		st.stopped = true
		return streamItem{end: true, err: &streamEnd{err: err, admitted: st.admitted}}, true
	}
	w := sh.writer()
	start, sent := time.Now(), s.clock.Now()
	p, err := w.Enqueue(st.actx, ops)
	switch {
	case err == nil:
		st.admitted = id
		return streamItem{id: id, pending: p, w: w, start: start, sent: sent}, true
	case errors.Is(err, blobstore.ErrTooLarge) || errors.Is(err, fence.ErrInvalidArgument):
		// Measured before anything was queued.
		return streamItem{id: id, refused: opErr(op, st.name, err, "split the request")}, true
	case st.actx.Err() != nil:
		// The call ended while the request waited for in-flight room.
		st.stopped = true
		return streamItem{}, false
	}
	st.stopped = true
	return streamItem{end: true, err: &streamEnd{err: s.appendFailed(op, sh, context.Background(), w, err), admitted: st.admitted}}, true
}

// refusalProto is err as the refusal of one request of a stream.
func refusalProto(shard string, err error) *sidecarv1.AppendRefusal {
	out := &sidecarv1.AppendRefusal{Code: connect.CodeInternal.String(), Message: clipN(err.Error(), maxErrorMessage)}
	var ce *connect.Error
	if errors.As(connectError(shard, err), &ce) {
		out.Code, out.Message = ce.Code().String(), ce.Message()
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ed, ok := v.(*sidecarv1.ErrorDetail); ok {
					out.Detail = ed
				}
			}
		}
	}
	return out
}
