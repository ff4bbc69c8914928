package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/translog"
)

// The zombie read (docs/PROTOCOL.md section 3, "Read barrier"). A primary
// answers reads from its own state; once a successor took the shard over
// and acknowledged a write, that state is stale, and only a proof that the
// primary still holds its term, taken after the read was called, keeps it
// from answering:
//
//   - w1, the primary, opens term 1 with the real recovery.Open and
//     appends through the real translog.Writer (per-sync fencing, or lease
//     mode on scheduled time). Beside its appends it serves reads, each
//     called when the scheduler opens its gate: a barrier, then an answer
//     from its acknowledged ops below the barrier's position (the position
//     acknowledged when the read was called, BarrierResult.NextSeqNo: the
//     fewest ops a primary may answer with).
//   - The barrier is sidecar.Server.Barrier's: in lease mode none while
//     the real Writer.Lease().Covers(now) holds; otherwise one read of the
//     term's fence key with the real fence.Chain.Check (a key gone, or
//     naming another claim, fences the writer and fails the read).
//     Concurrent barriers share a read through readGroup, the sidecar's
//     barrierGroup: a caller joins the round not yet sent, so the read it
//     waits for was sent after it was called.
//   - The answer of a fence key read reaches w1 through a gate of its own
//     ("response of fence read N"): the store applies the read at one step
//     and the response arrives at a later one, so a read can be called
//     after the store read the key and before the barrier heard it.
//   - c2, the successor, claims term 2 with the real recovery.Open (in
//     lease mode it waits lease plus margin after its sweep) and
//     acknowledges writes of its own.
//
// Invariant LinearizableRead, after every step: a read that returned
// includes every op any term acknowledged before the read was called (in
// particular c2's). Plus the world's invariants and, at the end, the final
// lineage.

// The actors' names order their requests (the scheduler sorts pending
// requests by label): the successor's sort first, so the depth-first
// search explores the primary's reads against the successor's whole run
// (the reads a barrier must refuse) before it varies the early steps; the
// random walks cover the rest.
const (
	zPrimary   = "w1"
	zSuccessor = "c2"
)

// readEvery spaces the lease-mode primary's reads on scheduled time: each
// read's gate is offered once readEvery (the lease interval) has passed
// since the previous read was called (the first: since the open), so the
// reads fall inside and past the lease and before and after the
// successor's wait.
const readEvery = leaseInterval

// readCase is one zombie-read scope; the wrong designs are switches.
type readCase struct {
	name    string
	lease   bool // lease mode on scheduled time; else per_sync on auto-advancing clocks
	appends int  // ops w1 appends
	reads   int  // reads w1 serves
	writes  int  // ops c2 appends once open
	faults  int
	horizon int

	// noBarrier is wrong design (a): w1 answers from its state with no
	// barrier.
	noBarrier bool
	// joinSent is wrong design (c): a barrier joins a fence key read
	// already on its way when it was called (sent before the call).
	joinSent bool
}

func (c readCase) scenario() Scenario {
	sc := Scenario{
		Name:   c.name,
		Faults: c.faults,
		Start: func(r *Run) Checker {
			z := newReadWorld(c.name)
			zombieReadPrimary(r, z, c)
			zombieReadSuccessor(r, z, c)
			return z
		},
	}
	if c.lease {
		sc.Tick, sc.Horizon = leaseTick, c.horizon
	}
	return sc
}

// readCount sums what the runs of one search did, so a clean scope shows
// it reached what the barrier is for.
type readCount struct {
	stale    atomic.Int64 // runs with a read called after c2 acknowledged (the barrier must refuse it)
	refused  atomic.Int64 // runs with a barrier that failed fenced
	store    atomic.Int64 // runs with a read answered after a fence key read
	local    atomic.Int64 // runs with a read answered inside the lease, with no store request
	queued   atomic.Int64 // runs with a read called while a fence key read was on its way (it waits for the next)
	answered atomic.Int64 // runs with a read answered with an op of w1's
}

func (c *readCount) String() string {
	return fmt.Sprintf("a read called after the successor acknowledged in %d runs; a barrier fenced in %d; a read answered after a fence key read in %d, from the lease in %d, with an op of the primary's in %d; a read waited behind a fence key read on its way in %d",
		c.stale.Load(), c.refused.Load(), c.store.Load(), c.local.Load(), c.answered.Load(), c.queued.Load())
}

var readCounts = map[string]*readCount{}

func readCountOf(name string) *readCount {
	if c, ok := readCounts[name]; ok {
		return c
	}
	c := &readCount{}
	readCounts[name] = c
	return c
}

func resetReadCount(name string) *readCount {
	c := readCountOf(name)
	c.stale.Store(0)
	c.refused.Store(0)
	c.store.Store(0)
	c.local.Store(0)
	c.queued.Store(0)
	c.answered.Store(0)
	return c
}

// zread is one read w1 served.
type zread struct {
	name   string
	call   int             // the step its gate opened
	answer map[string]bool // the ops it answers with: w1's below the position at the call
	before []string        // the ops acknowledged by anyone before the call
	ret    int             // the step it returned or failed at (0: running)
	how    string          // "store", "local", "none" (no barrier), "fenced"
}

// readWorld is the world of a zombie-read scope.
type readWorld struct {
	*world
	count *readCount

	rmu   sync.Mutex
	reads []*zread
	seqOf map[string]int64 // op -> its sequence number, for the primary's acked ops
	pos   int64            // the primary's acknowledged position (NextSeqNo)
	// flags of this run for the counters (each counted once per run)
	stale, refused, store, local, queued, answered bool
}

func newReadWorld(name string) *readWorld {
	return &readWorld{world: newWorld(true), count: readCountOf(name), seqOf: map[string]int64{}}
}

// flag counts what a run did, once per run. z.rmu must be held.
func (z *readWorld) flag(f *bool, n *atomic.Int64) {
	if !*f {
		*f = true
		n.Add(1)
	}
}

// zombieReadPrimary is w1: term 1 through recovery.Open, appends and
// reads.
func zombieReadPrimary(r *Run, z *readWorld, c readCase) {
	const actor = zPrimary
	z.terms[actor] = 1
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		store = responseGate(r, actor)(store)
		var ops []string
		sh, err := recovery.Open(ctx, store, Shard, 1, actor, readRecoveryOpts(r, c, actor, &ops))
		close(z.opened)
		if !z.recovered(r, actor, 1, err, ops, writerOf(sh)) {
			return
		}
		z.rmu.Lock()
		z.pos = sh.NextSeqNo
		z.rmu.Unlock()
		var wg sync.WaitGroup
		wg.Go(func() { z.serveReads(ctx, r, c, actor, sh) })
		z.appendOps(ctx, r, actor, 1, sh.Writer, c.appends)
		wg.Wait()
		_ = sh.Writer.Close(ctx)
	})
}

// zombieReadSuccessor is c2: term 2 through recovery.Open once w1 opened,
// then its writes.
func zombieReadSuccessor(r *Run, z *readWorld, c readCase) {
	const actor = zSuccessor
	z.terms[actor] = 2
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		<-z.opened
		var ops []string
		sh, err := recovery.Open(ctx, store, Shard, 2, actor, readRecoveryOpts(r, c, actor, &ops))
		if !z.recovered(r, actor, 2, err, ops, writerOf(sh)) {
			return
		}
		if c.lease {
			r.Note("%s opened at t=%d", actor, r.Now())
		}
		z.appendOps(ctx, r, actor, 2, sh.Writer, c.writes)
		_ = sh.Writer.Close(ctx)
	})
}

// readRecoveryOpts: per_sync on auto-advancing clocks, or lease mode on
// the scheduled clock with the lease scenarios' interval and margin (the
// first open stores the mode; the successor reads it and waits).
func readRecoveryOpts(r *Run, c readCase, actor string, ops *[]string) recovery.Options {
	o := recoveryOpts(ops)
	if c.lease {
		o.Clock, o.LeaseMargin = r.Clock(actor), leaseMargin
		o.Writer = leaseWriterOpts(r, actor, translog.Concurrent)
	}
	return o
}

// appendOps issues n appends through gates and waits for their answers,
// recording the sequence numbers of what was acknowledged.
func (z *readWorld) appendOps(ctx context.Context, r *Run, actor string, term int64, wr *translog.Writer, n int) {
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		op := fmt.Sprintf("%s.%d", actor, i)
		if !r.Gate(actor, "append "+op) {
			break
		}
		z.mu.Lock()
		z.appends[actor]++
		z.mu.Unlock()
		wg.Go(func() {
			a, err := wr.Append(ctx, [][]byte{[]byte(op)})
			z.appended(r, actor, term, op, a, err)
			if err != nil || r.Ended() || term != 1 {
				return
			}
			// The sidecar's position: after the last acknowledged op
			// (acknowledgements come in generation order).
			z.rmu.Lock()
			z.seqOf[op] = a.FirstSeqNo
			z.pos = max(z.pos, a.FirstSeqNo+int64(a.Count))
			z.rmu.Unlock()
		})
	}
	wg.Wait()
}

// serveReads calls w1's reads as their gates open, each in its own
// goroutine, so a read can be called while another waits for its barrier.
func (z *readWorld) serveReads(ctx context.Context, r *Run, c readCase, actor string, sh *recovery.Shard) {
	g := &readGroup{joinSent: c.joinSent}
	var clock clock.Clock
	if c.lease {
		clock = r.Clock(actor)
	}
	var wg sync.WaitGroup
	for i := 1; i <= c.reads; i++ {
		name := fmt.Sprintf("read %d", i)
		if c.lease {
			// Lease mode: a read every readEvery of scheduled time.
			<-r.Clock(actor).After(readEvery)
		}
		if !r.Gate(actor, name) {
			break
		}
		rd := z.called(r, name)
		wg.Go(func() {
			how, err := z.barrier(ctx, r, c, sh, clock, g)
			z.returned(r, actor, rd, how, err)
		})
	}
	wg.Wait()
}

// called records a read at the step its gate opened: the ops it will
// answer with (w1's below the position acknowledged now) and the ops
// anyone acknowledged before.
func (z *readWorld) called(r *Run, name string) *zread {
	rd := &zread{name: name, call: r.Step(), answer: map[string]bool{}}
	z.mu.Lock()
	for _, a := range z.acks {
		rd.before = append(rd.before, a.op)
	}
	z.mu.Unlock()
	sort.Strings(rd.before)
	z.rmu.Lock()
	defer z.rmu.Unlock()
	for op, seq := range z.seqOf {
		if seq < z.pos {
			rd.answer[op] = true
		}
	}
	for _, op := range rd.before {
		if strings.HasPrefix(op, zSuccessor+".") {
			z.flag(&z.stale, &z.count.stale)
		}
	}
	z.reads = append(z.reads, rd)
	return rd
}

// barrier is sidecar.Server.Barrier for w1: none in the wrong design (a);
// in lease mode, none while the writer's lease covers now; else one fence
// key read through the group.
func (z *readWorld) barrier(ctx context.Context, r *Run, c readCase, sh *recovery.Shard, clock clock.Clock, g *readGroup) (string, error) {
	if c.noBarrier {
		return "none", nil
	}
	// The sidecar refuses a shard whose writer failed fenced before any
	// read (Server.Barrier, fenceErr).
	if err := sh.Writer.Err(); errors.Is(err, fence.ErrFenced) {
		return "store", err
	}
	if c.lease && sh.Writer.Lease().Covers(clock.Now()) {
		return "local", nil
	}
	err := g.do(func(n int) error {
		return sh.Chain.Check(context.WithValue(ctx, fenceReadRound{}, n))
	}, func() {
		z.rmu.Lock()
		z.flag(&z.queued, &z.count.queued)
		z.rmu.Unlock()
	})
	return "store", err
}

func (z *readWorld) returned(r *Run, actor string, rd *zread, how string, err error) {
	if r.Ended() {
		return
	}
	switch {
	case errors.Is(err, fence.ErrFenced):
		r.Note("%s: %s refused: the barrier found the writer fenced: %s", actor, rd.name, reason(err))
		how = "fenced"
	case err != nil:
		z.fail(r, "%s: %s: the barrier failed without a fencing verdict: %v", actor, rd.name, err)
		return
	default:
		var ops []string
		for op := range rd.answer {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		r.Note("%s answered %s (%s) with %v", actor, rd.name, map[string]string{"store": "after a fence key read", "local": "inside the lease", "none": "no barrier"}[how], ops)
	}
	z.rmu.Lock()
	defer z.rmu.Unlock()
	rd.ret, rd.how = r.Step(), how
	switch how {
	case "fenced":
		z.flag(&z.refused, &z.count.refused)
	case "store":
		z.flag(&z.store, &z.count.store)
	case "local":
		z.flag(&z.local, &z.count.local)
	}
	if how != "fenced" && len(rd.answer) > 0 {
		z.flag(&z.answered, &z.count.answered)
	}
}

// Digest adds what the read invariant remembers: per read, what was
// acknowledged before its call, its answer and how it ended.
func (z *readWorld) Digest() string {
	z.rmu.Lock()
	var parts []string
	for _, rd := range z.reads {
		var ans []string
		for op := range rd.answer {
			ans = append(ans, op)
		}
		sort.Strings(ans)
		parts = append(parts, fmt.Sprintf("%s:%v:%v:%s", rd.name, rd.before, ans, rd.how))
	}
	z.rmu.Unlock()
	return z.world.Digest() + "|" + strings.Join(parts, ",")
}

func (z *readWorld) Check(r *Run) error {
	if err := z.world.Check(r); err != nil {
		return err
	}
	z.mu.Lock()
	acks := append([]ack(nil), z.acks...)
	z.mu.Unlock()
	z.rmu.Lock()
	defer z.rmu.Unlock()
	// LinearizableRead.
	for _, rd := range z.reads {
		if rd.ret == 0 || rd.how == "fenced" {
			continue
		}
		for _, a := range acks {
			if a.step < rd.call && !rd.answer[a.op] {
				var ans []string
				for op := range rd.answer {
					ans = append(ans, op)
				}
				sort.Strings(ans)
				return fmt.Errorf("LinearizableRead: %s's %s, called at step %d, answered at step %d (barrier: %s) with %v, without %s, which %s acknowledged at term %d at step %d, before the call",
					zPrimary, rd.name, rd.call, rd.ret, rd.how, ans, a.op, a.actor, a.term, a.step)
			}
		}
	}
	return nil
}

func (z *readWorld) Final(r *Run) error {
	if err := (lineageWorld{z.world}).Final(r); err != nil {
		return err
	}
	z.rmu.Lock()
	defer z.rmu.Unlock()
	for _, rd := range z.reads {
		if rd.ret == 0 {
			return fmt.Errorf("liveness: %s's %s, called at step %d, never ended", zPrimary, rd.name, rd.call)
		}
	}
	return nil
}

// readGroup is the sidecar's barrierGroup (sidecar/barrier.go), which
// shares fence key reads between concurrent barriers of one shard: a caller
// joins the round not yet sent (or starts one), so every read it waits for
// was sent after it was called. With joinSent it is wrong design (c): a
// caller that arrives while a read is on its way joins that read.
type readGroup struct {
	joinSent bool

	mu      sync.Mutex
	waiting *readRound
	sent    *readRound // the round whose read is on its way
	running bool
	rounds  int
}

type readRound struct {
	n    int
	done chan struct{}
	err  error
}

// do waits for a read: read(n) is the n-th fence key read. queued runs
// when the caller waits behind a read on its way.
func (g *readGroup) do(read func(n int) error, queued func()) error {
	g.mu.Lock()
	rd := g.waiting
	if g.joinSent && g.sent != nil {
		rd = g.sent
	}
	if rd == nil {
		g.rounds++
		rd = &readRound{n: g.rounds, done: make(chan struct{})}
		g.waiting = rd
		if !g.running {
			g.running = true
			go g.loop(read)
		}
	}
	if g.sent != nil && rd != g.sent {
		queued()
	}
	g.mu.Unlock()
	<-rd.done
	return rd.err
}

// loop sends one read per round until no round waits.
func (g *readGroup) loop(read func(n int) error) {
	for {
		g.mu.Lock()
		rd := g.waiting
		g.waiting = nil
		if rd == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.sent = rd
		g.mu.Unlock()
		rd.err = read(rd.n)
		g.mu.Lock()
		g.sent = nil
		g.mu.Unlock()
		close(rd.done)
	}
}

// fenceReadRound marks the context of a barrier's fence key read with its
// round.
type fenceReadRound struct{}

// responseGate wraps w1's store: the answer of a barrier's fence key read
// (applied by the store at its step) reaches w1 only when the scheduler
// opens the gate "response of fence read N".
func responseGate(r *Run, actor string) func(*blobstore.Container) *blobstore.Container {
	return func(c *blobstore.Container) *blobstore.Container {
		return c.With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
			res, err := next(ctx, call)
			n, ok := ctx.Value(fenceReadRound{}).(int)
			if _, isFence := layout.ParseFenceKey(call.Key); ok && isFence && call.Op == blobstore.OpGet {
				if !r.Gate(actor, fmt.Sprintf("response of fence read %d", n)) {
					return blobstore.Result{}, ErrScheduleEnded
				}
			}
			return res, err
		})
	}
}
