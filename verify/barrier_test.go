package verify

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// The seal's barrier (docs/PROTOCOL.md section 5, "As built: the
// barrier"). A writer that keeps appending can win the race for the next
// generation against every poison; after chaseLimit (2) lost poisons the
// walk creates a barrier poison lead generations above next (doubling the
// lead while it finds the writer's md there), reads next..barrier-1 in one
// round, takes the contiguous md it finds and poisons from the first gap;
// with no gap the cut is barrier-1. The scenarios here race an unfenced or
// observe-mode writer (nothing but the poisons stops it) against the real
// recovery.Open with a lead of 2, and a direct seal that follows the same
// rule with and without the read of the generations below the barrier.

// barrierLead is the lead the scenarios give the seal: small, so the
// barrier lands within the writer's few syncs.
const barrierLead = 2

// barrierCount is what a scenario's runs showed of the barrier path,
// summed over the runs of one search: runs in which the successor sent a
// poison that skipped generations above its last one (the barrier), in
// which such a poison found the key taken (the writer's md there: the lead
// doubles), in which one landed, and in which a poison went below a landed
// barrier afterwards (the fill found a gap).
type barrierCount struct{ sent, refused, landed, below atomic.Int64 }

var barrierCounts = map[string]*barrierCount{}

func barrierCountOf(name string) *barrierCount {
	if c, ok := barrierCounts[name]; ok {
		return c
	}
	c := &barrierCount{}
	barrierCounts[name] = c
	return c
}

// barrierProbe wraps the successor's store: it watches the poison creates
// at term 1 and notes (in the trace, and in count) the one that skips
// generations above the previous one, which only the barrier does, and
// any poison sent below a landed barrier.
func barrierProbe(r *Run, actor string, count *barrierCount) func(*blobstore.Container) *blobstore.Container {
	var last, barrier int64
	var sent, refused, landed, below bool
	return func(c *blobstore.Container) *blobstore.Container {
		return c.With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
			p, ok := layout.ParseMDKey(call.Key)
			t, g := p.Term, p.Gen
			if !ok || t != 1 || call.Op != blobstore.OpCreateIfAbsent {
				return next(ctx, call)
			}
			skip := last > 0 && g > last+1 && barrier == 0
			if barrier > 0 && g < barrier && !below {
				below = true
				count.below.Add(1)
				r.Note("%s poisons gen %d, below its barrier at gen %d: the fill found a gap", actor, g, barrier)
			}
			last = max(last, g)
			res, err := next(ctx, call)
			if skip {
				if !sent {
					sent = true
					count.sent.Add(1)
				}
				r.Note("%s sent the barrier poison at term 1 gen %d: %v", actor, g, errOrOK(err))
				if errors.Is(err, blobstore.ErrAlreadyExists) && !refused {
					refused = true
					count.refused.Add(1)
				}
				if err == nil && !landed {
					landed, barrier = true, g
					count.landed.Add(1)
				}
			}
			return res, err
		})
	}
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// barrierRecovery: the successor opens at term through the real
// recovery.Open in fencing f with the seal's BarrierLead lead, once the
// term-1 writer opened, and writes nothing.
func barrierRecovery(r *Run, w *world, actor string, term int64, f seal.Fencing, lead int, count *barrierCount) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		<-w.opened
		store = barrierProbe(r, actor, count)(store)
		var ops []string
		o := recoveryOpts(&ops)
		o.Writer = modeWriterOpts(f, translog.Concurrent)
		o.BarrierLead = lead
		sh, err := recovery.Open(ctx, store, Shard, term, actor, o)
		if !w.recovered(r, actor, term, err, ops, writerOf(sh)) {
			return
		}
		_ = sh.Writer.Close(ctx)
	})
}

// barrierRecoveryScenario: w1 opens at term 1 through recovery.Open in
// fencing f (unfenced or observe: unguarded) and appends syncs ops; c2
// opens at term 2 through recovery.Open with a barrier lead of 2.
func barrierRecoveryScenario(name string, f seal.Fencing, order translog.AckOrder, syncs, faults int) Scenario {
	count := barrierCountOf(name)
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			w.unguarded["w1"] = true
			recoverAtWith(r, w, "w1", 1, syncs, false, modeWriterOpts(f, order))
			barrierRecovery(r, w, "c2", 2, f, barrierLead, count)
			return modeLineageWorld{w, f}
		},
	}
}

// modeLineageWorld is lineageWorld for a shard in fencing f: the final
// recovery over the run's store asks for f (an unfenced shard refuses an
// open that asks for fencing).
type modeLineageWorld struct {
	*world
	f seal.Fencing
}

func (w modeLineageWorld) Final(r *Run) error {
	if err := w.world.Final(r); err != nil {
		return err
	}
	ctx := context.Background()
	c, err := finalStore(ctx, r)
	if err != nil {
		return err
	}
	var ops []string
	o := recoveryOpts(&ops)
	o.Writer = modeWriterOpts(w.f, translog.Concurrent)
	sh, err := recovery.Open(ctx, c, Shard, 1000, "reader", o)
	if err != nil {
		return fmt.Errorf("final lineage: a recovery over the final store failed: %w", err)
	}
	if err := sh.Writer.Close(ctx); err != nil {
		return err
	}
	return w.allAckedIn(ops)
}

// barrierSealDirect is the seal's walk of term 1 reduced to its rule, for
// a successor at term sealedBy (sealDirect's counterpart with the
// barrier): poison the first missing generation and, while the lineage
// term's md is found there, take it and poison the next; after two lost
// poisons create a barrier poison lead above next (twice as far while the
// writer's md is there); then, with fill, read next..barrier-1, take the
// contiguous md and poison from the first gap, the barrier ending the walk
// at the latest. Without fill (the wrong design) the walk ends at
// barrier-1 once the barrier landed, with the md it read so far as the
// restore point. It returns the cut and the restore point's ops.
func barrierSealDirect(ctx context.Context, store *blobstore.Container, sealedBy int64, lead int64, fill bool) (int64, []string, error) {
	rd := translog.NewReader(store, Shard)
	clock := clock.NewAuto()
	mds := map[int64]translog.MD{}
	// read returns the md at gen; found false when there is none.
	read := func(gen int64) (md translog.MD, found bool, err error) {
		err = fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
			var err error
			md, err = rd.ReadMD(ctx, 1, gen)
			if errors.Is(err, translog.ErrMissingGen) {
				found = false
				return nil
			}
			found = err == nil
			return err
		})
		return md, found, err
	}
	// poison creates the poison at gen and reads what holds the key when
	// the create was refused or its answer lost: created, or the md there.
	poison := func(gen int64) (created bool, held translog.MD, err error) {
		body, err := translog.EncodePoison(Shard, 1, gen, sealedBy)
		if err != nil {
			return false, held, err
		}
		for {
			err = fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
				_, err := store.CreateIfAbsent(ctx, layout.MDKey(1, gen), body)
				return err
			})
			if err == nil {
				return true, held, nil
			}
			if !errors.Is(err, blobstore.ErrAlreadyExists) && !blobstore.IsAmbiguous(err) {
				return false, held, err
			}
			md, found, err := read(gen)
			if err != nil {
				return false, held, err
			}
			if found {
				return false, md, nil
			}
			// An ambiguous create that did not land: send it again.
		}
	}
	// The contiguous prefix.
	next := int64(1)
	for {
		md, found, err := read(next)
		if err != nil {
			return 0, nil, err
		}
		if !found {
			break
		}
		if md.Kind == translog.KindPoison {
			return restoreOf(mds, next-1)
		}
		mds[next] = md
		next++
	}
	lost, barrier := 0, int64(0)
	for {
		if barrier == 0 && lost >= 2 {
			gen := next + lead
			created, held, err := poison(gen)
			if err != nil {
				return 0, nil, err
			}
			if !created && held.Kind == translog.KindSync {
				lead *= 2
				continue
			}
			barrier = gen
			if !fill {
				// The wrong design: the barrier ends the walk, the
				// generations below it unread.
				return restoreOf(mds, barrier-1)
			}
			for ; next < barrier; next++ {
				md, found, err := read(next)
				if err != nil {
					return 0, nil, err
				}
				if !found {
					break
				}
				if md.Kind == translog.KindPoison {
					return restoreOf(mds, next-1)
				}
				mds[next] = md
			}
			if next == barrier {
				return restoreOf(mds, barrier-1)
			}
			continue
		}
		created, held, err := poison(next)
		if err != nil {
			return 0, nil, err
		}
		if created || held.Kind == translog.KindPoison {
			return restoreOf(mds, next-1)
		}
		mds[next] = held
		next++
		lost++
		if next == barrier {
			return restoreOf(mds, barrier-1)
		}
	}
}

// restoreOf is the restore point at cut: the ops of the md the walk took
// (the wrong design's cut lies above them), in order.
func restoreOf(mds map[int64]translog.MD, cut int64) (int64, []string, error) {
	var ops []string
	for g := int64(1); g <= cut; g++ {
		md, ok := mds[g]
		if !ok {
			continue
		}
		if !md.Inline {
			return 0, nil, fmt.Errorf("md of gen %d is not inline", g)
		}
		batch, err := translog.DecodeOps(md.Payload, md.OpCount)
		if err != nil {
			return 0, nil, err
		}
		for _, op := range batch {
			ops = append(ops, string(op))
		}
	}
	return cut, ops, nil
}

// barrierDirectScenario: an unfenced w1 appending syncs ops, raced by c2
// that claims term 2 and seals term 1 with barrierSealDirect.
func barrierDirectScenario(name string, syncs, faults int, fill bool) Scenario {
	count := barrierCountOf(name)
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			modePrimary(r, w, "w1", syncs, unfenced, translog.Concurrent)
			w.terms["c2"] = 2
			r.Go("c2", func(ctx context.Context, store *blobstore.Container) {
				<-w.opened
				store = barrierProbe(r, "c2", count)(store)
				_, err := fence.Claim(ctx, store, Shard, 2, "c2", claimOpts()...)
				w.claimResult(r, "c2", 2, err)
				if err != nil {
					return
				}
				cut, ops, err := barrierSealDirect(ctx, store, 2, barrierLead, fill)
				if err != nil {
					w.fail(r, "c2: seal: %v", err)
					return
				}
				r.Note("c2 cut term 1 at gen %d", cut)
				w.restored(r, "c2", 2, ops)
			})
			return w
		},
	}
}

func init() {
	con, seq := translog.Concurrent, translog.Sequenced
	register(barrierRecoveryScenario("barrier-recovery-unfenced", unfenced, con, 4, 0))
	register(barrierRecoveryScenario("barrier-recovery-unfenced-deep", unfenced, con, 5, 0))
	register(barrierRecoveryScenario("barrier-recovery-unfenced-faults", unfenced, con, 4, 1))
	// The observe writer in the sequenced order (md, then the CAS): in
	// the concurrent order its md and CAS interleave with everything, and
	// the depth-first search, whose first schedules let the successor
	// run first, sends its first barrier poison only after some 5,000
	// states (3 syncs); the deep scope runs that order.
	register(barrierRecoveryScenario("barrier-recovery-observe", observe, seq, 4, 0))
	register(barrierRecoveryScenario("barrier-recovery-observe-deep", observe, con, 4, 0))
	register(barrierRecoveryScenario("barrier-recovery-observe-faults", observe, seq, 4, 1))
	register(barrierDirectScenario("barrier-direct", 5, 0, true))
	register(barrierDirectScenario("barrier-direct-faults", 5, 1, true))
	register(barrierDirectScenario("wrong-barrier-no-fill", 5, 0, false))
}

// TestBarrier: an unfenced and an observe-mode writer that keep appending
// against the real recovery.Open with a barrier lead of 2; the barrier's
// rule as a direct seal, with the read below the barrier (clean) and
// without it (refuted). Every clean scope must reach the barrier: some run
// must send the barrier poison and land it.
func TestBarrier(t *testing.T) {
	// The bounded run stops the recovery scopes and the direct seal with
	// a fault at 2,000 states (their first 2,000 already reach the
	// barrier many times over); make verify runs them to the deep bound.
	b := Bounds{}
	if !deep() {
		b.MaxStates = 2000
	}
	es := []expectation{
		{scenario: "barrier-recovery-unfenced", bounds: b},
		{scenario: "barrier-recovery-observe", bounds: b},
		{scenario: "barrier-recovery-unfenced-faults", bounds: b},
		{scenario: "barrier-direct"},
		{scenario: "barrier-direct-faults", bounds: b},
		{scenario: "wrong-barrier-no-fill", refuted: true, invariant: "NoAckedWriteLoss"},
	}
	if deep() {
		// Its first 2,000 states send no barrier poison.
		es = append(es, expectation{scenario: "barrier-recovery-observe-faults"})
	}
	for _, e := range es {
		e.scenario = scope(e.scenario)
		if e.bounds.MaxStates == 0 {
			e.bounds.MaxStates = stateBound()
		}
		if *flagScenario != "" && *flagScenario != e.scenario {
			continue
		}
		t.Run(e.scenario, func(t *testing.T) {
			c := barrierCountOf(e.scenario)
			c.sent.Store(0)
			c.refused.Store(0)
			c.landed.Store(0)
			c.below.Store(0)
			checkExpectation(t, e)
			t.Logf("%s: barrier poison sent in %d runs, found the key taken in %d, landed in %d, a gap poisoned below it in %d",
				e.scenario, c.sent.Load(), c.refused.Load(), c.landed.Load(), c.below.Load())
			if !e.refuted && c.landed.Load() == 0 {
				t.Fatalf("%s: no run landed a barrier poison: the barrier path was not explored", e.scenario)
			}
		})
	}
}
