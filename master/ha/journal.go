package ha

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/tick"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// oplog is the master's Journal over a fenced translog writer. Records are
// queued in call order (the master calls Record under the lock of what it
// changed, so the queue order is the apply order of every key) and one
// pump hands them to the writer a batch at a time: while one batch is on
// its way to the store, the next one fills (group commit), and every
// ticket of a batch is answered by the one append that carried it. Batches
// reach the writer strictly in order and the writer acknowledges
// generations in order, so what is acknowledged is always a prefix of what
// was recorded.
//
// A failed append is terminal: the master's memory holds changes the log
// does not, so every pending and later ticket fails (with master.ErrFenced
// when a newer term took the log, master.ErrLogFailed otherwise) and
// onFail tells the node to stop serving.
type oplog struct {
	w        *translog.Writer
	chain    *fence.Chain
	clock    clock.Clock
	maxBytes int
	onFail   func(error)
	metrics  *Metrics
	// lease is how long a proof of ownership (a fence CAS or a listing
	// with no higher term) lets this master hand out memory; notBefore is
	// when a new term may start to (its claim's sweep, plus the lease and
	// a margin, so a predecessor that has not learnt it lost the log has
	// stopped placing before this one starts).
	lease     time.Duration
	notBefore int64
	// leadership is how long an acknowledged append (from its send time)
	// lets the master answer at all (leaseFor of the election timeout; 0:
	// no leadership lease). leaseUntil is when the current one runs out.
	leadership time.Duration
	leaseUntil atomic.Int64
	// quietUntil: a new primary answers nothing before this steady time
	// (Node.quietUntil); 0 when it may at once.
	quietUntil int64
	proveMu    sync.Mutex
	// opened is when the log opened (steady ns): until a first proof,
	// readiness counts the proof's age from here.
	opened int64

	mu    sync.Mutex
	queue []*batch // recorded, not yet handed to the writer, in order
	open  *batch   // the batch new records join; nil after a cut
	last  *batch   // the newest batch queued or in flight; nil when none
	freed *batch   // the batch of the newest record that freed memory
	acked recovery.Position
	proof seal.Proof
	// unproven is why the last proof of ownership failed (store trouble
	// listing the fence keys); nil once one succeeded again.
	unproven error
	err      error
	closing  bool
	kick     chan struct{}
	done     chan struct{}
}

// batch is the records one append carries, and their shared ticket.
type batch struct {
	ops   []*master.Op
	bytes int
	done  chan struct{}
	err   error
	pos   recovery.Position // the log up to and with this batch
}

// maxBatchOps bounds the records of one batch.
const maxBatchOps = 16384

type oplogOptions struct {
	from      recovery.Position
	maxBytes  int
	lease     time.Duration
	notBefore int64
	// leadership and claimed: the leadership lease (see oplog) and the
	// steady time the claim that opened the log was sent, which starts it.
	leadership time.Duration
	claimed    int64
	quietUntil int64
	metrics    *Metrics
	onFail     func(error)
}

func newOplog(w *translog.Writer, chain *fence.Chain, clock clock.Clock, o oplogOptions) *oplog {
	l := &oplog{w: w, chain: chain, clock: clock, maxBytes: o.maxBytes, onFail: o.onFail, metrics: o.metrics, acked: o.from,
		lease: o.lease, notBefore: o.notBefore, leadership: o.leadership, quietUntil: o.quietUntil, opened: clock.Now(), kick: make(chan struct{}, 1), done: make(chan struct{})}
	l.leaseUntil.Store(o.claimed + int64(o.leadership))
	go l.pump()
	return l
}

// Leased returns nil while this master's leadership lease holds (or it
// keeps none), else why it must not answer: no append it sent within the
// lease was acknowledged, so a standby may be claiming the log.
func (l *oplog) Leased() error {
	if l.leadership <= 0 {
		return nil
	}
	if late := time.Duration(l.clock.Now() - l.leaseUntil.Load()); late >= 0 {
		return fmt.Errorf("%w: this master's leadership lapsed %v ago (no append to the operation log sent in the last %v was acknowledged: the store is slow or unreachable, or the process was paused); it answers nothing until an append succeeds again, and a standby may be taking over", master.ErrNotPrimary, late.Round(time.Millisecond), l.leadership)
	}
	return nil
}

// Quiet returns nil once this new primary may answer (see
// Node.quietUntil), else how long until it may.
func (l *oplog) Quiet() error {
	if left := time.Duration(l.quietUntil - l.clock.Now()); l.quietUntil != 0 && left > 0 {
		return fmt.Errorf("%w: this master claimed the operation log, but the previous primary's leadership may still run for %v (a generation it wrote reached the log unseen before the claim); it answers once that has passed", master.ErrNotPrimary, left.Round(time.Millisecond))
	}
	return nil
}

// renewed extends the leadership lease after an append sent at sent was
// acknowledged.
func (l *oplog) renewed(sent int64) {
	until := sent + int64(l.leadership)
	for {
		cur := l.leaseUntil.Load()
		if until <= cur || l.leaseUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// Wait implements master.Ticket.
func (b *batch) Wait(ctx context.Context) error {
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// position waits for the batch and returns the log position it ends at.
func (b *batch) position(ctx context.Context) (recovery.Position, error) {
	if err := b.Wait(ctx); err != nil {
		return recovery.Position{}, err
	}
	return b.pos, nil
}

func doneBatch(pos recovery.Position, err error) *batch {
	b := &batch{done: make(chan struct{}), pos: pos, err: err}
	close(b.done)
	return b
}

// entryBytes estimates an op's encoded size, to cut batches below the
// writer's sync limit before encoding them.
func entryBytes(op *master.Op) int {
	n := 64 + len(op.Tenant) + len(op.Key) + len(op.Client)
	if o := op.Object; o != nil {
		n += 64 + len(o.GetTenant()) + len(o.GetKey()) + len(o.GetClientId()) + len(o.GetGroupId()) + 48*len(o.GetReplicas())
	}
	if s := op.Segment; s != nil {
		n += 64 + len(s.GetName()) + len(s.GetClientId())
	}
	return n
}

// Record implements master.Journal.
func (l *oplog) Record(op *master.Op) master.Ticket {
	n := entryBytes(op)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return doneBatch(recovery.Position{}, l.err)
	}
	if l.closing {
		return doneBatch(recovery.Position{}, fmt.Errorf("%w: the operation log is closing", master.ErrNotPrimary))
	}
	b := l.open
	if b == nil || len(b.ops) >= maxBatchOps || b.bytes+n > l.maxBytes {
		b = &batch{done: make(chan struct{})}
		l.open, l.last = b, b
		l.queue = append(l.queue, b)
		tick.Kick(l.kick)
	}
	b.ops = append(b.ops, op)
	b.bytes += n
	if master.FreesMemory(op.Kind) {
		l.freed = b
	}
	return b
}

// Sync implements master.Journal: the newest batch, whose acknowledgement
// covers every record before it.
func (l *oplog) Sync() master.Ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return doneBatch(recovery.Position{}, l.err)
	}
	if l.last == nil {
		return doneBatch(l.acked, nil)
	}
	return l.last
}

// Placement implements master.Journal: the batch of the newest record that
// freed memory, and a proof that this master still holds the log, so
// memory is handed out only while no newer master can be handing out the
// same space. Placements do not wait for changes that freed nothing.
func (l *oplog) Placement() master.Ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return doneBatch(recovery.Position{}, l.err)
	}
	b := l.freed
	if b == nil {
		b = doneBatch(l.acked, nil)
	}
	return ownedTicket{b: b, l: l}
}

type ownedTicket struct {
	b *batch
	l *oplog
}

func (t ownedTicket) Wait(ctx context.Context) error {
	if err := t.b.Wait(ctx); err != nil {
		return err
	}
	return t.l.owned(ctx)
}

// owned returns nil once this master proved it holds the log within the
// lease, listing the fence keys when the last proof is older; a higher
// term fences it. A new term first waits out its predecessor's lease.
func (l *oplog) owned(ctx context.Context) error {
	if d := time.Duration(l.notBefore - l.clock.Now()); d > 0 {
		if err := clock.Sleep(ctx, l.clock, d); err != nil {
			return err
		}
	}
	fresh := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.proof.Valid && time.Duration(l.clock.Now()-l.proof.At) < l.lease
	}
	if fresh() {
		return nil
	}
	l.proveMu.Lock()
	defer l.proveMu.Unlock()
	if fresh() {
		return nil
	}
	return l.prove(ctx)
}

// prove lists the fence keys: none above the term proves ownership as of
// the moment the listing was sent; one above fences the log.
func (l *oplog) prove(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	sent := l.clock.Now()
	h, err := l.chain.Superseded(ctx)
	if err != nil {
		err = fmt.Errorf("%w: could not prove this master still holds the operation log: %w", master.ErrNotPrimary, err)
		l.mu.Lock()
		l.unproven = err
		l.mu.Unlock()
		return err
	}
	if h > 0 {
		l.fail(l.chain.Fence(h, fmt.Sprintf("master term %d claimed the operation log", h)))
		return l.Err()
	}
	l.mu.Lock()
	if !l.proof.Valid || sent > l.proof.At {
		l.proof = seal.Proof{At: sent, Valid: true}
	}
	l.unproven = nil
	l.mu.Unlock()
	return nil
}

// Unproven is why the last attempt to prove this master holds the log
// failed, or nil when the last one succeeded (a listing with no higher
// term, or an acknowledged append, whose fence CAS proves it).
//
// A proof older than the lease counts as none (before the first proof, the
// time since the log opened): a fence listing that does not answer at all
// (a store holding a resumed process's requests) leaves unproven nil while
// the check waits, and the master must not report ready meanwhile.
func (l *oplog) Unproven() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unproven != nil {
		return l.unproven
	}
	since := l.opened
	if l.proof.Valid {
		since = max(since, l.proof.At)
	}
	if age := time.Duration(l.clock.Now() - since); age >= l.lease {
		return fmt.Errorf("%w: could not prove this master still holds the operation log: the last proof is %v old, more than the %v lease (the fence listing has not answered)", master.ErrNotPrimary, age.Round(time.Millisecond), l.lease)
	}
	return nil
}

// Cut ends the open batch, so the next record starts a new generation, and
// returns the ticket of everything recorded so far: once acknowledged, its
// position is exactly the log up to the cut. A complete snapshot calls it
// while the master is frozen.
func (l *oplog) Cut() *batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return doneBatch(recovery.Position{}, l.err)
	}
	l.open = nil
	if l.last == nil {
		return doneBatch(l.acked, nil)
	}
	return l.last
}

// Acked returns the last acknowledged position and the proof of the last
// successful fence CAS.
func (l *oplog) Acked() (recovery.Position, seal.Proof) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked, l.proof
}

// Err returns the terminal error, if any.
func (l *oplog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *oplog) pump() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && !l.closing {
			l.mu.Unlock()
			<-l.kick
			l.mu.Lock()
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			return
		}
		b := l.queue[0]
		l.queue = l.queue[1:]
		if l.open == b {
			l.open = nil
		}
		err := l.err
		l.mu.Unlock()
		if err != nil {
			l.finish(b, err)
			continue
		}
		if err := l.send(b); err != nil {
			l.fail(err)
			l.finish(b, l.Err())
			continue
		}
		l.mu.Lock()
		l.acked = b.pos
		if l.last == b {
			l.last = nil
		}
		if l.freed == b {
			l.freed = nil
		}
		l.mu.Unlock()
		// An append acknowledged after the leadership lease ran out (the
		// store held it that long, or the process was paused) is durable,
		// but a standby may have claimed the log meanwhile: this master
		// acknowledges nothing past its lease. Its callers hear that the
		// outcome is unknown, and the master steps down (its memory and
		// the published table may now differ from what it told callers;
		// a standby rebuilds both from the log).
		if err := l.Leased(); err != nil {
			l.fail(fmt.Errorf("%w (an append reached the operation log after the lease ran out: the outcome of its changes is unknown to their callers, who read them back from the primary)", err))
			l.finish(b, l.Err())
			continue
		}
		l.finish(b, nil)
	}
}

// send encodes the batch and appends it, in as many appends as the sync
// limit needs (each its own generation; a cut still ends a generation).
func (l *oplog) send(b *batch) error {
	enc := make([][]byte, 0, len(b.ops))
	for _, op := range b.ops {
		e, err := master.EncodeEntry(op)
		if err != nil {
			return fmt.Errorf("%w: encode %v of (%q, %q): %w", master.ErrLogFailed, op.Kind, op.Tenant, op.Key, err)
		}
		enc = append(enc, e)
	}
	start := l.clock.Now()
	for len(enc) > 0 {
		n, size := 0, 0
		for n < len(enc) && (n == 0 || size+len(enc[n])+16 <= l.maxBytes) {
			size += len(enc[n]) + 16
			n++
		}
		sent := l.clock.Now()
		ack, err := l.w.Append(context.Background(), enc[:n])
		if err != nil {
			return err
		}
		enc = enc[n:]
		b.pos = recovery.Position{Term: ack.Term, Gen: ack.Gen, NextSeqNo: ack.FirstSeqNo + int64(ack.Count)}
		l.mu.Lock()
		// Per-sync fencing: this acknowledgement needed a CAS sent after
		// the append began.
		if !l.proof.Valid || sent > l.proof.At {
			l.proof = seal.Proof{At: sent, Valid: true}
		}
		l.unproven = nil
		l.mu.Unlock()
		l.renewed(sent)
		l.metrics.appends.Inc()
	}
	l.metrics.appendSeconds.Observe(float64(l.clock.Now()-start) / 1e9)
	l.metrics.entries.Add(float64(len(b.ops)))
	return nil
}

func (l *oplog) finish(b *batch, err error) {
	b.err = err
	close(b.done)
}

// fail records the terminal error once and tells the node.
func (l *oplog) fail(cause error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = logError(cause)
	err := l.err
	queued := l.queue
	l.queue, l.open, l.last, l.freed = nil, nil, nil, nil
	l.mu.Unlock()
	for _, q := range queued {
		l.finish(q, err)
	}
	if l.onFail != nil {
		l.onFail(err)
	}
}

// logError wraps a writer failure in the master's error for it.
func logError(err error) error {
	if errors.Is(err, master.ErrFenced) || errors.Is(err, master.ErrLogFailed) || errors.Is(err, master.ErrNotPrimary) {
		return err
	}
	if errors.Is(err, fence.ErrFenced) {
		return fmt.Errorf("%w: %w", master.ErrFenced, err)
	}
	return fmt.Errorf("%w: %w", master.ErrLogFailed, err)
}

// Close stops taking records, appends what is queued and closes the
// writer.
func (l *oplog) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	tick.Kick(l.kick)
	select {
	case <-l.done:
	case <-ctx.Done():
	}
	return l.w.Close(ctx)
}
