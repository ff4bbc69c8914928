package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/tick"
)

// Ack says where the ops of one Append landed: sequence numbers
// FirstSeqNo .. FirstSeqNo+Count-1 of generation Gen of term Term.
type Ack struct {
	Term, Gen, FirstSeqNo int64
	Count                 int
	// FencingObserved is set on a shard in observe mode when per-sync
	// fencing would have failed this append: it says why.
	FencingObserved string
}

// Shard appends to one shard over one stream at a time. It is safe for
// concurrent use; get it from Client.Shard or Client.ShardAt.
type Shard struct {
	c    *Client
	name string
	term int64

	mu       sync.Mutex
	conn     *conn   // the sidecar appended to; a redirect changes it
	queue    []*call // waiting to be sent, in arrival order
	started  bool
	closed   bool
	redirect *Owner // a handoff to follow before the next stream
	// returning counts the calls acknowledged since the sender last took
	// a batch: callers in a loop append again at once, and the sender
	// lets them (see take) so they share one request.
	returning int
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
}

// call is one Append on its way.
type call struct {
	ctx  context.Context
	ops  [][]byte
	size int
	at   time.Time
	// solo: send alone (a request it was coalesced into was refused).
	solo bool
	// sent and finished are guarded by Shard.mu.
	sent     bool
	finished bool
	done     chan struct{}
	ack      Ack
	err      error
}

// Shard returns the appender of shard name at whatever term it is open at.
func (c *Client) Shard(name string) *Shard { return c.ShardAt(name, 0) }

// ShardAt returns the appender of shard name that appends only while the
// shard is open at term (the API's expected_term): a primary that was
// demoted learns it before anything is written. Term 0 is any term.
func (c *Client) ShardAt(name string, term int64) *Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := shardKey{name, term}
	if sh := c.shards[k]; sh != nil {
		return sh
	}
	sh := &Shard{c: c, name: name, term: term, conn: c.conn, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), closed: c.closed}
	c.shards[k] = sh
	return sh
}

// Name is the shard's id.
func (sh *Shard) Name() string { return sh.name }

// Barrier is Client.Barrier for this shard (at the term ShardAt named).
func (sh *Shard) Barrier(ctx context.Context) (BarrierResult, error) {
	return sh.c.Barrier(ctx, sh.name, sh.term)
}

// Append appends ops (at least one) and returns once they are durable and
// fenced. On error, IsOutcomeUnknown says whether the ops may be in the
// log; the package doc says what a caller may assume and how to find out.
// Append does not copy ops: do not change them before it returns.
func (sh *Shard) Append(ctx context.Context, ops ...[]byte) (Ack, error) {
	if len(ops) == 0 {
		return Ack{}, &Error{Op: "Append", Shard: sh.name, Code: connect.CodeInvalidArgument, Reason: "invalid_argument", Err: errors.New("no ops")}
	}
	cl := &call{ctx: ctx, ops: ops, at: time.Now(), done: make(chan struct{})}
	for _, o := range ops {
		cl.size += len(o)
	}
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return Ack{}, &Error{Op: "Append", Shard: sh.name, Code: connect.CodeCanceled, Err: errors.New("the client is closed")}
	}
	sh.queue = append(sh.queue, cl)
	if !sh.started {
		sh.started = true
		go sh.run()
	}
	sh.mu.Unlock()
	sh.signal()
	select {
	case <-cl.done:
		return cl.ack, cl.err
	case <-ctx.Done():
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cl.finished {
		return cl.ack, cl.err
	}
	e := &Error{Op: "Append", Shard: sh.name, Code: connect.CodeOf(ctx.Err()), Err: ctx.Err()}
	if !cl.sent {
		// Still waiting to be sent: it never will be.
		sh.removeLocked(cl)
		sh.finishLocked(cl, Ack{}, e)
		return Ack{}, e
	}
	e.OutcomeUnknown = true
	return Ack{}, e
}

func (sh *Shard) signal() {
	tick.Kick(sh.wake)
}

func (sh *Shard) removeLocked(cl *call) {
	for i, q := range sh.queue {
		if q == cl {
			sh.queue = append(sh.queue[:i], sh.queue[i+1:]...)
			return
		}
	}
}

// finishLocked answers cl once.
func (sh *Shard) finishLocked(cl *call, ack Ack, err error) {
	if cl.finished {
		return
	}
	cl.finished, cl.ack, cl.err = true, ack, err
	close(cl.done)
}

func (sh *Shard) finish(cl *call, ack Ack, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.finishLocked(cl, ack, err)
}

// requeue puts calls that were not written back at the front of the
// queue, to be sent again (alone when solo).
func (sh *Shard) requeue(calls []*call, solo bool) {
	sh.mu.Lock()
	var keep []*call
	for _, cl := range calls {
		if cl.finished {
			continue
		}
		if sh.closed {
			sh.finishLocked(cl, Ack{}, &Error{Op: "Append", Shard: sh.name, Code: connect.CodeCanceled, Err: errors.New("the client is closed")})
			continue
		}
		cl.sent = false
		cl.solo = cl.solo || solo
		keep = append(keep, cl)
	}
	sh.queue = append(keep, sh.queue...)
	sh.mu.Unlock()
	sh.signal()
}

// close fails the calls waiting to be sent, lets the stream answer what it
// was sent (for a few seconds at most) and stops the sender.
func (sh *Shard) close() {
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return
	}
	sh.closed = true
	for _, cl := range sh.queue {
		sh.finishLocked(cl, Ack{}, &Error{Op: "Append", Shard: sh.name, Code: connect.CodeCanceled, Err: errors.New("the client is closed")})
	}
	sh.queue = nil
	started := sh.started
	sh.mu.Unlock()
	close(sh.stop)
	if started {
		<-sh.done
	}
}

// closeWait bounds how long Close waits for a stream's answers.
const closeWait = 5 * time.Second

// run is the shard's sender: it takes the waiting calls, opens a stream
// when there is none, and sends them as one request.
func (sh *Shard) run() {
	defer close(sh.done)
	var st *stream
	failures := 0
	defer func() {
		if st != nil {
			st.closeSend(closeWait)
		}
	}()
	for {
		batch, ok := sh.take(&st)
		if !ok {
			return
		}
		if st == nil {
			var err error
			if st, err = sh.openStream(); err != nil {
				sh.failBatch(batch, err)
				continue
			}
		}
		if st.send(batch) {
			continue
		}
		// The stream ended: its receiver settled every request of it, this
		// batch included.
		select {
		case <-st.done:
		case <-sh.stop:
			st.cancel()
			<-st.done
		}
		if (st.neverAnswered && st.notSent) || st.retryLater {
			failures++
			select {
			case <-time.After(retryDelay(failures)):
			case <-sh.stop:
			}
		} else {
			failures = 0
		}
		st = nil
	}
}

// failBatch answers calls that cannot be sent (no stream could be made).
func (sh *Shard) failBatch(batch []*call, err error) {
	for _, cl := range batch {
		sh.finish(cl, Ack{}, &Error{Op: "Append", Shard: sh.name, Code: connect.CodeOf(err), Err: err})
	}
}

// take waits for calls and returns the next request's: the waiting calls
// in order, up to the batch bounds (a solo call alone), after the linger.
// An idle stream is closed meanwhile. False once the shard is closed.
func (sh *Shard) take(st **stream) ([]*call, bool) {
	cfg := sh.c.cfg
	var idle, recall *time.Timer
	defer func() {
		if idle != nil {
			idle.Stop()
		}
		if recall != nil {
			recall.Stop()
		}
	}()
	yields, seen, recalled := 0, 0, false
	for {
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			return nil, false
		}
		if q := len(sh.queue); q > 0 && q < sh.returning && !recalled {
			// Callers an ack just woke append again at once in a loop:
			// let them queue first, so they share this request instead
			// of each sending its own (a request costs a frame and a
			// system call on both sides, and the sidecar's work per
			// request). Yield while that brings more of them (they are
			// runnable, not yet run), then wait for the rest until they
			// are all back or returnWait passed.
			sh.mu.Unlock()
			if yields < maxYields && (yields == 0 || q > seen) {
				yields, seen = yields+1, q
				runtime.Gosched()
				continue
			}
			if recall == nil {
				recall = time.NewTimer(returnWait)
			}
			select {
			case <-sh.wake: // one more is back
			case <-recall.C:
				recalled = true
			case <-sh.stop:
			}
			continue
		}
		var wait time.Duration
		if len(sh.queue) > 0 {
			n, size, ops := 0, 0, 0
			for n < len(sh.queue) {
				cl := sh.queue[n]
				if n > 0 && (cl.solo || size+cl.size > cfg.maxBatchBytes || ops+len(cl.ops) > cfg.maxBatchOps) {
					break
				}
				n++
				size += cl.size
				ops += len(cl.ops)
				if cl.solo {
					break
				}
			}
			full := n < len(sh.queue) || size >= cfg.maxBatchBytes || ops >= cfg.maxBatchOps
			if wait = cfg.linger - time.Since(sh.queue[0].at); wait <= 0 || full {
				batch := append([]*call(nil), sh.queue[:n]...)
				sh.queue = append(sh.queue[:0], sh.queue[n:]...)
				for _, cl := range batch {
					cl.sent = true
				}
				sh.returning = 0
				sh.mu.Unlock()
				return batch, true
			}
		}
		sh.mu.Unlock()
		var timer <-chan time.Time
		var linger *time.Timer
		if wait > 0 {
			linger = time.NewTimer(wait)
			timer = linger.C
		}
		var idleC <-chan time.Time
		if *st != nil && wait <= 0 {
			if idle == nil {
				idle = time.NewTimer(cfg.idleStream)
			}
			idleC = idle.C
		}
		select {
		case <-sh.wake:
		case <-timer:
		case <-sh.stop:
		case <-(*st).doneOrNil():
			*st = nil
		case <-idleC:
			(*st).closeSend(closeWait)
			*st = nil
			idle = nil
		}
		if linger != nil {
			linger.Stop()
		}
	}
}

// maxYields bounds the yields of one take to callers on their way back,
// and returnWait its wait for the callers the yields did not bring: at most
// this is added to a request's latency when acknowledged callers do not
// append again.
const (
	maxYields  = 8
	returnWait = 100 * time.Microsecond
)

// openStream opens a stream to the shard's sidecar, following a handoff
// first when one is pending.
func (sh *Shard) openStream() (*stream, error) {
	sh.mu.Lock()
	to := sh.redirect
	sh.redirect = nil
	cn := sh.conn
	sh.mu.Unlock()
	if to != nil && sh.c.cfg.redirect != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		addr, err := sh.c.cfg.redirect(ctx, sh.name, *to)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("following the handoff of shard %q to allocation %q: %w", sh.name, to.Allocation, err)
		}
		if cn, err = sh.c.connTo(addr); err != nil {
			return nil, err
		}
		sh.mu.Lock()
		sh.conn = cn
		sh.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &stream{sh: sh, bidi: cn.svc.AppendStream(ctx), cancel: cancel, done: make(chan struct{}), neverAnswered: true}
	go st.receive()
	return st, nil
}

// stream is one AppendStream: requests sent and not yet answered, in
// order.
type stream struct {
	sh     *Shard
	bidi   *connect.BidiStreamForClient[sidecarv1.AppendStreamRequest, sidecarv1.AppendStreamResponse]
	cancel context.CancelFunc
	done   chan struct{} // closed once every request of it was settled

	mu       sync.Mutex
	inflight []*request
	nextID   uint64
	ended    bool
	sendMu   sync.Mutex
	halfShut bool
	// neverAnswered and notSent describe how it ended: no answer came and
	// the sidecar was never reached; retryLater: requests went back to the
	// queue for a transient refusal.
	neverAnswered, notSent, retryLater bool
}

type request struct {
	id    uint64
	calls []*call
	ops   int
}

func (st *stream) doneOrNil() <-chan struct{} {
	if st == nil {
		return nil
	}
	return st.done
}

// send sends batch as the stream's next request; false when the stream
// ended (its receiver settles batch, or it was requeued).
func (st *stream) send(batch []*call) bool {
	req := &sidecarv1.AppendStreamRequest{}
	for _, cl := range batch {
		req.Ops = append(req.Ops, cl.ops...)
	}
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		st.sh.requeue(batch, false)
		return false
	}
	st.nextID++
	req.RequestId = st.nextID
	if st.nextID == 1 {
		req.Shard, req.ExpectedTerm, req.BatchAnswers = st.sh.name, st.sh.term, true
	}
	st.inflight = append(st.inflight, &request{id: req.RequestId, calls: batch, ops: len(req.Ops)})
	st.mu.Unlock()
	st.sendMu.Lock()
	err := st.bidi.Send(req)
	st.sendMu.Unlock()
	return err == nil
}

// closeSend ends the stream's requests: the sidecar answers what it was
// sent and ends the stream. After wait it is cut.
func (st *stream) closeSend(wait time.Duration) {
	st.sendMu.Lock()
	if !st.halfShut {
		st.halfShut = true
		_ = st.bidi.CloseRequest()
	}
	st.sendMu.Unlock()
	go func() {
		select {
		case <-st.done:
		case <-time.After(wait):
			st.cancel()
		}
	}()
}

// receive matches the answers to the requests, in order, until the stream
// ends, then settles what is left.
func (st *stream) receive() {
	defer close(st.done)
	defer st.cancel()
	for {
		resp, err := st.bidi.Receive()
		if err != nil {
			st.end(err)
			return
		}
		// One message answers its request and, batched, the ones after it.
		answers := append([]*sidecarv1.AppendStreamResponse{resp}, resp.GetMore()...)
		st.mu.Lock()
		reqs := make([]*request, 0, len(answers))
		for i, a := range answers {
			if i >= len(st.inflight) || st.inflight[i].id != a.GetRequestId() || (i > 0 && len(a.GetMore()) > 0) {
				st.mu.Unlock()
				st.end(fmt.Errorf("protocol error: answer to request %d out of order", a.GetRequestId()))
				return
			}
			reqs = append(reqs, st.inflight[i])
		}
		st.inflight = st.inflight[len(reqs):]
		st.neverAnswered = false
		st.mu.Unlock()
		for i, req := range reqs {
			st.answer(req, answers[i])
		}
	}
}

// answer settles the calls of one answered request.
func (st *stream) answer(req *request, resp *sidecarv1.AppendStreamResponse) {
	sh := st.sh
	switch a, r := resp.GetAck(), resp.GetRefused(); {
	case a != nil && a.GetCount() == int64(req.ops):
		seq := a.GetFirstSeqNo()
		sh.mu.Lock()
		for _, cl := range req.calls {
			sh.finishLocked(cl, Ack{Term: a.GetTerm(), Gen: a.GetGen(), FirstSeqNo: seq, Count: len(cl.ops), FencingObserved: a.GetFencingObserved()}, nil)
			seq += int64(len(cl.ops))
		}
		sh.returning += len(req.calls)
		sh.mu.Unlock()
	case r != nil && len(req.calls) > 1:
		// Refused as a whole before anything was written: one caller's
		// ops, most likely; each goes again alone.
		sh.requeue(req.calls, true)
	case r != nil:
		e := &Error{Op: "Append", Shard: sh.name, Code: codeOf(r.GetCode()), Err: errors.New(r.GetMessage())}
		if d := r.GetDetail(); d != nil {
			e.fill(d)
		}
		sh.finish(req.calls[0], Ack{}, e)
	default:
		for _, cl := range req.calls {
			sh.finish(cl, Ack{}, &Error{Op: "Append", Shard: sh.name, Code: connect.CodeInternal, OutcomeUnknown: true,
				Err: fmt.Errorf("protocol error: answer to request %d acknowledges %d ops of %d", req.id, a.GetCount(), req.ops)})
		}
	}
}

// codeOf parses a code name of an AppendRefusal.
func codeOf(name string) connect.Code {
	var c connect.Code
	if c.UnmarshalText([]byte(name)) != nil {
		return connect.CodeUnknown
	}
	return c
}

// end settles the requests left when the stream ended with err: those the
// sidecar says it did not admit were not written (and are sent again where
// that is safe), the others have an unknown outcome.
func (st *stream) end(err error) {
	st.mu.Lock()
	st.ended = true
	left := st.inflight
	st.inflight = nil
	st.notSent = notSent(err)
	st.mu.Unlock()
	sh := st.sh
	d := detailOf(err)
	if d == nil && connect.IsWireError(err) {
		// The sidecar answered before the stream reached its handler (a
		// missing token, say): nothing of it was admitted.
		d = &sidecarv1.ErrorDetail{}
	}
	if d != nil && d.GetReason() == ReasonHandedOff && sh.c.cfg.redirect != nil {
		sh.mu.Lock()
		sh.redirect = &Owner{Allocation: d.GetAllocation(), Node: d.GetNode()}
		sh.mu.Unlock()
	}
	for _, req := range left {
		e := apiError("Append", sh.name, err)
		switch {
		case errors.Is(err, io.EOF):
			// The sidecar ended the stream without an error (we closed
			// our side) while this was unanswered: it cannot say.
			e.OutcomeUnknown = true
			e.Err = errors.New("the stream ended before the request was answered")
		case d != nil && req.id > d.GetLastAdmittedRequestId():
			// Never reached the writer.
			switch d.GetReason() {
			case ReasonSidecarBusy, ReasonHandingOff:
				// Transient: the same sidecar takes it later (or says
				// where the shard went).
				st.retryLater = true
				sh.requeue(req.calls, false)
				continue
			case ReasonHandedOff:
				if sh.c.cfg.redirect != nil {
					sh.requeue(req.calls, false)
					continue
				}
			}
		case d == nil && st.notSent:
			sh.requeue(req.calls, false)
			continue
		default:
			e.OutcomeUnknown = true
		}
		for _, cl := range req.calls {
			sh.finish(cl, Ack{}, e)
		}
	}
}
