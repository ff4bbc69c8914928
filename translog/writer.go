package translog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/testhooks"
)

// Writer appends ops to one term of a shard's translog. Append is safe for
// concurrent use. One committer goroutine runs the syncs; Close drains it
// and must be called to release it.
//
// The Writer is the driver of a pure pipeline (pipeline.go), which holds
// the state and makes every decision: admission, batches, the order of a
// sync's requests, lease coverage, acknowledgement order and fencing. The
// Writer owns the goroutines, the clock and the store requests
// (steps.go), and steps the pipeline under its lock with what happened.
type Writer struct {
	store    *blobstore.Container
	chain    *fence.Chain // nil when fencing is disabled
	opts     Options
	clock    clock.Clock
	inline   int
	ctx      context.Context // the syncs' requests; cancelled when Close gives up
	cancel   context.CancelFunc
	arrived  chan struct{}
	closeCh  chan struct{}
	loopDone chan struct{}
	pipe     chan struct{} // md creates in flight in the pipelined order
	checked  chan struct{} // a create-only fence check ended
	mdWG     sync.WaitGroup

	mu       sync.Mutex
	p        pipeline
	space    chan struct{} // closed and replaced whenever appends complete
	health   StoreHealth
	retrying int // sync steps retrying store errors now
	// waiting holds when each store request of a sync step now in
	// flight was sent, by a sequence number (see StoreHealth.WaitingSince).
	waiting map[uint64]time.Time
	waitSeq uint64
	acked   int64 // generations acknowledged when LastSync was taken
}

// Open starts a writer for the chain's term (or, with FencingDisabled, for
// opts.Term). It checks that the store enforces the conditional writes the
// protocol relies on, as advertised; the caller probes the real store with
// blobstore.ProbePreconditions at start-up.
func Open(ctx context.Context, store *blobstore.Container, chain *fence.Chain, opts Options) (*Writer, error) {
	opts, inline, err := opts.check(store, chain)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &Writer{
		store: store, chain: chain, opts: opts, clock: opts.Clock, inline: inline, ctx: wctx, cancel: cancel,
		arrived: make(chan struct{}, 1), closeCh: make(chan struct{}), loopDone: make(chan struct{}),
		pipe: make(chan struct{}, opts.MaxPipeline), checked: make(chan struct{}, 1), space: make(chan struct{}), p: newPipeline(opts),
	}
	if testhooks.On(ctx, testhooks.ClaimIsFirstCheck) {
		w.p.confirmed = true // the checker's wrong design: acks before any check
	}
	go w.loop()
	return w, nil
}

// Append queues ops and blocks until they are durable and fenced: the md of
// their generation exists, the fence CAS for it succeeded (or, in lease
// mode, the lease covers the ack), and every lower generation was
// acknowledged. On a context error the ops may still become durable (the
// error is ambiguous); on a *fence.FencedError they never will be
// acknowledged by this writer. Append does not copy ops: the caller must
// not change them until Append returns.
func (w *Writer) Append(ctx context.Context, ops [][]byte) (Ack, error) {
	p, err := w.Enqueue(ctx, ops)
	if err != nil {
		return Ack{}, err
	}
	select {
	case <-p.e.wake:
		return p.e.ack, p.e.err
	case <-ctx.Done():
		return Ack{}, w.p.opErr("Append", blobstore.Ambiguous(ctx.Err()))
	}
}

// Pending is an append Enqueue queued: it completes once, with an ack or
// the error that ended it.
type Pending struct{ e *entry }

// Done is closed once the append completed.
func (p *Pending) Done() <-chan struct{} { return p.e.wake }

// Result waits for the append to complete and returns its ack, or its
// error: the writer's terminal error (fenced, broken, closed), after which
// the ops may or may not be durable but are never acknowledged.
func (p *Pending) Result() (Ack, error) {
	<-p.e.wake
	return p.e.ack, p.e.err
}

// Enqueue queues ops like Append but returns once they are queued, without
// waiting for their ack: it waits only for in-flight room. An error means
// nothing was queued (ctx ended while it waited: the ops were not
// written). Appends complete in the order they were queued, and an
// append's ops follow the ops of every append queued before it, so a
// caller that enqueues in order and waits in order gets its acks in the
// order of durability. Enqueue does not copy ops: the caller must not
// change them until the append completed.
func (w *Writer) Enqueue(ctx context.Context, ops [][]byte) (*Pending, error) {
	size, err := w.p.measure(ops)
	if err != nil {
		return nil, err
	}
	e := &entry{ops: ops, size: size, wake: make(chan struct{})}
	w.mu.Lock()
	w.p.checkFenced(w.instanceErr())
	w.deliverLocked()
	for {
		queued, err := w.p.enqueue(e)
		if err != nil {
			w.mu.Unlock()
			return nil, err
		}
		if queued {
			break
		}
		space := w.space
		w.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			// Nothing was queued: the ops were not written.
			return nil, w.p.opErr("Append", ctx.Err())
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	select {
	case w.arrived <- struct{}{}:
	default:
	}
	return &Pending{e: e}, nil
}

// Err returns the writer's terminal error (fenced, broken or closed), or
// nil while it accepts appends. A writer whose chain's instance was fenced
// elsewhere reports that fencing, and its appends have failed.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.p.checkFenced(w.instanceErr())
	w.deliverLocked()
	return w.p.err
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats { return read(w, func(p *pipeline) Stats { return p.stats }) }

// NextGen is the generation the next sync will write.
func (w *Writer) NextGen() int64 { return read(w, func(p *pipeline) int64 { return p.nextGen }) }

// NextSeqNo is the sequence number the next appended op will get. After
// Close it is where a successor writer of the same lineage (a relocation
// target, or this writer's own resumption after an aborted handoff)
// continues, together with NextGen.
func (w *Writer) NextSeqNo() int64 { return read(w, func(p *pipeline) int64 { return p.nextSeqNo }) }

// Close stops taking appends, syncs what is queued, and waits for the
// committer. If ctx ends first, syncs in progress are abandoned and their
// appends fail with ErrClosed (their outcome unknown).
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.p.close() {
		close(w.closeCh)
	}
	w.mu.Unlock()
	var err error
	select {
	case <-w.loopDone:
	case <-ctx.Done():
		w.cancel()
		<-w.loopDone
		err = w.p.opErr("Close", fmt.Errorf("%w: abandoned syncs in progress: %w", ErrClosed, ctx.Err()))
	}
	w.cancel()
	return err
}

// instanceErr is the chain's instance fencing, the pipeline's input.
func (w *Writer) instanceErr() error {
	if w.chain == nil {
		return nil
	}
	return w.chain.Err()
}

// read returns what f reads of the pipeline, under the writer's lock.
func read[T any](w *Writer, f func(p *pipeline) T) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return f(&w.p)
}

// locked steps the pipeline under the lock and delivers what completed.
func (w *Writer) locked(f func(p *pipeline)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.p)
	w.deliverLocked()
}

// deliverLocked wakes the appends the pipeline completed and the appends
// waiting for in-flight room.
func (w *Writer) deliverLocked() {
	if w.p.acked != w.acked {
		w.health.LastSync, w.acked = time.Now(), w.p.acked
	}
	done := w.p.deliver()
	for _, e := range done {
		close(e.wake)
	}
	if len(done) > 0 {
		close(w.space)
		w.space = make(chan struct{})
	}
}

// loop is the committer: it cuts batches and runs syncs, one CAS at a time.
func (w *Writer) loop() {
	defer close(w.loopDone)
	for {
		batch, ok := w.gather()
		if !ok {
			break
		}
		w.startCheck(false)
		w.awaitWindow()
		w.sync(batch)
	}
	w.mdWG.Wait()
	w.locked(func(p *pipeline) { p.fail(p.opErr("Close", ErrClosed)) })
}

// gather waits for appends and takes a batch of them, waiting on the
// clock for a larger one when the pipeline says so.
func (w *Writer) gather() ([]*entry, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.p.idle() {
		if w.p.closing {
			return nil, false
		}
		w.mu.Unlock()
		select {
		case <-w.arrived:
		case <-w.closeCh:
		}
		w.mu.Lock()
	}
	if delay := w.p.gatherDelay(); delay > 0 {
		timer := w.clock.After(delay)
	wait:
		for w.p.short() {
			w.mu.Unlock()
			select {
			case <-w.arrived:
			case <-timer:
				w.mu.Lock()
				break wait
			case <-w.closeCh:
			}
			w.mu.Lock()
		}
	}
	return w.p.cut(), true
}

// sync runs one generation: the data object if large, then the md create
// and the fence CAS in the order the pipeline chose.
func (w *Writer) sync(batch []*entry) {
	var s *syncState
	w.locked(func(p *pipeline) { s = p.start(batch, w.clock.Now(), w.instanceErr()) })
	if s == nil {
		return
	}
	ops := s.ops()
	payload := EncodeOps(ops)
	md := MD{Kind: KindSync, Shard: w.opts.Shard, Term: w.opts.Term, Gen: s.gen, Allocation: w.opts.Allocation, PrevGen: s.gen - 1,
		FirstSeqNo: s.firstSeqNo, OpCount: int64(len(ops)), PayloadLen: int64(len(payload)), Checksum: Checksum(payload)}
	if len(payload) <= w.inline {
		md.Inline, md.Payload = true, payload
	} else if err := w.putData(s.gen, payload); err != nil {
		w.record(outcome{sync: s, step: stepMD, err: err})
		return
	}
	body, err := EncodeMD(md)
	if err != nil {
		w.record(outcome{sync: s, step: stepMD, err: err})
		return
	}
	var ord order
	w.locked(func(p *pipeline) {
		p.prepared(len(ops), len(payload), !md.Inline)
		ord = p.orderFor(w.clock.Now())
	})
	md.Payload = nil // the comparison on settle needs only the header

	switch ord {
	case mdOnly, mdFenced:
		// No CAS: unfenced, or create-only, where the md create is the
		// fence (a successor's poison makes it fail).
		w.record(outcome{sync: s, step: stepCAS})
		w.record(outcome{sync: s, step: stepMD, err: w.createMD(md, body)})
	case pipelined:
		w.pipe <- struct{}{}
		w.mdWG.Go(func() {
			defer func() { <-w.pipe }()
			w.record(outcome{sync: s, step: stepMD, err: w.createMD(md, body)})
		})
		w.record(w.advance(s))
	case mdThenCAS:
		err := w.createMD(md, body)
		w.record(outcome{sync: s, step: stepMD, err: err})
		if err == nil {
			w.record(w.advance(s))
		}
	case mdWithCAS:
		var mdErr error
		var wg sync.WaitGroup
		wg.Go(func() { mdErr = w.createMD(md, body) })
		cas := w.advance(s)
		wg.Wait()
		w.record(outcome{sync: s, step: stepMD, err: mdErr})
		w.record(cas)
	case inLease:
		err := w.createMD(md, body)
		w.record(outcome{sync: s, step: stepMD, err: err})
		covered := true
		if err == nil {
			w.locked(func(p *pipeline) { covered = p.leaseCovers(s, w.clock.Now(), w.instanceErr()) })
		}
		if !covered {
			// The md took longer than the lease had left.
			w.record(w.advance(s))
		}
	}
}

// record steps the pipeline with the outcome of a request of a sync.
func (w *Writer) record(o outcome) {
	w.locked(func(p *pipeline) { p.record(o, w.clock.Now(), w.instanceErr()) })
}

// Lease is the lease-mode state: when the last successful fence CAS was
// sent (Valid false before the first).
func (w *Writer) Lease() LeaseState { return read(w, func(p *pipeline) LeaseState { return p.lease }) }

// ObservedFencing returns, in Observe mode, the refused fence CAS that
// PerSync mode would have failed every later append with; nil while there
// was none, and always nil in the other modes.
func (w *Writer) ObservedFencing() error {
	return read(w, func(p *pipeline) error { return p.observed })
}
