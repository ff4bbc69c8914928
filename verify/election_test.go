package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/master/ha"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Master elections (master/ha, docs/PROTOCOL.md section 10, "Election") on
// scheduled time. The master's operation log is a fenced translog shard;
// here it is shard s1 and its entries are plain strings:
//
//   - The primary p opens term 1 with the real recovery.Open and appends
//     with the real translog.Writer (per-sync fencing, concurrent ack
//     order, as ha.Node.writerOptions sets), one append in flight at a
//     time with what arrived meanwhile batched into the next (the oplog's
//     pump). It appends a leader entry ("p.L0/30ms": its election timeout,
//     which a standby reads) at once and then one every ha.RenewEvery of
//     the timeout, up to a bound; mutations ("p.1") arrive through gates.
//     It holds the real leadership lease: the claim, and every append
//     sent at s and acknowledged, grant it until s + ha.LeaseFor(timeout);
//     a mutation that arrives once the lease ran out is refused, and an
//     append the store acknowledges after it is acknowledged to no caller
//     (the primary steps down).
//   - A standby runs the real ha.Elector on its scheduled clock. It starts
//     once p opened, knowing p's term (the newest seal marker). Each poll it
//     reads the next generation of the lineage with the real translog
//     reader; one it reads for the first time is a sign of life
//     (SawTerm, Alive, then PrimaryTimeout with the announced timeout, in
//     ha.Node.standbyStep's order). When Elector.Until says it may claim,
//     it lists the fence keys and seal markers (a term above the one it
//     knows is another master's claim: SawTerm, no claim), reads the next
//     generation once more (present: a sign of life, no claim), then
//     claims at max(top, Term())+1 with the real recovery.Open, resuming
//     from the position it tailed to (ha.Node.openPrimary). A standby that
//     wins is a primary like p (leader entry at once, its own lease from
//     when its claim was sent) and records mutations of its own.
//   - The new primary's quiet period (ha.Node.quietUntil, oplog.Quiet):
//     when its restore point holds a generation above the last one it had
//     read when it claimed, it answers nothing until its sweep
//     (Chain.SweptAt) plus ha.LeaseFor(timeout) plus a tenth of the
//     timeout; otherwise it answers at once. A mutation that arrives in
//     the quiet period is refused and asked again once it has passed; the
//     renewal timer runs on past it, so the new primary holds its lease
//     then.
//
// What is checked, after every step: the world's invariants (NoAckedWriteLoss,
// against every restore point and, at the end, the final lineage;
// SingleAcker; AckOrder; FencedTerminal); OneMasterPerTerm (no two masters
// complete a claim of one term, nor acknowledge mutations at one term);
// QuietBeforeClaim (when a standby's claim deletes an older primary's fence
// key, every lease that primary was granted by what the standby had seen
// of it, its claim and the appends whose md the standby read, has run out,
// including a lease granted later by an append the standby had read);
// NoOverlap (at no scheduled time do two masters both answer: log alive,
// leadership lease holding, past the quiet period, each by what it knows);
// and, at the end, HigherTermPrevails (the highest claimed term is held by an
// unfenced master) and Elected (the silent primary was replaced).
//
// Time: one tick is 10ms, the election timeout 30ms (three ticks), so the
// leader entry comes every tick (ha.RenewEvery: a third), the lease lasts
// 27ms (ha.LeaseFor) and a standby waits 30ms plus its random share (at
// most 6ms) from the last sign of life: it claims at the fourth tick.
// Standbys poll every tick. Waits shorter than a tick are rounded up to one
// (the first tick at or past their deadline, which is where the real wait
// would end on this grid).

const (
	electionTick    = 10 * time.Millisecond
	electionTimeout = 3 * electionTick
	electionPoll    = electionTick
)

// electionCase is one election scope. The wrong designs are switches.
type electionCase struct {
	name      string
	standbys  int // 1 or 2
	mutations int // mutations p records
	renewals  int // leader entries p appends on its renewal timer after the first
	writes    int // mutations an elected standby records
	// follow: a standby that sees another master's term keeps tailing
	// (switching to the new term's generations at its seal's cut) and may
	// claim over it later; otherwise it ends there.
	follow  bool
	faults  int
	horizon int

	// noClaim is wrong design (a): a standby whose timer ran out promotes
	// itself with no claim and no seal, opening a writer at the next term
	// after what it tailed.
	noClaim bool
	// leaseFromAck is wrong design (b): a primary counts its lease from
	// when an append was acknowledged instead of from when it was sent.
	leaseFromAck bool
	// standbyTimeout, when set, is the standbys' own election timeout;
	// with ignoreAnnounced they do not take the primary's announced one
	// (wrong design (c): a standby whose wait is shorter than the
	// primary's lease).
	standbyTimeout  time.Duration
	ignoreAnnounced bool
	// noQuiet is wrong design (d): a new primary answers at once, even
	// when its restore point holds generations it never read before its
	// claim (no ha.Node.quietUntil).
	noQuiet bool
}

func (c electionCase) scenario() Scenario {
	return Scenario{
		Name:     c.name,
		Faults:   c.faults,
		Tick:     electionTick,
		Horizon:  c.horizon,
		MaxSteps: 800,
		Start: func(r *Run) Checker {
			e := newElectionWorld(c.name)
			electionPrimary(r, e, c)
			for i := 1; i <= c.standbys; i++ {
				s := &standby{r: r, e: e, c: c, name: fmt.Sprintf("s%d", i), seed: uint64(i)}
				r.Go(s.name, s.run)
			}
			return e
		},
	}
}

// electionOps are the op strings of the leader entries: actor.L<i>/<timeout>.
func leaderOp(actor string, i int) string {
	return fmt.Sprintf("%s.L%d/%s", actor, i, electionTimeout)
}

// announced parses a leader entry's timeout.
func announced(op string) (time.Duration, bool) {
	name, d, ok := strings.Cut(op, "/")
	if !ok || !strings.Contains(name, ".L") {
		return 0, false
	}
	t, err := time.ParseDuration(d)
	return t, err == nil
}

// electionRecoveryOpts is recoveryOpts on the scheduled clock.
func electionRecoveryOpts(r *Run, actor string, ops *[]string) recovery.Options {
	o := recoveryOpts(ops)
	o.Clock = r.Clock(actor)
	// ha.Node.writerOptions: per-sync fencing, concurrent ack order.
	o.Writer = writerOpts(translog.Concurrent)
	return o
}

// electionPrimary opens term 1 through recovery.Open and runs it as the
// master's primary.
func electionPrimary(r *Run, e *electionWorld, c electionCase) {
	const actor = "p"
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		clock := r.Clock(actor)
		claimed := clock.Now() // the leadership lease starts when the claim is sent
		var ops []string
		sh, err := recovery.Open(ctx, store, Shard, 1, actor, electionRecoveryOpts(r, actor, &ops))
		close(e.opened)
		if !e.recovered(r, actor, 1, err, ops, writerOf(sh)) {
			return
		}
		// The first open: no tailed position, no quiet period.
		m := newMasterLog(r, e, c, actor, 1, sh.Writer, clock, claimed, 0)
		m.run(ctx, c.mutations, c.renewals)
	})
}

// masterLog is a primary master's log as master/ha's oplog runs it: one
// append in flight, the leadership lease over acknowledged appends.
type masterLog struct {
	r       *Run
	e       *electionWorld
	actor   string
	term    int64
	wr      *translog.Writer
	clock   *Clock
	fromAck bool

	mu     sync.Mutex
	until  int64 // the lease's end, steady ns
	failed bool
	stop   chan struct{}
	ops    chan string
	// quiet: a new primary answers nothing before this steady time
	// (ha.Node.quietUntil, oplog.Quiet); 0 when it may at once.
	quiet int64
}

func newMasterLog(r *Run, e *electionWorld, c electionCase, actor string, term int64, wr *translog.Writer, clock *Clock, claimed, quiet int64) *masterLog {
	m := &masterLog{r: r, e: e, actor: actor, term: term, wr: wr, clock: clock, fromAck: c.leaseFromAck, stop: make(chan struct{}), quiet: quiet}
	m.until = claimed + int64(ha.LeaseFor(electionTimeout))
	e.grant(r, actor, term, 0, claimed, m.until, true)
	e.master(r, m)
	return m
}

// answers reports whether the master answers at steady time now
// (ha.Node.Serving): its log has not failed, its leadership lease holds
// (oplog.Leased) and its quiet period, if any, has passed (oplog.Quiet).
func (m *masterLog) answers(now int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.failed && now < m.until && now >= m.quiet
}

// quietLeft is how long until the quiet period ends at now; 0 once it has.
func (m *masterLog) quietLeft(now int64) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Duration(max(0, m.quiet-now))
}

// leased is oplog.Leased: nil while the lease holds.
func (m *masterLog) leased() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed {
		return errors.New("the log failed")
	}
	if now := m.clock.Now(); now >= m.until {
		return fmt.Errorf("leadership lapsed at t=%s", ms(m.until))
	}
	return nil
}

// describe names the master, its term, its lease and its quiet period.
func (m *masterLog) describe() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	quiet := ", no quiet period"
	if m.quiet > 0 {
		quiet = ", quiet until t=" + ms(m.quiet)
	}
	return fmt.Sprintf("%s (term %d, lease until t=%s%s)", m.actor, m.term, ms(m.until), quiet)
}

// leaseEnd is when the leadership lease runs out, as the master knows it.
func (m *masterLog) leaseEnd() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.until
}

func (m *masterLog) isFailed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// fail is terminal: nothing more is appended or acknowledged.
func (m *masterLog) fail() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.failed {
		m.failed = true
		close(m.stop)
	}
}

// run appends the leader entry at once, then records mutations as their
// gates open and leader entries on the renewal timer, and returns once
// they are all answered (or the log failed): the master then goes silent.
func (m *masterLog) run(ctx context.Context, mutations, renewals int) {
	m.ops = make(chan string, mutations+renewals+1)
	m.ops <- leaderOp(m.actor, 0)
	var prod sync.WaitGroup
	prod.Go(func() {
		for i := 1; i <= mutations; i++ {
			if m.isFailed() {
				return
			}
			op := fmt.Sprintf("%s.%d", m.actor, i)
			if !m.r.Gate(m.actor, "mutation "+op) {
				return
			}
			// ha.Node.Serving: a new primary in its quiet period answers
			// NOT_PRIMARY; its caller asks again once it has passed.
			if left := m.quietLeft(m.clock.Now()); left > 0 {
				m.r.Note("%s is quiet until t=%s: mutation %s asks again then", m.actor, ms(m.quiet), op)
				select {
				case <-m.clock.After(left):
				case <-m.stop:
					return
				}
				if m.r.Ended() {
					return
				}
			}
			// ha.Node.Serving: a master whose lease ran out answers
			// nothing.
			if err := m.leased(); err != nil {
				m.r.Note("%s refused mutation %s at t=%s: %v", m.actor, op, ms(m.clock.Now()), err)
				continue
			}
			m.ops <- op
		}
	})
	prod.Go(func() {
		// The renewal timer runs as long as the node is primary; the
		// model bounds it to renewals leader entries, and to as many as
		// reach past a quiet period, so that the new primary still holds
		// its lease when it may answer.
		every := ha.RenewEvery(electionTimeout)
		for i := 1; i <= renewals || m.quietLeft(m.clock.Now()) > 0; i++ {
			select {
			case <-m.clock.After(every):
			case <-m.stop:
				return
			}
			if m.isFailed() || m.r.Ended() {
				return
			}
			m.ops <- leaderOp(m.actor, i)
		}
	})
	go func() {
		prod.Wait()
		close(m.ops)
	}()
	for op := range m.ops {
		batch := []string{op}
	gather:
		for {
			select {
			case op, ok := <-m.ops:
				if !ok {
					break gather
				}
				batch = append(batch, op)
			default:
				break gather
			}
		}
		if m.isFailed() {
			continue
		}
		m.send(ctx, batch)
	}
	_ = m.wr.Close(ctx)
}

// send appends one batch as one generation (oplog.send), renews the lease
// from the send time, and acknowledges the batch's mutations only while
// the lease holds (oplog.pump).
func (m *masterLog) send(ctx context.Context, batch []string) {
	raw := make([][]byte, len(batch))
	for i, op := range batch {
		raw[i] = []byte(op)
	}
	sent := m.clock.Now()
	a, err := m.wr.Append(ctx, raw)
	if m.r.Ended() {
		return
	}
	if err != nil {
		m.fail()
		if errors.Is(err, fence.ErrFenced) {
			m.r.Note("%s: append %v fenced: %s", m.actor, batch, reason(err))
			return
		}
		m.e.fail(m.r, "%s: append %v failed without a fencing verdict: %v", m.actor, batch, err)
		return
	}
	now := m.clock.Now()
	from := sent
	if m.fromAck {
		from = now
	}
	m.mu.Lock()
	m.until = max(m.until, from+int64(ha.LeaseFor(electionTimeout)))
	until := m.until
	m.mu.Unlock()
	m.e.grant(m.r, m.actor, m.term, a.Gen, from, from+int64(ha.LeaseFor(electionTimeout)), now < until)
	if now >= until {
		m.r.Note("%s: gen %d %v acknowledged by the store at t=%s, its lease ran out at t=%s: acknowledged to no caller, %s steps down",
			m.actor, a.Gen, batch, ms(now), ms(until), m.actor)
		m.e.leaseStopped()
		m.fail()
		return
	}
	for _, op := range batch {
		if _, ok := announced(op); !ok {
			m.e.acked(m.r, m.actor, m.term, op, a.Gen, now)
		}
	}
}

// standby is a hot standby of master/ha with the real election
// bookkeeping.
type standby struct {
	r    *Run
	e    *electionWorld
	c    electionCase
	name string
	seed uint64

	store   *blobstore.Container
	clock   *Clock
	el      *ha.Elector
	rd      *translog.Reader
	line    int64 // the term whose generations it reads next
	pos     recovery.Position
	applied []string
	done    bool // its part ended: it claimed, or saw a newer master and does not follow
}

func (s *standby) run(ctx context.Context, store *blobstore.Container) {
	<-s.e.opened
	s.store, s.clock, s.rd, s.line = store, s.r.Clock(s.name), translog.NewReader(store, Shard), 1
	own := electionTimeout
	if s.c.standbyTimeout > 0 {
		own = s.c.standbyTimeout
	}
	now := s.clock.Now()
	s.el = ha.NewElector(own, s.seed, now)
	// The bootstrap read the lineage: p's marker is the newest.
	s.el.SawTerm(1, now)
	s.e.observe(s.name, 1, 0, now)
	for {
		err := s.maybeElect(ctx)
		if s.done || s.r.Ended() {
			return
		}
		if err != nil {
			s.e.fail(s.r, "%s: %v", s.name, err)
			return
		}
		progressed, err := s.step(ctx)
		if s.done || s.r.Ended() {
			return
		}
		if err != nil && !blobstore.IsRetryable(err) {
			s.e.fail(s.r, "%s: %v", s.name, err)
			return
		}
		if progressed {
			continue
		}
		<-s.clock.After(electionPoll)
		if s.r.Ended() {
			return
		}
	}
}

// step applies the next generation of the lineage if it exists
// (ha.Node.standbyStep). Store trouble is an error the caller retries at
// the next poll.
func (s *standby) step(ctx context.Context) (bool, error) {
	g := s.pos.Gen + 1
	b, err := s.rd.ReadBatch(ctx, s.line, g)
	switch {
	case errors.Is(err, translog.ErrMissingGen):
		return false, nil
	case errors.Is(err, translog.ErrPoisoned):
		return false, s.poisoned(ctx, g)
	case err != nil:
		return false, err
	}
	if b.FirstSeqNo != s.pos.NextSeqNo {
		return false, fmt.Errorf("gen %d of term %d starts at sequence number %d, the standby's history ends before %d", g, s.line, b.FirstSeqNo, s.pos.NextSeqNo)
	}
	var leader time.Duration
	var isLeader bool
	for _, op := range b.Ops {
		s.applied = append(s.applied, string(op))
		if d, ok := announced(string(op)); ok {
			leader, isLeader = d, true
		}
	}
	now := s.clock.Now()
	s.el.SawTerm(s.line, now)
	s.el.Alive(now)
	if isLeader && !s.c.ignoreAnnounced {
		s.el.PrimaryTimeout(leader)
	}
	s.e.observe(s.name, s.line, g, now)
	s.pos = recovery.Position{Term: s.line, Gen: g, NextSeqNo: b.FirstSeqNo + int64(len(b.Ops))}
	return true, nil
}

// poisoned: the next generation of the lineage term was sealed by a newer
// term. The standby lists the seal markers; a newer one is a new primary
// (a sign of life). Following it, the standby reads the new term from the
// cut on.
func (s *standby) poisoned(ctx context.Context, g int64) error {
	items, err := blobstore.ListAll(ctx, s.store, layout.MarkerPrefix)
	if err != nil {
		return err
	}
	var top int64
	for _, it := range items {
		if t, ok := layout.ParseMarkerKey(it.Key); ok {
			top = max(top, t)
		}
	}
	if top <= s.line {
		return nil // the marker is not there yet
	}
	s.sawTerm(top)
	if !s.c.follow {
		return nil
	}
	obj, err := s.store.Get(ctx, layout.MarkerKey(top))
	if err != nil {
		return err
	}
	mk, err := seal.DecodeMarker(Shard, layout.MarkerKey(top), obj.Body)
	if err != nil {
		return err
	}
	if mk.Restore.Term != s.line || mk.Restore.Gen != g-1 {
		// The model follows a lineage only where it continues from
		// the standby's position (ha.Node.refreshLineage reloads
		// otherwise).
		return fmt.Errorf("term %d's marker restores (term %d, gen %d), not the standby's position (term %d, gen %d): outside the model",
			top, mk.Restore.Term, mk.Restore.Gen, s.line, g-1)
	}
	s.r.Note("%s follows term %d from gen %d", s.name, top, g)
	s.line = top
	return nil
}

// sawTerm records a term seen in the log: a new one is another master's
// claim, a sign of life. A standby that does not follow ends there.
func (s *standby) sawTerm(term int64) bool {
	now := s.clock.Now()
	if !s.el.SawTerm(term, now) {
		return false
	}
	s.e.observe(s.name, term, 0, now)
	s.r.Note("%s saw term %d at t=%s", s.name, term, ms(now))
	if !s.c.follow {
		s.done = true
	}
	return true
}

// maybeElect is ha.Node.maybeElect; s.done once the standby's part ended
// (it claimed, won or lost, or it saw a newer master and does not
// follow). Store trouble puts the election off to the next poll.
func (s *standby) maybeElect(ctx context.Context) error {
	if due, auto := s.el.Until(s.clock.Now()); !auto || due > 0 {
		return nil
	}
	top, err := s.topTerm(ctx)
	if err != nil {
		return retried(err)
	}
	if s.sawTerm(top) {
		return nil
	}
	term := max(top, s.el.Term()) + 1
	if progressed, err := s.step(ctx); progressed || err != nil || s.done {
		return retried(err)
	}
	if s.r.Ended() {
		return nil
	}
	s.done = true
	if s.c.noClaim {
		s.promoteUnclaimed(ctx, term)
	} else {
		s.claim(ctx, term)
	}
	return nil
}

// retried drops store trouble: the standby tries again at its next poll.
func retried(err error) error {
	if err != nil && blobstore.IsRetryable(err) {
		return nil
	}
	return err
}

// topTerm is ha.Node.topTerm: the highest term the fence keys and seal
// markers name.
func (s *standby) topTerm(ctx context.Context) (int64, error) {
	var top int64
	for _, prefix := range []string{layout.FenceDir, layout.MarkerPrefix} {
		var items []blobstore.Attrs
		err := fence.Retry(ctx, s.clock, backoff, func(ctx context.Context) error {
			var err error
			items, err = blobstore.ListAll(ctx, s.store, prefix)
			return err
		})
		if err != nil {
			return 0, err
		}
		for _, it := range items {
			if t, ok := layout.ParseFenceKey(it.Key); ok {
				top = max(top, t)
			}
			if t, ok := layout.ParseMarkerKey(it.Key); ok {
				top = max(top, t)
			}
		}
	}
	return top, nil
}

// claim is ha.Node.openPrimary with resume: recovery.Open at term from
// the tailed position (without it when the seal cut that position off),
// then the standby is a primary.
func (s *standby) claim(ctx context.Context, term int64) {
	claimed := s.clock.Now()
	s.e.claiming(s.r, s.name, term, claimed)
	var replayed []string
	o := electionRecoveryOpts(s.r, s.name, &replayed)
	pos := s.pos
	o.Resume = &pos
	// observed is the last generation the standby had read when it
	// claimed, life its last sign of the primary's life
	// (ha.Node.openPrimary).
	observed, life := pos.Gen, s.el.Life()
	sh, err := recovery.Open(ctx, s.store, Shard, term, s.name, o)
	ops := append(append([]string(nil), s.applied...), replayed...)
	if errors.Is(err, recovery.ErrResumeOffLineage) {
		s.r.Note("%s: its position is not on the sealed lineage; full replay", s.name)
		replayed, o.Resume = nil, nil
		sh, err = recovery.Open(ctx, s.store, Shard, term, s.name, o)
		ops = replayed
	}
	if !s.e.recovered(s.r, s.name, term, err, ops, writerOf(sh)) {
		if errors.Is(err, fence.ErrFenced) && !s.r.Ended() {
			s.e.lostClaim()
		}
		return
	}
	s.e.won()
	quiet := s.quietUntil(sh, observed, life)
	if quiet > 0 {
		s.r.Note("%s's restore point (gen %d) holds generations it never read (it had read up to gen %d): quiet until t=%s",
			s.name, sh.Restore().Gen, observed, ms(quiet))
	}
	m := newMasterLog(s.r, s.e, s.c, s.name, term, sh.Writer, s.clock, claimed, quiet)
	m.run(ctx, s.c.writes, 0)
}

// quietUntil is ha.Node.quietUntil, through the same rule
// (ha.QuietUntil): the new primary answers nothing until its
// predecessor's lease may have run out, counted from the last sign of
// life the standby saw and, when the restore point holds a generation it
// never read, from the sweep. Wrong design (d) always answers at once.
func (s *standby) quietUntil(sh *recovery.Shard, observed, life int64) int64 {
	t := electionTimeout
	if s.c.standbyTimeout > 0 {
		t = s.c.standbyTimeout
	}
	if s.c.noQuiet {
		return 0
	}
	return ha.QuietUntil(t, observed, life, sh.Restore().Gen, sh.Chain.SweptAt(), s.clock.Now())
}

// promoteUnclaimed is wrong design (a): the standby opens a writer at
// term right after what it tailed, with no claim (the old primary keeps
// its fence key) and no seal (no poison, no marker).
func (s *standby) promoteUnclaimed(ctx context.Context, term int64) {
	claimed := s.clock.Now()
	s.e.claiming(s.r, s.name, term, claimed)
	wo := writerOpts(translog.Concurrent)
	wo.FencingDisabled = true
	wo.Shard, wo.Term, wo.Allocation = Shard, term, s.name
	wo.StartGen, wo.StartSeqNo = s.pos.Gen+1, s.pos.NextSeqNo
	wr, err := translog.Open(ctx, s.store, nil, wo)
	if err != nil {
		s.e.fail(s.r, "%s: open writer: %v", s.name, err)
		return
	}
	s.r.Note("%s promoted itself to term %d without a claim, writing from gen %d", s.name, term, wo.StartGen)
	s.e.restored(s.r, s.name, term, s.applied)
	s.e.mu.Lock()
	s.e.claimed[s.name] = term
	s.e.writers[s.name], s.e.startGen[s.name] = wr, wr.NextGen()
	s.e.mu.Unlock()
	s.e.won()
	m := newMasterLog(s.r, s.e, s.c, s.name, term, wr, s.clock, claimed, 0)
	m.run(ctx, s.c.writes, 0)
}

// ms renders a steady time in ms.
func ms(ns int64) string { return fmt.Sprintf("%dms", ns/int64(time.Millisecond)) }
