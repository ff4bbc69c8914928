package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// backoff retries at once (the clocks auto-advance) but keeps the attempt
// bounds of production code.
var backoff = fence.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 10}

func claimOpts() []fence.Option {
	return []fence.Option{fence.WithClock(clock.NewAuto()), fence.WithBackoff(backoff)}
}

func writerOpts(order translog.AckOrder) translog.Options {
	// Gathering waits on the clock; off, a batch is exactly what the gates
	// let in.
	return translog.Options{AckOrder: order, Clock: clock.NewAuto(), Backoff: backoff, MaxGatherDelay: -1}
}

type ack struct {
	actor string
	term  int64
	gen   int64
	op    string
	step  int
}

type restore struct {
	actor string
	term  int64
	ops   map[string]bool
	step  int
}

// world records what the actors of one run observed, and holds the
// invariants of protocol section 8 over it.
type world struct {
	successors bool // false: no claim but the primary's (NoSpuriousFencing applies)
	// unguarded names the actors whose writer runs unfenced or in observe
	// mode: they protect nothing beyond the successor's poison, so
	// SingleAcker does not hold them as the lower term (NoAckedWriteLoss,
	// FencedTerminal and AckOrder still do).
	unguarded map[string]bool

	mu        sync.Mutex
	acks      []ack
	checked   int // acks already checked for AckOrder
	fenced    map[string]int
	failures  []string
	restores  []restore
	claimed   map[string]int64 // actor -> term, claims that completed
	claimStep map[string]int
	terms     map[string]int64 // actor -> term it claims
	writers   map[string]*translog.Writer
	startGen  map[string]int64
	appends   map[string]int   // appends started per actor
	finished  map[string]int   // appends answered per actor
	sentGen   map[string]int64 // highest generation written before the fencing
	// opened is closed once the primary's claim returned: successors are
	// appointed after a primary is live, which keeps the primary's own
	// claim out of the interleavings.
	opened chan struct{}
}

func newWorld(successors bool) *world {
	return &world{successors: successors, fenced: map[string]int{}, claimed: map[string]int64{}, claimStep: map[string]int{},
		unguarded: map[string]bool{}, terms: map[string]int64{}, writers: map[string]*translog.Writer{}, startGen: map[string]int64{},
		appends: map[string]int{}, finished: map[string]int{}, sentGen: map[string]int64{}, opened: make(chan struct{})}
}

func (w *world) fail(r *Run, format string, args ...any) {
	if r.Ended() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, fmt.Sprintf(format, args...))
}

func (w *world) claimResult(r *Run, actor string, term int64, err error) {
	if r.Ended() {
		return
	}
	switch {
	case err == nil:
		r.Note("%s claimed term %d", actor, term)
		w.mu.Lock()
		w.claimed[actor] = term
		w.claimStep[actor] = r.Step()
		w.mu.Unlock()
	case errors.Is(err, fence.ErrFenced):
		r.Note("%s: claim of term %d fenced: %s", actor, term, reason(err))
	default:
		w.fail(r, "%s: claim of term %d failed without a fencing verdict: %v", actor, term, err)
	}
}

func reason(err error) string {
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return err.Error()
}

func (w *world) appended(r *Run, actor string, term int64, op string, a translog.Ack, err error) {
	if r.Ended() {
		return
	}
	w.mu.Lock()
	w.finished[actor]++
	w.mu.Unlock()
	switch {
	case err == nil:
		if a.FencingObserved != "" {
			// Observe mode: per_sync would have failed this append.
			r.Note("%s acked %s (term %d gen %d) with fencing observed", actor, op, a.Term, a.Gen)
		} else {
			r.Note("%s acked %s (term %d gen %d)", actor, op, a.Term, a.Gen)
		}
		w.mu.Lock()
		w.acks = append(w.acks, ack{actor: actor, term: term, gen: a.Gen, op: op, step: r.Step()})
		w.mu.Unlock()
	case errors.Is(err, fence.ErrFenced):
		r.Note("%s: append %s fenced: %s", actor, op, reason(err))
	default:
		w.fail(r, "%s: append %s failed without a fencing verdict: %v", actor, op, err)
	}
}

// recovered records how an actor's recovery at term ended: a fencing
// verdict is its claim's result, any other error a violation; an open
// records the claim, the restore point and the writer. It reports whether
// the actor opened.
func (w *world) recovered(r *Run, actor string, term int64, err error, ops []string, wr *translog.Writer) bool {
	if err != nil {
		var fe *fence.FencedError
		if errors.As(err, &fe) {
			w.claimResult(r, actor, term, err)
			return false
		}
		w.fail(r, "%s: recovery at term %d failed without a fencing verdict: %v", actor, term, err)
		return false
	}
	w.claimResult(r, actor, term, nil)
	w.restored(r, actor, term, ops)
	w.mu.Lock()
	w.writers[actor], w.startGen[actor] = wr, wr.NextGen()
	w.mu.Unlock()
	return true
}

func (w *world) restored(r *Run, actor string, term int64, ops []string) {
	if r.Ended() {
		return
	}
	set := map[string]bool{}
	for _, op := range ops {
		set[op] = true
	}
	r.Note("%s restore point: %v", actor, ops)
	w.mu.Lock()
	w.restores = append(w.restores, restore{actor: actor, term: term, ops: set, step: r.Step()})
	w.mu.Unlock()
}

// Digest: the store and histories fix every actor's state; what the
// invariants remember on top is which acks, fencings and restores happened
// (their order does not matter to any invariant once checked).
func (w *world) Digest() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, a := range w.acks {
		parts = append(parts, "a"+a.actor+a.op)
	}
	for a := range w.fenced {
		parts = append(parts, "f"+a)
	}
	for _, rs := range w.restores {
		parts = append(parts, fmt.Sprintf("r%s%d", rs.actor, len(rs.ops)))
	}
	for a, t := range w.claimed {
		parts = append(parts, fmt.Sprintf("c%s%d", a, t))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (w *world) Check(r *Run) error {
	step := r.Step()
	w.mu.Lock()
	// Writers report fencing through Err even with no append waiting.
	for actor, wr := range w.writers {
		if _, ok := w.fenced[actor]; !ok && errors.Is(wr.Err(), fence.ErrFenced) {
			w.fenced[actor] = step
		}
	}
	w.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		return errors.New(w.failures[0])
	}
	if !w.successors {
		for actor := range w.fenced {
			return fmt.Errorf("NoSpuriousFencing: %s was fenced with no successor and no handoff", actor)
		}
	}
	// FencedTerminal: no ack and no new write from a fenced writer. Not
	// even a generation whose fence CAS landed before the fencing and
	// whose md lands after it: every pending append fails once fenced.
	for _, a := range w.acks {
		if f, ok := w.fenced[a.actor]; ok && a.step > f {
			return fmt.Errorf("FencedTerminal: %s acked %s (gen %d) at step %d after it was fenced at step %d",
				a.actor, a.op, a.gen, a.step, f)
		}
	}
	// A fenced writer starts no new generation: it may still retry the
	// md create or CAS of one already on the wire, nothing else.
	r.Store.mu.Lock()
	pending := append([]*Request(nil), r.Store.pending...)
	r.Store.mu.Unlock()
	for _, q := range pending {
		if q.Gate || !q.Op.Mutates() {
			continue
		}
		g := genOf(q)
		f, fenced := w.fenced[q.Actor]
		if !fenced || q.arrival <= f {
			w.sentGen[q.Actor] = max(w.sentGen[q.Actor], g)
			continue
		}
		if g == 0 || g > w.sentGen[q.Actor] {
			return fmt.Errorf("FencedTerminal: %s sent %s at step %d after it was fenced at step %d", q.Actor, q.Label(), q.arrival, f)
		}
	}
	// AckOrder: at its ack, every generation of the writer up to the
	// acked one is durable as this writer's sync record, or, once GC cut
	// the translog below a checkpoint of the term, as that checkpoint
	// (PROTOCOL.md section 8: durable; section 7: GC deletes md at or
	// below the newest complete checkpoint).
	for ; w.checked < len(w.acks); w.checked++ {
		a := w.acks[w.checked]
		covered := int64(0)
		for _, k := range r.Store.Keys(layout.ManifestTermPrefix(a.term)) {
			if p, ok := layout.ParseManifestKey(k); ok && p.Term == a.term {
				covered = max(covered, p.Gen)
			}
		}
		for g := w.startGen[a.actor]; g <= a.gen; g++ {
			key := layout.MDKey(a.term, g)
			body, ok := r.Store.Get(key)
			if !ok && g <= covered {
				continue
			}
			if !ok {
				return fmt.Errorf("AckOrder: %s acked %s (gen %d) but %s does not exist", a.actor, a.op, a.gen, DescribeKey(key))
			}
			md, err := translog.DecodeMD(Shard, key, body)
			if err != nil || md.Kind != translog.KindSync || md.Allocation != a.actor {
				return fmt.Errorf("AckOrder: %s acked %s (gen %d) but %s holds %s", a.actor, a.op, a.gen, DescribeKey(key), DescribeBody(key, body))
			}
		}
	}
	// NoAckedWriteLoss: every op acked by a lower term, before or after
	// the restore, is in the restore point of every later claim.
	for _, rs := range w.restores {
		for _, a := range w.acks {
			if a.term < rs.term && !rs.ops[a.op] {
				return fmt.Errorf("NoAckedWriteLoss: %s acked %s (term %d gen %d, step %d) but %s's restore point at term %d (step %d) lacks it",
					a.actor, a.op, a.term, a.gen, a.step, rs.actor, rs.term, rs.step)
			}
		}
	}
	// SingleAcker: once a higher term acknowledged, a lower term acks
	// nothing that the higher term did not restore.
	for _, hi := range w.acks {
		handed := map[string]bool{}
		for _, rs := range w.restores {
			if rs.actor == hi.actor {
				handed = rs.ops
			}
		}
		for _, lo := range w.acks {
			if lo.term < hi.term && lo.step > hi.step && !handed[lo.op] && !w.unguarded[lo.actor] {
				return fmt.Errorf("SingleAcker: %s (term %d) acked %s at step %d after %s (term %d) acked %s at step %d",
					lo.actor, lo.term, lo.op, lo.step, hi.actor, hi.term, hi.op, hi.step)
			}
		}
	}
	return nil
}

func (w *world) Final(r *Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.successors {
		for actor, n := range w.appends {
			acked := 0
			for _, a := range w.acks {
				if a.actor == actor {
					acked++
				}
			}
			if acked != n {
				return fmt.Errorf("NoSpuriousFencing: %s acked %d of %d appends with no successor", actor, acked, n)
			}
		}
	}
	// HigherTermPrevails: with no newer claim, the highest claim completes.
	var top string
	for actor, t := range w.terms {
		if top == "" || t > w.terms[top] {
			top = actor
		}
	}
	if top != "" {
		if _, ok := w.claimed[top]; !ok {
			return fmt.Errorf("HigherTermPrevails: %s's claim of term %d, the highest, did not complete", top, w.terms[top])
		}
		if _, ok := w.fenced[top]; ok {
			return fmt.Errorf("HigherTermPrevails: %s (term %d, the highest) was fenced", top, w.terms[top])
		}
	}
	return nil
}

// genOf is the generation a write is for: the fence record's for a CAS,
// the key's for an md create; 0 for any other write.
func genOf(q *Request) int64 {
	if p, ok := layout.ParseMDKey(q.Key); ok && q.Op == blobstore.OpCreateIfAbsent {
		return p.Gen
	}
	if _, ok := layout.ParseFenceKey(q.Key); ok && q.Op == blobstore.OpCompareAndSwap {
		if rec, err := fence.DecodeRecord(Shard, q.Key, q.Body); err == nil {
			return rec.Gen
		}
	}
	return 0
}

// appender issues n appends through gates and waits for their answers.
func appender(ctx context.Context, r *Run, w *world, actor string, term int64, wr *translog.Writer, n int) {
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		op := fmt.Sprintf("%s.%d", actor, i)
		if !r.Gate(actor, "append "+op) {
			break
		}
		w.mu.Lock()
		w.appends[actor]++
		w.mu.Unlock()
		wg.Go(func() {
			a, err := wr.Append(ctx, [][]byte{[]byte(op)})
			w.appended(r, actor, term, op, a, err)
		})
	}
	wg.Wait()
	_ = wr.Close(ctx)
}

// primary claims term 1 and appends n ops.
func primary(r *Run, w *world, actor string, n int, order translog.AckOrder, wrap func(*blobstore.Container) *blobstore.Container) {
	primaryWith(r, w, actor, n, writerOpts(order), wrap)
}

// primaryWith is primary with the writer options wo.
func primaryWith(r *Run, w *world, actor string, n int, wo translog.Options, wrap func(*blobstore.Container) *blobstore.Container) {
	w.terms[actor] = 1
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		if wrap != nil {
			store = wrap(store)
		}
		chain, err := fence.Claim(ctx, store, Shard, 1, actor, claimOpts()...)
		w.claimResult(r, actor, 1, err)
		close(w.opened)
		if err != nil {
			return
		}
		wr, err := translog.Open(ctx, store, chain, wo)
		if err != nil {
			w.fail(r, "%s: open writer: %v", actor, err)
			return
		}
		w.mu.Lock()
		w.writers[actor], w.startGen[actor] = wr, wr.NextGen()
		w.mu.Unlock()
		appender(ctx, r, w, actor, 1, wr, n)
	})
}
