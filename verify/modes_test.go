package verify

import (
	"context"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// The predecessor's mode. The successor's seal (poison the first missing
// generation of the lineage term, and poison the next one while it finds
// the predecessor's md there) is the same whatever mode the predecessor
// ran: unfenced (md creates only), observe (a CAS per sync whose refusal
// is only reported), per_sync or create_only. Every op a lower term
// acknowledged must be in the restore point. An unfenced or observe
// writer protects nothing beyond the poison, so SingleAcker does not hold
// it (world.unguarded); NoAckedWriteLoss, FencedTerminal (a poison at its
// md key stops it) and AckOrder do. A shard's mode changes only at a new
// term, through recovery.RewriteFencing, which claims its own term.

var (
	unfenced = seal.Fencing{Disabled: true}
	observe  = seal.Fencing{Mode: translog.Observe}
	perSync  = seal.Fencing{Mode: translog.PerSync}
	createOn = seal.Fencing{Mode: translog.CreateOnly}
)

// modeWriterOpts is writerOpts (concurrent order unless order says) in
// fencing f.
func modeWriterOpts(f seal.Fencing, order translog.AckOrder) translog.Options {
	return f.Apply(writerOpts(order))
}

// guarded reports whether a writer in f fences its acks beyond the
// poison (SingleAcker applies to it).
func guarded(f seal.Fencing) bool { return !f.Disabled && f.Mode != translog.Observe }

// modePrimary claims term 1 and appends n ops in fencing f. An unfenced
// writer still claims the term (as recovery.Open does) but names itself:
// translog.Open takes no identity from the chain when fencing is off.
func modePrimary(r *Run, w *world, actor string, n int, f seal.Fencing, order translog.AckOrder) {
	wo := modeWriterOpts(f, order)
	if f.Disabled {
		wo.Shard, wo.Term, wo.Allocation = Shard, 1, actor
	}
	if !guarded(f) {
		w.unguarded[actor] = true
	}
	primaryWith(r, w, actor, n, wo, nil)
}

// modeCase: a term-1 primary in fencing f appending syncs ops, raced by a
// term-2 successor that claims and seals with sealDirect (with poison, or
// without it: the wrong successor that trusts the predecessor's fencing).
type modeCase struct {
	name     string
	f        seal.Fencing
	order    translog.AckOrder // default concurrent
	syncs    int
	faults   int
	noPoison bool
	unique   bool
}

func (c modeCase) scenario() Scenario {
	return Scenario{
		Name:         c.name,
		Faults:       c.faults,
		UniqueTokens: c.unique,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			order := c.order
			if order == 0 {
				order = translog.Concurrent
			}
			modePrimary(r, w, "w1", c.syncs, c.f, order)
			successorDirect(r, w, "c2", 2, 0, !c.noPoison, false)
			return w
		},
	}
}

// modeChangeRecovery: w1 opens the shard at term 1 through the real
// recovery.Open in fencing from (its first open stores it) and keeps
// appending; once it opened, c3 rewrites the stored fencing to `to` with
// recovery.RewriteFencing at term 2 (which claims term 2), then opens at
// term 3 through recovery.Open asking for `to`, and appends writes ops.
func modeChangeRecovery(name string, from, to seal.Fencing, syncs, writes, faults int) Scenario {
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			if !guarded(from) {
				w.unguarded["w1"] = true
			}
			recoverAtWith(r, w, "w1", 1, syncs, false, modeWriterOpts(from, translog.Concurrent))
			w.terms["c3"] = 3
			r.Go("c3", func(ctx context.Context, store *blobstore.Container) {
				<-w.opened
				res, err := recovery.RewriteFencing(ctx, store, Shard, 2, "c3", to, recovery.RewriteOptions{Clock: clock.NewAuto(), Backoff: backoff})
				if err != nil {
					if !r.Ended() {
						w.fail(r, "c3: rewrite to %s at term 2: %v", to, err)
					}
					return
				}
				r.Note("c3 rewrote the fencing %s -> %s at term 2", res.From, res.To)
				var ops []string
				o := recoveryOpts(&ops)
				o.Writer = modeWriterOpts(to, translog.Concurrent)
				sh, err := recovery.Open(ctx, store, Shard, 3, "c3", o)
				if !w.recovered(r, "c3", 3, err, ops, writerOf(sh)) {
					return
				}
				if got := sh.Fencing.String(); got != to.String() {
					w.fail(r, "c3: opened in %s, want %s", got, to)
					return
				}
				appender(ctx, r, w, "c3", 3, sh.Writer, writes)
			})
			return lineageWorld{w}
		},
	}
}

func init() {
	seq := translog.Sequenced
	for _, c := range []modeCase{
		{name: "unfenced-takeover", f: unfenced, syncs: 2},
		{name: "unfenced-takeover-deep", f: unfenced, syncs: 3},
		{name: "unfenced-takeover-faults", f: unfenced, syncs: 1, faults: 1},
		{name: "unfenced-takeover-faults-deep", f: unfenced, syncs: 2, faults: 2},
		{name: "observe-takeover", f: observe, syncs: 2},
		{name: "observe-takeover-deep", f: observe, syncs: 3},
		{name: "observe-takeover-faults", f: observe, syncs: 1, faults: 1},
		{name: "observe-takeover-faults-deep", f: observe, syncs: 2, faults: 1},
		// The sequenced per-sync argument (sequenced-no-poison): a
		// successor that does not poison is safe because a landed CAS
		// means the md landed before the sweep. An observe writer's CAS
		// refused after the sweep does not stop its ack: without the
		// poison the successor loses it.
		{name: "wrong-observe-as-fence", f: observe, order: seq, syncs: 1, faults: 1, noPoison: true, unique: true},
		// The same successor against the same writer in per_sync mode
		// (sequenced-no-poison with this file's primary): clean.
		{name: "per-sync-as-fence", f: perSync, order: seq, syncs: 1, faults: 1, noPoison: true, unique: true},
	} {
		register(c.scenario())
	}
	register(modeChangeRecovery("mode-change-recovery", unfenced, perSync, 1, 1, 0))
	register(modeChangeRecovery("mode-change-recovery-deep", unfenced, perSync, 2, 1, 1))
	register(modeChangeRecovery("mode-change-recovery-observe", observe, createOn, 1, 1, 0))
	register(modeChangeRecovery("mode-change-recovery-observe-deep", observe, createOn, 2, 1, 1))
}

// TestModes: unfenced and observe writers against a successor that
// poisons until it wins; a mode change (a rewrite at its own term, then
// recovery.Open in the new mode) beside a live zombie of the old one; and
// the wrong successor that trusts an observe writer's CAS instead of
// poisoning.
func TestModes(t *testing.T) {
	// The recovery scopes run the real rewrite, claim and seal: bounded
	// at 2,000 states outside make verify.
	rec := Bounds{}
	if !deep() {
		rec.MaxStates = 2000
	}
	runExpectations(t, []expectation{
		{scenario: "unfenced-takeover"},
		{scenario: "unfenced-takeover-faults"},
		{scenario: "observe-takeover"},
		{scenario: "observe-takeover-faults"},
		{scenario: "mode-change-recovery", bounds: rec},
		{scenario: "mode-change-recovery-observe", bounds: rec},
		{scenario: "per-sync-as-fence"},
		{scenario: "wrong-observe-as-fence", refuted: true, invariant: "NoAckedWriteLoss"},
	})
}
