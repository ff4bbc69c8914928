package translog

import (
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// pipeline is the write path's state and every decision about it, with no
// goroutine, clock or store call of its own (the raft habit: the caller
// steps it with what happened and carries out what it returns). The
// Writer (writer.go) is the driver: it holds the lock, reads the clock and
// the instance's fencing, runs the store requests, and delivers the
// appends the pipeline completed.
//
// Inputs: an append asks for admission (enqueue), a batch is cut (cut), a
// sync starts (start), a request of a sync comes back (record), the
// lease is consulted at an md's landing (leaseCovers), the writer closes or
// fails (close, fail). Outputs: the order of a sync's requests (orderFor),
// and the appends completed with an ack or an error (deliver).
type pipeline struct {
	shard       string
	term        int64
	witness     bool // fencing enabled: a sync needs a CAS or the lease
	mode        FencingMode
	order       AckOrder
	maxInFlight int64
	maxSync     int64
	failFast    bool
	maxGather   time.Duration

	queue       []*entry     // admitted, not yet in a sync
	inflight    int64        // bytes admitted and not yet completed
	syncs       []*syncState // started syncs not yet acknowledged, by generation
	nextGen     int64
	nextSeqNo   int64
	lastBatch   int   // appends in the last batch cut
	lastSyncDur int64 // steady ns from start to ack of the last acked sync
	lease       LeaseState
	// Create-only mode's fence checks: checkedAt is the next generation
	// when the last check that found the writer the owner started (for the
	// window, the claim counts as one at StartGen), checkFrom the next
	// generation when the last check started, checking says one is in
	// flight. confirmed says a check this writer sent found it the owner:
	// until then nothing is acknowledged. The claim does not count for
	// that: a successor may delete the key after the claim verified it
	// and survey seal/ before this term's marker lands; a check sent after
	// the marker was stored (any check of the writer: it opens after the
	// marker) sees the delete (docs/PROTOCOL.md, section 4).
	checkedAt int64
	checkFrom int64
	checking  bool
	confirmed bool
	window    int64 // Options.CheckWindow
	// observed is Observe mode's first refused CAS: what PerSync mode
	// would have failed every later ack with.
	observed error
	err      error // terminal: fenced, broken, closed
	closing  bool
	stats    Stats
	acked    int64    // generations acknowledged
	done     []*entry // completed, not yet delivered
}

// entry is one Append in the pipeline.
type entry struct {
	ops  [][]byte
	size int64
	// wake is closed by the driver when it delivers the entry; the
	// pipeline never touches it.
	wake      chan struct{}
	completed bool
	ack       Ack
	err       error
}

// syncState is one generation on its way.
type syncState struct {
	gen        int64
	firstSeqNo int64
	entries    []*entry
	started    int64 // steady ns
	mdOK       bool
	casOK      bool
	err        error
}

// ops returns the ops of the sync, in order.
func (s *syncState) ops() [][]byte {
	var ops [][]byte
	for _, e := range s.entries {
		ops = append(ops, e.ops...)
	}
	return ops
}

func newPipeline(o Options) pipeline {
	return pipeline{
		shard: o.Shard, term: o.Term, witness: !o.FencingDisabled, mode: o.FencingMode, order: o.AckOrder,
		maxInFlight: o.MaxInFlightBytes, maxSync: o.MaxSyncBytes, failFast: o.FailFast, maxGather: o.MaxGatherDelay,
		nextGen: o.StartGen, nextSeqNo: o.StartSeqNo, lease: LeaseState{Interval: o.LeaseInterval},
		checkedAt: o.StartGen, checkFrom: o.StartGen, window: int64(o.CheckWindow),
	}
}

// opOverhead is what each op costs beyond its bytes in the payload and the
// writer's bookkeeping, so many empty ops still count against the limit.
const opOverhead = 16

// measure sizes an append, refusing one no sync could carry.
func (p *pipeline) measure(ops [][]byte) (int64, error) {
	if len(ops) == 0 {
		return 0, p.opErr("Append", fmt.Errorf("%w: no ops", fence.ErrInvalidArgument))
	}
	var size int64
	for _, op := range ops {
		size += int64(len(op)) + opOverhead
	}
	if size > p.maxInFlight || size > p.maxSync {
		return 0, p.opErr("Append", fmt.Errorf("%w: %d bytes in one append, more than the in-flight limit %d or the sync limit %d", blobstore.ErrTooLarge, size, p.maxInFlight, p.maxSync))
	}
	return size, nil
}

// enqueue admits e when the in-flight bytes leave room: queued false with a
// nil error means wait for room (deliver frees it).
func (p *pipeline) enqueue(e *entry) (queued bool, err error) {
	switch {
	case p.err != nil:
		return false, p.err
	case p.closing:
		return false, p.opErr("Append", ErrClosed)
	case p.inflight+e.size <= p.maxInFlight:
		p.queue = append(p.queue, e)
		p.inflight += e.size
		return true, nil
	case p.failFast:
		return false, p.opErr("Append", ErrBackpressure)
	}
	return false, nil
}

// idle reports whether no append waits for a sync.
func (p *pipeline) idle() bool { return len(p.queue) == 0 }

// short reports whether the queue is smaller than the last batch while the
// writer is open: a sync may wait for more.
func (p *pipeline) short() bool { return len(p.queue) < p.lastBatch && !p.closing }

// gatherDelay is how long the next sync may wait for a batch as large as
// the previous one: at most maxGather and an eighth of the last sync's
// duration, so a closed loop of appenders lands in one sync instead of
// splitting into a tiny and a large one. Zero: cut now.
func (p *pipeline) gatherDelay() time.Duration {
	if d := min(p.maxGather, time.Duration(p.lastSyncDur/8)); d > 0 && p.short() {
		return d
	}
	return 0
}

// cut takes the next batch: the queued appends in order, up to maxSync
// bytes (always at least one).
func (p *pipeline) cut() []*entry {
	var size int64
	n := 0
	for n < len(p.queue) && (n == 0 || size+p.queue[n].size <= p.maxSync) {
		size += p.queue[n].size
		n++
	}
	batch := append([]*entry(nil), p.queue[:n]...)
	p.queue = append(p.queue[:0], p.queue[n:]...)
	p.lastBatch = n
	return batch
}

// start opens the next generation for batch at steady time now; inst is
// the instance's fencing (nil when it is not fenced). A writer already
// failed or fenced fails the batch instead: nil.
func (p *pipeline) start(batch []*entry, now int64, inst error) *syncState {
	p.checkFenced(inst)
	if p.err != nil {
		for _, e := range batch {
			p.complete(e, Ack{}, p.err)
		}
		return nil
	}
	s := &syncState{gen: p.nextGen, firstSeqNo: p.nextSeqNo, entries: batch, started: now}
	n := 0
	for _, e := range batch {
		n += len(e.ops)
	}
	p.nextGen++
	p.nextSeqNo += int64(n)
	p.syncs = append(p.syncs, s)
	return s
}

// prepared counts a sync whose md is encoded.
func (p *pipeline) prepared(ops, payload int, dataObject bool) {
	p.stats.Syncs++
	p.stats.Ops += int64(ops)
	p.stats.Bytes += int64(payload)
	if dataObject {
		p.stats.DataObjects++
	}
}

// order is how one sync sends its md create and its fence CAS.
type order int

const (
	// mdOnly: unfenced, the md alone.
	mdOnly order = iota + 1
	// pipelined: per-sync in the concurrent order. The md goes in the
	// background (up to MaxPipeline at once) beside the CAS; the next
	// sync starts once the CAS returned.
	pipelined
	// mdThenCAS: the sequenced order, per-sync or renewing the lease.
	mdThenCAS
	// mdWithCAS: a lease renewal in the concurrent order: both together,
	// at no extra round trip.
	mdWithCAS
	// inLease: the lease covers the sync at its start: the md alone, then
	// an ack if the lease still covers it when the md landed, else a CAS.
	// Renewing only on expiry keeps successful CASes at least one
	// interval apart.
	inLease
	// mdFenced: create-only mode: the md alone, acknowledged once it
	// landed as ours (the fence checks run beside the syncs).
	mdFenced
)

// orderFor is the order of a sync prepared at steady time now.
func (p *pipeline) orderFor(now int64) order {
	switch {
	case !p.witness:
		return mdOnly
	case p.mode == CreateOnly:
		return mdFenced
	case p.mode == Lease && p.lease.Covers(now):
		return inLease
	case p.mode == Lease && p.order == Concurrent:
		return mdWithCAS
	case p.mode == Lease, p.order == Sequenced:
		return mdThenCAS
	}
	return pipelined
}

// observing reports whether the writer runs Observe mode: fencing verdicts
// of the CAS are reported, not enforced.
func (p *pipeline) observing() bool { return p.witness && p.mode == Observe }

// observedText is what an Observe-mode ack says of the refused CAS.
func observedText(err error) string {
	return "per_sync would have failed this append: " + ObservedVerdict(err)
}

// ObservedVerdict is the refused fence CAS of an Observe-mode writer
// (Writer.ObservedFencing) as per-sync mode would have failed appends with
// it, without the fencing error's instruction to stop (this writer goes
// on).
func ObservedVerdict(err error) string {
	var fe *fence.FencedError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	succ := "successor term unknown"
	if fe.Successor > 0 {
		succ = fmt.Sprintf("successor term %d", fe.Successor)
	}
	return fmt.Sprintf("the fence CAS at term %d was refused: %s; %s", fe.Term, fe.Reason, succ)
}

// createOnly reports whether the writer runs create-only fencing.
func (p *pipeline) createOnly() bool { return p.witness && p.mode == CreateOnly }

// startCheck says whether a create-only fence check should start now: none
// is in flight, and no check confirmed the writer yet (the first goes
// beside the first sync's md create, so the first ack waits for no extra
// round trip when the key answers in time), or the writer started half a
// CheckWindow of generations since the last one started (or force: the
// window is closed). gen is the next generation, which the check vouches
// for once it found the writer the owner. Checking every half window
// keeps the window open while the checks answer within a few syncs, at a
// read per four syncs.
func (p *pipeline) startCheck(force bool) (gen int64, ok bool) {
	due := force || !p.confirmed || p.nextGen >= p.checkFrom+p.window/2
	if !p.createOnly() || p.checking || p.err != nil || !due {
		return 0, false
	}
	p.checking, p.checkFrom = true, p.nextGen
	p.stats.FenceChecks++
	return p.nextGen, true
}

// checked takes the outcome at steady time now of the fence check started
// at gen: nil found the writer the owner, which confirms it (the syncs
// waiting for that are acknowledged). A fenced verdict arrives through the
// instance (inst); store trouble (retryable) leaves the window where it
// was, to be checked again: again says to resend this check (with
// backoff) while the writer is not confirmed, since its acks wait for it;
// ErrClosed (the writer gave up on its requests) changes nothing; any
// other error (a bad body at the fence key) is terminal, as it is for a
// sync's own steps.
func (p *pipeline) checked(gen int64, err error, now int64, inst error) (again bool) {
	p.checking = false
	switch {
	case err == nil:
		p.checkedAt = max(p.checkedAt, gen)
		p.confirmed = true
		p.ack(now, inst)
	case p.checkFenced(inst) != nil, errors.Is(err, ErrClosed):
	case blobstore.IsRetryable(err):
		again = !p.confirmed && p.err == nil
		p.checking = again
	default:
		p.fail(p.opErr("Append", fmt.Errorf("fence check: %w", err)))
	}
	return again
}

// windowOpen reports whether the next sync may start: create-only mode
// starts at most CheckWindow generations past the last good check.
func (p *pipeline) windowOpen() bool {
	return !p.createOnly() || p.err != nil || p.nextGen < p.checkedAt+p.window
}

// noteCAS counts a fence advance sent by a sync.
func (p *pipeline) noteCAS() { p.stats.CASWrites++ }

// step names the request of a sync an outcome is for.
type step int

const (
	stepMD step = iota + 1
	stepCAS
)

// outcome is what one request of a sync came back with.
type outcome struct {
	sync *syncState
	step step
	err  error
	// sent is when a CAS was sent (steady ns): a successful one starts
	// the lease there, not at its response, since the successor's wait
	// starts at its delete, which the CAS preceded.
	sent int64
}

// record takes the outcome of a sync's md create or CAS at steady time
// now and acknowledges what it can. Any failure is terminal: store trouble
// is retried inside the request, so what arrives here is fencing, a bad
// body at our key, or Close.
func (p *pipeline) record(o outcome, now int64, inst error) {
	s := o.sync
	switch {
	case o.err != nil && o.step == stepCAS && p.observing() && !errors.Is(o.err, ErrClosed):
		// Observe mode: the CAS is a witness only. PerSync mode would
		// fail this sync and everything after it; report that instead.
		s.casOK = true
		if p.observed == nil {
			p.observed = o.err
		}
	case o.err != nil:
		if s.err == nil {
			s.err = p.genErr(s.gen, o.err)
		}
		if p.err == nil {
			p.err = s.err
		}
	case o.step == stepCAS:
		s.casOK = true
		if p.witness && p.mode == Lease {
			p.lease.SentAt, p.lease.Valid = o.sent, true
		}
	default:
		s.mdOK = true
	}
	p.ack(now, inst)
}

// leaseCovers acknowledges s without a CAS when the lease covers now (its
// md has landed); false means s needs a CAS.
func (p *pipeline) leaseCovers(s *syncState, now int64, inst error) bool {
	if !p.lease.Covers(now) {
		return false
	}
	p.stats.LeaseSkips++
	s.casOK = true
	p.ack(now, inst)
	return true
}

// ack acknowledges finished syncs in generation order and fails
// everything from the first failed one on. Once the writer or its
// instance is fenced it acknowledges nothing more, not even a generation
// whose md and CAS both landed: fenced is terminal, and a caller must
// never get an ack from a writer that knows it lost the shard (the write
// may be durable; the successor's restore decides). A create-only writer
// acknowledges nothing before a fence check it sent confirmed it.
func (p *pipeline) ack(now int64, inst error) {
	if p.checkFenced(inst) != nil {
		return
	}
	for len(p.syncs) > 0 {
		s := p.syncs[0]
		if s.err != nil {
			p.fail(s.err)
			return
		}
		if !s.mdOK || !s.casOK || (p.createOnly() && !p.confirmed) {
			return
		}
		p.syncs = p.syncs[1:]
		p.lastSyncDur = now - s.started
		p.acked++
		var observed string
		if p.observed != nil {
			observed = observedText(p.observed)
			p.stats.FencingObserved++
		}
		seq := s.firstSeqNo
		for _, e := range s.entries {
			p.complete(e, Ack{Term: p.term, Gen: s.gen, FirstSeqNo: seq, Count: len(e.ops), FencingObserved: observed}, nil)
			seq += int64(len(e.ops))
		}
	}
}

// checkFenced returns the fencing error once the writer learned it is
// fenced (a sync's verdict) or its instance is (inst: a poison seen by
// another path, a verdict of another chain of the instance), after failing
// every started and queued append with it; nil otherwise.
func (p *pipeline) checkFenced(inst error) error {
	err := p.err
	if err == nil && !p.observing() {
		// In Observe mode the instance's fencing comes from a refused
		// CAS, which is only reported; a poison at our md key arrives
		// as the sync's own error (p.err) and ends the writer.
		err = inst
	}
	if err == nil || !errors.Is(err, fence.ErrFenced) {
		return nil
	}
	p.fail(err)
	return err
}

// close stops admissions; it reports whether this call closed.
func (p *pipeline) close() bool {
	first := !p.closing
	p.closing = true
	return first
}

// fail makes err terminal (unless the writer already has a terminal
// error) and fails every started and queued append, each started sync's
// with its own error where it has one.
func (p *pipeline) fail(err error) {
	if p.err == nil {
		p.err = err
	}
	for _, s := range p.syncs {
		e := s.err
		if e == nil {
			e = err
		}
		for _, en := range s.entries {
			p.complete(en, Ack{}, e)
		}
	}
	p.syncs = nil
	for _, en := range p.queue {
		p.complete(en, Ack{}, err)
	}
	p.queue = nil
}

func (p *pipeline) complete(e *entry, ack Ack, err error) {
	if e.completed {
		return
	}
	e.completed, e.ack, e.err = true, ack, err
	p.inflight -= e.size
	p.done = append(p.done, e)
}

// deliver hands the driver the appends completed since its last call.
func (p *pipeline) deliver() []*entry {
	d := p.done
	p.done = nil
	return d
}

func (p *pipeline) opErr(op string, err error) error {
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Op: op, Shard: p.shard, Err: err}
}

func (p *pipeline) genErr(gen int64, err error) error {
	var fe *fence.FencedError
	var te *Error
	if errors.As(err, &fe) || errors.As(err, &te) {
		return err
	}
	return &Error{Op: "Append", Shard: p.shard, Key: layout.MDKey(p.term, gen), Gen: gen, Err: err}
}
