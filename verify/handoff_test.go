package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/translog"
)

// The relocation package end to end: a source opened through the real
// recovery appends, hands off with relocation.Source.Handoff (drain, then
// transfer), and aborts with Source.Abort while the target adopts with
// relocation.Adopt and appends. The handoff context travels as the bytes
// Marshal makes.

// relocWorld adds the relocation invariant to the world and final lineage:
// after the transfer, the source and the target never both acknowledge.
type relocWorld struct {
	lineageWorld
	handedOff *int // step of the handoff; nil until then (guarded by w.mu)
	// owner (create-only mode) adds HandoffOwner: once the transfer
	// landed, the source and the target do not both end stopped (fenced,
	// or stood down). stopped holds the verdicts of Handoff, Abort and
	// Adopt; a fenced writer is in world.fenced (both guarded by w.mu).
	owner   bool
	stopped map[string]bool
}

// stop records that actor ended without the term: a fencing verdict of a
// relocation step, or the source standing down.
func (w relocWorld) stop(r *Run, actor string) {
	if r.Ended() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped[actor] = true
}

func (w relocWorld) Final(r *Run) error {
	if err := w.lineageWorld.Final(r); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.owner || *w.handedOff == 0 {
		return nil
	}
	_, srcFenced := w.fenced["src"]
	_, tgtFenced := w.fenced["tgt"]
	if (w.stopped["src"] || srcFenced) && (w.stopped["tgt"] || tgtFenced) {
		return fmt.Errorf("HandoffOwner: the source (stood down or fenced) and the target (fenced) both ended without the term")
	}
	return nil
}

func (w relocWorld) Check(r *Run) error {
	if err := w.lineageWorld.Check(r); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if *w.handedOff == 0 {
		return nil
	}
	var src, tgt []string
	for _, a := range w.acks {
		switch {
		case a.actor == "tgt":
			tgt = append(tgt, a.op)
		case a.actor == "src" && a.step > *w.handedOff:
			src = append(src, a.op)
		}
	}
	if len(src) > 0 && len(tgt) > 0 {
		return fmt.Errorf("SingleAcker: after the handoff the source acked %v and the target acked %v", src, tgt)
	}
	return nil
}

// stopIfFenced records a fencing verdict of a relocation step.
func (w relocWorld) stopIfFenced(r *Run, actor string, err error) {
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		w.stop(r, actor)
	}
}

// startAppend issues one append through a gate without waiting for its
// answer; wait waits for every answer.
func startAppend(ctx context.Context, r *Run, w *world, actor string, term int64, wr *translog.Writer, op string, wg *sync.WaitGroup) bool {
	if !r.Gate(actor, "append "+op) {
		return false
	}
	w.mu.Lock()
	w.appends[actor]++
	w.mu.Unlock()
	wg.Go(func() {
		a, err := wr.Append(ctx, [][]byte{[]byte(op)})
		if errors.Is(err, translog.ErrClosed) && !r.Ended() {
			// Drained by the handoff before it was sent: refused, not
			// acknowledged, and not a fencing.
			r.Note("%s: append %s refused: writer closed for the handoff", actor, op)
			w.mu.Lock()
			w.finished[actor]++
			w.mu.Unlock()
			return
		}
		w.appended(r, actor, term, op, a, err)
	})
	return true
}

// relocError records how a relocation step ended: fencing, an unresumable
// source and store trouble that outlasted the retries are outcomes the
// protocol allows (the shard then needs a new term); anything else fails.
func relocError(r *Run, w *world, actor, step string, err error) {
	var fe *fence.FencedError
	switch {
	case errors.As(err, &fe):
		r.Note("%s: %s fenced: %s", actor, step, reason(err))
	case errors.Is(err, relocation.ErrNotResumable), errors.Is(err, fence.ErrHandedOff), blobstore.IsRetryable(err):
		r.Note("%s: %s: %v", actor, step, err)
	default:
		w.fail(r, "%s: %s: %v", actor, step, err)
	}
}

// relocationScenario: src opens term 1 and appends one op, then hands off
// to tgt and aborts at a point the schedule picks; tgt adopts and appends
// one op; a resumed src appends one more. gap: the context it carries is
// one past the source's (the next generation and sequence number where the
// last are meant); relocation.Adopt refuses it (the fence key records where
// the source's log ends). trust is the wrong target that adopts the context
// without that check (Accept, then a writer at its generation + 1), and so
// leaves a hole in the term's log.
func relocationScenario(name string, faults int, gap, trust bool) Scenario {
	return relocationScenarioWith(name, faults, gap, trust, writerOpts(translog.Concurrent))
}

// relocationScenarioWith is relocationScenario with the writer options wo
// for the source's first open (which stores their fencing mode) and the
// target's Adopt.
func relocationScenarioWith(name string, faults int, gap, trust bool, wo translog.Options) Scenario {
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			// In create-only mode Adopt's CAS and the revert race on the
			// key, so exactly one of them keeps the term.
			rw := relocWorld{lineageWorld{w}, new(int), wo.FencingMode == translog.CreateOnly, map[string]bool{}}
			ctxs := make(chan []byte, 1)
			// A create-only target that skipped Adopt's CAS learns that
			// the revert took the key back only from its fence check,
			// which a writer starts once it is half a CheckWindow of
			// generations past its start: it appends that many and one.
			tgtAppends := 1
			if trust && wo.FencingMode == translog.CreateOnly {
				window := wo.CheckWindow
				if window <= 0 {
					window = translog.CheckWindow
				}
				tgtAppends = max(window, 2)/2 + 1
			}
			r.Go("src", func(ctx context.Context, store *blobstore.Container) {
				defer close(ctxs)
				var ops []string
				o := recoveryOpts(&ops)
				o.Writer = wo
				sh, err := recovery.Open(ctx, store, Shard, 1, "src", o)
				if err != nil {
					w.fail(r, "src: recovery: %v", err)
					return
				}
				w.claimResult(r, "src", 1, nil)
				w.restored(r, "src", 1, ops)
				w.mu.Lock()
				w.writers["src"], w.startGen["src"] = sh.Writer, sh.Writer.NextGen()
				w.mu.Unlock()
				// A src that stops before its handoff drained the writer
				// closes it (a closed writer closes again at once).
				defer func() { _ = sh.Writer.Close(ctx) }()
				var wg sync.WaitGroup
				defer wg.Wait()
				if !startAppend(ctx, r, w, "src", 1, sh.Writer, "src.1", &wg) {
					return
				}
				src := relocation.NewSource(store, sh.Chain, sh.Writer, o.Writer)
				if !r.Gate("src", "handoff") {
					return
				}
				hc, err := src.Handoff(ctx, "tgt", "")
				if err == nil {
					w.mu.Lock()
					*rw.handedOff = r.Step()
					w.mu.Unlock()
					r.Note("src handed off at gen %d", hc.Gen)
					if gap {
						hc.Gen, hc.NextSeqNo = hc.Gen+1, hc.NextSeqNo+1
					}
					b, err := hc.Marshal()
					if err != nil {
						w.fail(r, "src: marshal: %v", err)
						return
					}
					ctxs <- b
				} else {
					relocError(r, w, "src", "handoff", err)
					rw.stopIfFenced(r, "src", err)
				}
				if !r.Gate("src", "abort") {
					return
				}
				out, err := src.Abort(ctx)
				if err != nil {
					relocError(r, w, "src", "abort", err)
					rw.stopIfFenced(r, "src", err)
					return
				}
				r.Note("src abort: %s", out)
				if out == relocation.StoodDown {
					rw.stop(r, "src")
				}
				if out != relocation.Resumed {
					return
				}
				wr := src.Writer()
				w.mu.Lock()
				w.writers["src"] = wr
				w.mu.Unlock()
				startAppend(ctx, r, w, "src", 1, wr, "src.2", &wg)
				wg.Wait()
				_ = wr.Close(ctx)
			})
			r.Go("tgt", func(ctx context.Context, store *blobstore.Container) {
				b, ok := <-ctxs
				if !ok {
					return
				}
				hc, err := relocation.Unmarshal(b)
				if err != nil {
					w.fail(r, "tgt: %v", err)
					return
				}
				var wr *translog.Writer
				if trust {
					wr, err = trustingAdopt(ctx, store, hc, wo)
				} else {
					_, wr, err = relocation.Adopt(ctx, store, "tgt", hc, relocation.AdoptOptions{
						Clock: clock.NewAuto(), Backoff: backoff, Writer: wo})
				}
				if gap && !trust {
					if err == nil {
						w.fail(r, "tgt: adopted a context one generation past the source's log")
						return
					}
					if errors.Is(err, relocation.ErrPositionMismatch) {
						r.Note("tgt: adopt refused: %v", err)
						return
					}
				}
				if err != nil {
					relocError(r, w, "tgt", "adopt", err)
					rw.stopIfFenced(r, "tgt", err)
					return
				}
				r.Note("tgt adopted term 1 at gen %d", hc.Gen+1)
				w.mu.Lock()
				w.writers["tgt"], w.startGen["tgt"] = wr, wr.NextGen()
				w.mu.Unlock()
				appender(ctx, r, w, "tgt", 1, wr, tgtAppends)
			})
			return rw
		},
	}
}

func init() {
	register(relocationScenario("relocation", 0, false, false))
	register(relocationScenario("relocation-faults", 1, false, false))
	register(relocationScenario("relocation-faults-deep", 2, false, false))
	register(relocationScenario("walk-relocation", 3, false, false))
	register(relocationScenario("relocation-gap-refused", 1, true, false))
	register(relocationScenario("wrong-handoff-gap", 0, true, true))
}

// TestRelocation: the relocation package's Handoff, Adopt and Abort racing
// each other, and a cluster that hands the target the wrong generation.
func TestRelocation(t *testing.T) {
	runExpectations(t, []expectation{
		{scenario: "relocation"},
		{scenario: "relocation-faults"},
		{scenario: "relocation-gap-refused"},
		{scenario: "wrong-handoff-gap", refuted: true, invariant: "NoAckedWriteLoss"},
	})
}

// trustingAdopt is the wrong target of wrong-handoff-gap: relocation.Adopt
// without its check of the context against the fence key (and, in
// create-only mode, without its CAS).
func trustingAdopt(ctx context.Context, store *blobstore.Container, hc relocation.HandoffContext, wo translog.Options) (*translog.Writer, error) {
	in, err := fence.NewInstance(store, hc.Shard, "tgt", claimOpts()...)
	if err != nil {
		return nil, err
	}
	chain, err := in.Accept(ctx, hc.Term, hc.Token)
	if err != nil {
		return nil, err
	}
	wo.StartGen, wo.StartSeqNo = hc.Gen+1, hc.NextSeqNo
	return translog.Open(ctx, store, chain, wo)
}
