package translog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/internal/retry"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/internal/steady"
)

// AckOrder is how one sync orders its md create and its fence CAS.
type AckOrder int

const (
	// Concurrent sends the md create and the CAS together: one round trip
	// per sync. Safe because md is create-only and successors poison.
	Concurrent AckOrder = iota
	// Sequenced creates the md, then CASes: two round trips, the order of
	// the reference design, kept for comparison.
	Sequenced
)

func (o AckOrder) String() string {
	if o == Sequenced {
		return "sequenced"
	}
	return "concurrent"
}

// FencingMode is how often a sync CASes the fence key.
type FencingMode int

const (
	// PerSync CASes on every sync.
	PerSync FencingMode = iota
	// Lease CASes at most once per lease interval and acks without a CAS
	// while the steady clock is inside the lease. The successor must wait
	// the interval plus a margin after its sweep.
	Lease
)

func (m FencingMode) String() string {
	if m == Lease {
		return "lease"
	}
	return "per_sync"
}

// Options configure a Writer. The fencing settings are fixed when the
// writer opens.
type Options struct {
	// Shard, Term and Allocation name the writer when fencing is
	// disabled; with fencing they come from the chain (and must match it
	// when set).
	Shard      string
	Term       int64
	Allocation string

	// StartGen is the first generation to write: the restore point's
	// generation + 1. Default 1.
	StartGen int64
	// StartSeqNo is the sequence number of the first op. Default 0.
	StartSeqNo int64

	AckOrder AckOrder
	// FencingDisabled runs the unfenced baseline: md creates only, no CAS.
	FencingDisabled bool
	FencingMode     FencingMode
	// LeaseInterval is the lease of Lease mode. Default 10s.
	LeaseInterval time.Duration

	// InlineLimit: payloads up to this size go inside the md; larger ones
	// are written to a data object first. Default 1 MiB, capped by the
	// store's conditional-body limit.
	InlineLimit int
	// MaxSyncBytes caps the payload of one sync. Default 16 MiB.
	MaxSyncBytes int64
	// MaxInFlightBytes caps the bytes appended but not yet acknowledged.
	// Append waits for room, or fails with ErrBackpressure if FailFast.
	// Default 64 MiB.
	MaxInFlightBytes int64
	FailFast         bool
	// MaxPipeline caps md creates in flight in Concurrent per-sync mode:
	// the next sync may start once the previous CAS returned, while its
	// md is still on the wire. Default 4.
	MaxPipeline int
	// MaxGatherDelay bounds how long a sync waits for a batch as large as
	// the previous one (at most 1/8 of the last sync's duration), so a
	// closed loop of appenders lands in one sync instead of splitting
	// into a tiny and a large one. Default 2ms; negative disables.
	MaxGatherDelay time.Duration

	Clock   steady.Clock
	Backoff retry.Backoff
}

// Ack says where the ops of one Append landed.
type Ack struct {
	Term       int64
	Gen        int64
	FirstSeqNo int64 // the ops got FirstSeqNo .. FirstSeqNo+Count-1
	Count      int
}

// Stats are the writer's counters.
type Stats struct {
	Syncs       int64
	Ops         int64
	Bytes       int64 // payload bytes
	CASWrites   int64 // fence advances sent by syncs
	LeaseSkips  int64 // syncs acknowledged inside the lease without a CAS
	DataObjects int64 // syncs whose payload went to a data object
}

// StoreHealth is what the writer has seen of the store. Syncs retry store
// trouble for as long as the writer is open (giving up would leave a
// generation's outcome unknown), so appends simply wait during an outage;
// this is how an operator learns why.
type StoreHealth struct {
	// LastError is the last store error a sync step retried; nil if none
	// was seen. It stays after the store recovered (see LastErrorAt).
	LastError   error
	LastErrorAt time.Time
	// RetryingSince is when the sync steps retrying now started failing;
	// zero when no step is retrying.
	RetryingSince time.Time
	// LastSync is when the writer last acknowledged a generation; zero
	// before the first.
	LastSync time.Time
	// Retries counts the store errors sync steps retried.
	Retries int64
}

// Retrying reports whether a sync step is retrying store errors now.
func (h StoreHealth) Retrying() bool { return !h.RetryingSince.IsZero() }

type request struct {
	ops  [][]byte
	size int64
	done chan struct{}
	ack  Ack
	err  error
}

type syncState struct {
	gen        int64
	firstSeqNo int64
	reqs       []*request
	started    int64
	mdOK       bool
	casOK      bool
	err        error
}

// Writer appends ops to one term of a shard's translog. Append is safe for
// concurrent use. One committer goroutine runs the syncs; Close drains it
// and must be called to release it.
type Writer struct {
	store    *blobstore.Container
	chain    *fence.Chain
	opts     Options
	shard    string
	term     int64
	alloc    string
	clock    steady.Clock
	fenced   bool
	inline   int
	ctx      context.Context
	cancel   context.CancelFunc
	arrived  chan struct{}
	closeCh  chan struct{}
	loopDone chan struct{}
	pipe     chan struct{}
	mdWG     sync.WaitGroup

	mu          sync.Mutex
	pending     []*request
	inflightB   int64
	space       chan struct{} // closed and replaced whenever bytes are released
	inflight    []*syncState  // started syncs not yet acknowledged, by generation
	nextGen     int64
	nextSeqNo   int64
	lastBatch   int
	lastSyncDur int64
	lease       LeaseState
	err         error // terminal: fenced, broken, closed
	closing     bool
	stats       Stats
	health      StoreHealth
	retrying    int // sync steps retrying store errors now
}

// Open starts a writer for the chain's term (or, with FencingDisabled, for
// opts.Term). It checks that the store enforces the conditional writes the
// protocol relies on, as advertised; the caller probes the real store with
// blobstore.ProbePreconditions at start-up.
func Open(ctx context.Context, store *blobstore.Container, chain *fence.Chain, opts Options) (*Writer, error) {
	fail := func(err error) (*Writer, error) {
		return nil, &Error{Op: "Open", Shard: opts.Shard, Key: Dir, Err: err}
	}
	if store == nil {
		return fail(fmt.Errorf("%w: nil store", fence.ErrInvalidArgument))
	}
	if !opts.FencingDisabled {
		if chain == nil {
			return fail(fmt.Errorf("%w: fencing is enabled but no fence chain was given (claim the term first)", fence.ErrInvalidArgument))
		}
		if err := chain.Err(); err != nil {
			return nil, err
		}
		for _, m := range []struct {
			what string
			ok   bool
		}{
			{"shard", opts.Shard == "" || opts.Shard == chain.Shard()},
			{"term", opts.Term == 0 || opts.Term == chain.Term()},
			{"allocation", opts.Allocation == "" || opts.Allocation == chain.Allocation()},
		} {
			if !m.ok {
				return fail(fmt.Errorf("%w: options name another %s than the fence chain", fence.ErrInvalidArgument, m.what))
			}
		}
		opts.Shard, opts.Term, opts.Allocation = chain.Shard(), chain.Term(), chain.Allocation()
		if committed := chain.State().Record.Gen; opts.StartGen != 0 && opts.StartGen <= committed {
			return fail(fmt.Errorf("%w: start generation %d is not above generation %d the fence key already commits", fence.ErrInvalidArgument, opts.StartGen, committed))
		} else if opts.StartGen == 0 {
			opts.StartGen = committed + 1
		}
	}
	if err := ident.Validate("shard", opts.Shard, false); err != nil {
		return fail(err)
	}
	if err := ident.Validate("allocation", opts.Allocation, false); err != nil {
		return fail(err)
	}
	if opts.Term < 1 {
		return fail(fmt.Errorf("%w: term %d", fence.ErrInvalidArgument, opts.Term))
	}
	caps := store.Capabilities()
	if !caps.ConditionalCreate || (!opts.FencingDisabled && !caps.ConditionalUpdate) {
		return fail(fmt.Errorf("%w: %s does not advertise the conditional create and update fenced writes need", blobstore.ErrPreconditionsNotEnforced, store))
	}
	setDefaults(&opts)
	if opts.StartGen < 1 || opts.StartSeqNo < 0 {
		return fail(fmt.Errorf("%w: start generation %d, start sequence number %d", fence.ErrInvalidArgument, opts.StartGen, opts.StartSeqNo))
	}
	inline := opts.InlineLimit
	if caps.MaxConditionalBody > 0 && int64(inline)+1024 > caps.MaxConditionalBody {
		inline = int(max(0, caps.MaxConditionalBody-1024))
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &Writer{
		store: store, chain: chain, opts: opts, shard: opts.Shard, term: opts.Term, alloc: opts.Allocation,
		clock: opts.Clock, fenced: !opts.FencingDisabled, inline: inline, ctx: wctx, cancel: cancel,
		arrived: make(chan struct{}, 1), closeCh: make(chan struct{}), loopDone: make(chan struct{}),
		pipe: make(chan struct{}, opts.MaxPipeline), space: make(chan struct{}),
		nextGen: opts.StartGen, nextSeqNo: opts.StartSeqNo,
		lease: LeaseState{Interval: opts.LeaseInterval},
	}
	go w.loop()
	return w, nil
}

func setDefaults(o *Options) {
	if o.StartGen == 0 {
		o.StartGen = 1
	}
	if o.LeaseInterval <= 0 {
		o.LeaseInterval = 10 * time.Second
	}
	if o.InlineLimit <= 0 {
		o.InlineLimit = 1 << 20
	}
	if o.MaxSyncBytes <= 0 {
		o.MaxSyncBytes = 16 << 20
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = 64 << 20
	}
	if o.MaxPipeline <= 0 {
		o.MaxPipeline = 4
	}
	if o.MaxGatherDelay == 0 {
		o.MaxGatherDelay = 2 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = steady.System()
	}
	if o.Backoff.Attempts == 0 && o.Backoff.Initial == 0 {
		o.Backoff = retry.DefaultBackoff()
	}
}

// opOverhead is what each op costs beyond its bytes in the payload and the
// writer's bookkeeping, so many empty ops still count against the limit.
const opOverhead = 16

// Append queues ops and blocks until they are durable and fenced: the md of
// their generation exists, the fence CAS for it succeeded (or, in lease
// mode, the lease covers the ack), and every lower generation was
// acknowledged. On a context error the ops may still become durable (the
// error is ambiguous); on a *fence.FencedError they never will be
// acknowledged by this writer. Append does not copy ops: the caller must
// not change them until Append returns.
func (w *Writer) Append(ctx context.Context, ops [][]byte) (Ack, error) {
	if len(ops) == 0 {
		return Ack{}, w.opErr("Append", fmt.Errorf("%w: no ops", fence.ErrInvalidArgument))
	}
	var size int64
	for _, op := range ops {
		size += int64(len(op)) + opOverhead
	}
	if size > w.opts.MaxInFlightBytes || size > w.opts.MaxSyncBytes {
		return Ack{}, w.opErr("Append", fmt.Errorf("%w: %d bytes in one append, more than the in-flight limit %d or the sync limit %d", blobstore.ErrTooLarge, size, w.opts.MaxInFlightBytes, w.opts.MaxSyncBytes))
	}
	w.mu.Lock()
	w.fencedLocked()
	for {
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return Ack{}, err
		}
		if w.closing {
			w.mu.Unlock()
			return Ack{}, w.opErr("Append", ErrClosed)
		}
		if w.inflightB+size <= w.opts.MaxInFlightBytes {
			break
		}
		if w.opts.FailFast {
			w.mu.Unlock()
			return Ack{}, w.opErr("Append", ErrBackpressure)
		}
		space := w.space
		w.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			// Nothing was queued: the ops were not written.
			return Ack{}, w.opErr("Append", ctx.Err())
		}
		w.mu.Lock()
	}
	req := &request{ops: ops, size: size, done: make(chan struct{})}
	w.pending = append(w.pending, req)
	w.inflightB += size
	w.mu.Unlock()
	select {
	case w.arrived <- struct{}{}:
	default:
	}
	select {
	case <-req.done:
		return req.ack, req.err
	case <-ctx.Done():
		return Ack{}, w.opErr("Append", blobstore.Ambiguous(ctx.Err()))
	}
}

// Err returns the writer's terminal error (fenced, broken or closed), or
// nil while it accepts appends. A writer whose chain's instance was fenced
// elsewhere reports that fencing, and its appends have failed.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fencedLocked()
	return w.err
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// StoreHealth reports the store errors the writer's syncs are retrying,
// and when it last acknowledged a generation. Times are wall-clock.
func (w *Writer) StoreHealth() StoreHealth {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.health
}

// noteStoreError records a store error a sync step is about to retry;
// first says the step just started failing.
func (w *Writer) noteStoreError(err error, first bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.health.LastError, w.health.LastErrorAt = err, now
	w.health.Retries++
	if first {
		if w.retrying == 0 {
			w.health.RetryingSince = now
		}
		w.retrying++
	}
}

// noteStepDone ends a sync step that retried store errors.
func (w *Writer) noteStepDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.retrying--; w.retrying == 0 {
		w.health.RetryingSince = time.Time{}
	}
}

// NextGen is the generation the next sync will write.
func (w *Writer) NextGen() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextGen
}

// Close stops taking appends, syncs what is queued, and waits for the
// committer. If ctx ends first, syncs in progress are abandoned and their
// appends fail with ErrClosed (their outcome unknown).
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closing {
		w.closing = true
		close(w.closeCh)
	}
	w.mu.Unlock()
	var err error
	select {
	case <-w.loopDone:
	case <-ctx.Done():
		w.cancel()
		<-w.loopDone
		err = w.opErr("Close", fmt.Errorf("%w: abandoned syncs in progress: %w", ErrClosed, ctx.Err()))
	}
	w.cancel()
	return err
}

func (w *Writer) opErr(op string, err error) error {
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Op: op, Shard: w.shard, Err: err}
}

// loop is the committer: it cuts batches and runs syncs, one CAS at a time.
func (w *Writer) loop() {
	defer close(w.loopDone)
	for {
		batch, ok := w.gather()
		if !ok {
			break
		}
		w.sync(batch)
	}
	w.mdWG.Wait()
	w.mu.Lock()
	w.failLocked(w.opErr("Close", ErrClosed))
	w.mu.Unlock()
}

// gather waits for appends and takes a batch of them.
func (w *Writer) gather() ([]*request, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) == 0 {
		if w.closing {
			return nil, false
		}
		w.mu.Unlock()
		select {
		case <-w.arrived:
		case <-w.closeCh:
		}
		w.mu.Lock()
	}
	delay := min(w.opts.MaxGatherDelay, time.Duration(w.lastSyncDur/8))
	if target := w.lastBatch; delay > 0 && len(w.pending) < target && !w.closing {
		timer := w.clock.After(delay)
	wait:
		for len(w.pending) < target && !w.closing {
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
	var size int64
	n := 0
	for n < len(w.pending) && (n == 0 || size+w.pending[n].size <= w.opts.MaxSyncBytes) {
		size += w.pending[n].size
		n++
	}
	batch := append([]*request(nil), w.pending[:n]...)
	w.pending = append(w.pending[:0], w.pending[n:]...)
	w.lastBatch = n
	return batch, true
}

// sync runs one generation: data object if large, then md create and fence
// CAS in the configured order.
func (w *Writer) sync(batch []*request) {
	w.mu.Lock()
	w.fencedLocked()
	if w.err != nil {
		for _, r := range batch {
			w.finishReqLocked(r, Ack{}, w.err)
		}
		w.mu.Unlock()
		return
	}
	var ops [][]byte
	for _, r := range batch {
		ops = append(ops, r.ops...)
	}
	s := &syncState{gen: w.nextGen, firstSeqNo: w.nextSeqNo, reqs: batch, started: w.clock.Now()}
	w.nextGen++
	w.nextSeqNo += int64(len(ops))
	w.inflight = append(w.inflight, s)
	w.mu.Unlock()

	payload := EncodeOps(ops)
	md := MD{Kind: KindSync, Shard: w.shard, Term: w.term, Gen: s.gen, Allocation: w.alloc, PrevGen: s.gen - 1,
		FirstSeqNo: s.firstSeqNo, OpCount: int64(len(ops)), PayloadLen: int64(len(payload)), Checksum: Checksum(payload)}
	if len(payload) <= w.inline {
		md.Inline, md.Payload = true, payload
	} else if err := w.putData(s.gen, payload); err != nil {
		w.done(s, false, err)
		return
	}
	body, err := EncodeMD(md)
	if err != nil {
		w.done(s, false, err)
		return
	}
	w.mu.Lock()
	w.stats.Syncs++
	w.stats.Ops += int64(len(ops))
	w.stats.Bytes += int64(len(payload))
	if !md.Inline {
		w.stats.DataObjects++
	}
	w.mu.Unlock()
	md.Payload = nil // the comparison on settle needs only the header

	switch {
	case !w.fenced:
		w.done(s, true, nil) // no CAS in the unfenced baseline
		w.done(s, false, w.createMD(md, body))
	case w.opts.FencingMode == Lease:
		w.leaseSync(s, md, body)
	case w.opts.AckOrder == Sequenced:
		err := w.createMD(md, body)
		w.done(s, false, err)
		if err == nil {
			w.done(s, true, w.advance(s.gen))
		}
	default:
		w.pipe <- struct{}{}
		w.mdWG.Add(1)
		go func() {
			defer w.mdWG.Done()
			defer func() { <-w.pipe }()
			w.done(s, false, w.createMD(md, body))
		}()
		w.done(s, true, w.advance(s.gen))
	}
}

// leaseSync runs a lease-mode sync: the md always, the CAS only when the
// lease has run out, either when the sync starts (then the CAS goes out
// with the md, costing no extra round trip in the concurrent order) or by
// the time the md lands (then the ack waits for a CAS after it). Renewing
// only on expiry keeps successful CASes at least one interval apart.
func (w *Writer) leaseSync(s *syncState, md MD, body []byte) {
	w.mu.Lock()
	renew := !w.lease.Covers(w.clock.Now())
	w.mu.Unlock()
	cas := func() error {
		sent := w.clock.Now()
		err := w.advance(s.gen)
		if err == nil {
			w.mu.Lock()
			w.lease.SentAt, w.lease.Valid = sent, true
			w.mu.Unlock()
		}
		return err
	}
	var mdErr, casErr error
	switch {
	case renew && w.opts.AckOrder == Concurrent:
		var wg sync.WaitGroup
		wg.Go(func() { mdErr = w.createMD(md, body) })
		casErr = cas()
		wg.Wait()
	case renew:
		if mdErr = w.createMD(md, body); mdErr == nil {
			casErr = cas()
		}
	default:
		mdErr = w.createMD(md, body)
	}
	w.done(s, false, mdErr)
	if mdErr != nil || casErr != nil || renew {
		w.done(s, true, casErr)
		return
	}
	// No CAS was sent with this sync: ack only inside the lease, else CAS
	// now (the md took longer than the lease had left).
	w.mu.Lock()
	covered := w.lease.Covers(w.clock.Now())
	if covered {
		w.stats.LeaseSkips++
		s.casOK = true
		w.tryAckLocked()
	}
	w.mu.Unlock()
	if !covered {
		w.done(s, true, cas())
	}
}

// done records the outcome of a sync's md create (cas false) or CAS.
func (w *Writer) done(s *syncState, cas bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil:
		if s.err == nil {
			s.err = w.opErrGen("Append", s.gen, err)
		}
		if w.err == nil {
			// Any sync failure is terminal: retryable trouble is retried
			// inside the sync, so what reaches here is fencing, a bad
			// body at our key, or Close.
			w.err = s.err
		}
	case cas:
		s.casOK = true
	default:
		s.mdOK = true
	}
	w.tryAckLocked()
}

// tryAckLocked acknowledges finished syncs in generation order and fails
// everything from the first failed one on. Once the writer or its instance
// is fenced it acknowledges nothing more, not even a generation whose md
// and CAS both landed: fenced is terminal, and a caller must never get an
// ack from a writer that knows it lost the shard (the write may be durable;
// the successor's restore decides).
func (w *Writer) tryAckLocked() {
	if w.fencedLocked() != nil {
		return
	}
	for len(w.inflight) > 0 {
		s := w.inflight[0]
		if s.err != nil {
			w.failLocked(s.err)
			return
		}
		if !s.mdOK || !s.casOK {
			return
		}
		w.inflight = w.inflight[1:]
		w.lastSyncDur = w.clock.Now() - s.started
		w.health.LastSync = time.Now()
		seq := s.firstSeqNo
		for _, r := range s.reqs {
			w.finishReqLocked(r, Ack{Term: w.term, Gen: s.gen, FirstSeqNo: seq, Count: len(r.ops)}, nil)
			seq += int64(len(r.ops))
		}
	}
}

// fencedLocked returns the fencing error once the writer learned it is
// fenced (a sync's verdict) or its chain's instance is (a poison seen by
// another path, a verdict of another chain of the instance), after failing
// every started and pending append with it; nil otherwise.
func (w *Writer) fencedLocked() error {
	err := w.err
	if err == nil && w.chain != nil {
		err = w.chain.Err()
	}
	if err == nil || !errors.Is(err, fence.ErrFenced) {
		return nil
	}
	w.failLocked(err)
	return err
}

// failLocked fails every started and pending append with err.
func (w *Writer) failLocked(err error) {
	if w.err == nil {
		w.err = err
	}
	for _, s := range w.inflight {
		e := s.err
		if e == nil {
			e = err
		}
		for _, r := range s.reqs {
			w.finishReqLocked(r, Ack{}, e)
		}
	}
	w.inflight = nil
	for _, r := range w.pending {
		w.finishReqLocked(r, Ack{}, err)
	}
	w.pending = nil
}

func (w *Writer) finishReqLocked(r *request, ack Ack, err error) {
	select {
	case <-r.done:
		return
	default:
	}
	r.ack, r.err = ack, err
	close(r.done)
	w.inflightB -= r.size
	close(w.space)
	w.space = make(chan struct{})
}

func (w *Writer) opErrGen(op string, gen int64, err error) error {
	var fe *fence.FencedError
	var te *Error
	if errors.As(err, &fe) || errors.As(err, &te) {
		return err
	}
	return &Error{Op: op, Shard: w.shard, Key: MDKey(w.term, gen), Gen: gen, Err: err}
}

// terminal returns the writer's terminal error or the closing context's.
func (w *Writer) terminal() error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if w.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// retry runs one idempotent step of a sync until it succeeds or fails for
// good. Store trouble is retried with capped backoff for as long as the
// writer is open: giving up would leave the generation's outcome unknown
// and the next generation with nothing to follow.
func (w *Writer) retry(step func() (again bool, err error)) error {
	failing := false
	defer func() {
		if failing {
			w.noteStepDone()
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := w.terminal(); err != nil {
			return err
		}
		again, err := step()
		if errors.Is(err, context.Canceled) && w.ctx.Err() != nil {
			// Close gave up on the syncs in progress and cancelled the
			// step's request: its outcome is abandoned.
			return ErrClosed
		}
		if !again {
			return err
		}
		if err != nil {
			w.noteStoreError(err, !failing)
			failing = true
		}
		if steady.Sleep(w.ctx, w.clock, w.opts.Backoff.Delay(attempt)) != nil {
			return ErrClosed
		}
	}
}

func (w *Writer) putData(gen int64, payload []byte) error {
	key := DataKey(w.term, gen)
	body := EncodeData(w.shard, w.term, gen, payload)
	return w.retry(func() (bool, error) {
		// A plain PUT: the name is this generation's alone, and a resend
		// writes the same bytes.
		_, err := w.store.Put(w.ctx, key, body)
		if err != nil && blobstore.IsRetryable(err) {
			return true, err
		}
		if err != nil {
			return false, &Error{Op: "Append", Shard: w.shard, Key: key, Gen: gen, Err: err}
		}
		return false, nil
	})
}

// createMD creates the generation's md, settling AlreadyExists and lost
// responses by reading what the key holds: our own record is success, a
// poison or another writer's md is fenced, an empty key is sent again.
func (w *Writer) createMD(md MD, body []byte) error {
	key := MDKey(md.Term, md.Gen)
	step := settle.Step[MD]{
		Key: key, Body: body,
		Get: func(ctx context.Context, key string) (blobstore.Object, bool, error) {
			return settle.Once(ctx, w.store, key)
		},
		Decode: func(b []byte) (MD, error) { return DecodeMD(w.shard, key, b) },
		Ours: func(found MD) (bool, string) {
			v := SettleMDCreate(found, md)
			return v.Action == fence.Adopt, v.Reason
		},
	}
	return w.retry(func() (bool, error) {
		v, err := settle.Create(w.ctx, w.store, step)
		switch {
		case err != nil:
			return blobstore.IsRetryable(err), err
		case v.Action == settle.Resend:
			return true, nil // the create did not land: send it again
		case v.Action == settle.Lost:
			return false, w.fence(SettleMDCreate(v.Held, md).Successor, key, fmt.Sprintf("%s (md key %q)", v.Reason, key))
		}
		return false, nil
	})
}

// advance CASes the fence key for gen, retrying store trouble.
func (w *Writer) advance(gen int64) error {
	w.mu.Lock()
	w.stats.CASWrites++
	w.mu.Unlock()
	return w.retry(func() (bool, error) {
		_, err := w.chain.Advance(w.ctx, gen)
		if err != nil && blobstore.IsRetryable(err) && !errors.Is(err, fence.ErrFenced) {
			return true, err
		}
		return false, err
	})
}

func (w *Writer) fence(successor int64, key, reason string) error {
	if w.chain != nil {
		return w.chain.Fence(successor, reason)
	}
	return &fence.FencedError{Shard: w.shard, Key: key, Term: w.term, Allocation: w.alloc, Successor: successor, Reason: reason}
}
