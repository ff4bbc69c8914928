package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// handoffWorld holds the relocation invariants of the handoff: after
// a transfer, the source and the target never both commit, and the term
// always ends with an owner that can write.
type handoffWorld struct {
	mu       sync.Mutex
	commits  map[string][]int64 // actor -> generations committed after the transfer
	resumed  bool               // the source's revert won
	stood    bool               // the source stood down
	accepted bool
	failures []string
	token    chan blobstore.Token // the handoff, out of band
}

func (w *handoffWorld) Digest() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprint(w.commits, w.resumed, w.stood, w.accepted)
}

func (w *handoffWorld) fail(r *Run, format string, args ...any) {
	if r.Ended() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, fmt.Sprintf(format, args...))
}

func (w *handoffWorld) Check(*Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		return errors.New(w.failures[0])
	}
	if len(w.commits["src"]) > 0 && len(w.commits["tgt"]) > 0 {
		return fmt.Errorf("SingleAcker: after the transfer the source committed %v and the target committed %v", w.commits["src"], w.commits["tgt"])
	}
	if w.stood && !w.accepted {
		return fmt.Errorf("NoSpuriousFencing: the source stood down but the target never accepted the term")
	}
	return nil
}

func (w *handoffWorld) Final(*Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.commits["src"]) == 0 && len(w.commits["tgt"]) == 0 {
		return fmt.Errorf("HigherTermPrevails: the handoff ended with no owner able to commit (source resumed %v, target accepted %v)", w.resumed, w.accepted)
	}
	return nil
}

func (w *handoffWorld) commit(r *Run, actor string, c *fence.Chain, gen int64) {
	_, err := c.Advance(context.Background(), gen)
	if r.Ended() {
		return
	}
	switch {
	case err == nil:
		w.mu.Lock()
		w.commits[actor] = append(w.commits[actor], gen)
		w.mu.Unlock()
		r.Note("%s committed gen %d", actor, gen)
	case errors.Is(err, fence.ErrFenced):
		r.Note("%s fenced: %s", actor, reason(err))
	default:
		w.fail(r, "%s: commit of gen %d failed without a fencing verdict: %v", actor, gen, err)
	}
}

// handoffScenario: the source claims term 1 and commits, transfers the term
// to the target, then aborts (revert) while the target accepts and commits.
// blind is a wrong design: the revert overwrites the key with a plain PUT
// instead of a CAS expecting the transfer's token.
func handoffScenario(name string, faults int, blind bool) Scenario {
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := &handoffWorld{commits: map[string][]int64{}, token: make(chan blobstore.Token, 1)}
			r.Go("src", func(ctx context.Context, store *blobstore.Container) {
				defer close(w.token)
				c, err := fence.Claim(ctx, store, Shard, 1, "src", claimOpts()...)
				if err != nil {
					w.fail(r, "src: claim: %v", err)
					return
				}
				if _, err := c.Advance(ctx, 1); err != nil {
					w.fail(r, "src: commit before the handoff: %v", err)
					return
				}
				st, err := c.TransferTo(ctx, "tgt", "")
				if err != nil {
					w.fail(r, "src: transfer: %v", err)
					return
				}
				w.token <- st.Token
				if blind {
					blindRevert(ctx, r, w, store, st)
					return
				}
				ok, err := c.Revert(ctx)
				switch {
				case err != nil:
					w.fail(r, "src: revert: %v", err)
				case ok:
					w.mu.Lock()
					w.resumed = true
					w.mu.Unlock()
					r.Note("src reverted the handoff")
					w.commit(r, "src", c, 2)
				default:
					w.mu.Lock()
					w.stood = true
					w.mu.Unlock()
					r.Note("src stood down")
				}
			})
			r.Go("tgt", func(ctx context.Context, store *blobstore.Container) {
				tok, ok := <-w.token
				if !ok {
					return
				}
				in, err := fence.NewInstance(store, Shard, "tgt", claimOpts()...)
				if err != nil {
					w.fail(r, "tgt: %v", err)
					return
				}
				c, err := in.Accept(ctx, 1, tok)
				if err != nil {
					if !errors.Is(err, fence.ErrFenced) {
						w.fail(r, "tgt: accept failed without a fencing verdict: %v", err)
					} else {
						r.Note("tgt: accept refused: %s", reason(err))
					}
					return
				}
				w.mu.Lock()
				w.accepted = true
				w.mu.Unlock()
				r.Note("tgt accepted term 1")
				w.commit(r, "tgt", c, 3)
			})
			return w
		},
	}
}

// blindRevert takes the key back with an unconditional PUT and continues
// from it, as a design without the revert's CAS would.
func blindRevert(ctx context.Context, r *Run, w *handoffWorld, store *blobstore.Container, st fence.State) {
	rec := st.Record
	rec.Allocation, rec.Seq = "src", rec.Seq+1
	body, err := rec.Encode()
	if err != nil {
		w.fail(r, "src: %v", err)
		return
	}
	tok, err := store.Put(ctx, layout.FenceKey(1), body)
	if err != nil {
		w.fail(r, "src: blind revert: %v", err)
		return
	}
	in, err := fence.NewInstance(store, Shard, "src", claimOpts()...)
	if err != nil {
		w.fail(r, "src: %v", err)
		return
	}
	c, err := in.Accept(ctx, 1, tok)
	if err != nil {
		r.Note("src: resume refused: %s", reason(err))
		return
	}
	w.mu.Lock()
	w.resumed = true
	w.mu.Unlock()
	r.Note("src took the term back")
	w.commit(r, "src", c, 2)
}

func init() {
	register(handoffScenario("handoff-abort", 1, false))
	register(handoffScenario("handoff-abort-deep", 2, false))
	register(handoffScenario("walk-handoff", 3, false))
	register(handoffScenario("wrong-blind-revert", 0, true))
}
