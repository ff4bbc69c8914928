package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
)

// A fencing design as the claim scenarios see it: claim a term, then commit
// generations while the claim holds.
type design interface {
	claim(ctx context.Context, store *blobstore.Container, term int64, alloc string) (holder, error)
}

type holder interface {
	advance(ctx context.Context, gen int64) error
}

// termKeys is the real design: one fence key per term (package fence).
type termKeys struct{}

func (termKeys) claim(ctx context.Context, store *blobstore.Container, term int64, alloc string) (holder, error) {
	c, err := fence.Claim(ctx, store, Shard, term, alloc, claimOpts()...)
	if err != nil {
		return nil, err
	}
	return chainHolder{c}, nil
}

type chainHolder struct{ c *fence.Chain }

func (h chainHolder) advance(ctx context.Context, gen int64) error {
	_, err := h.c.Advance(ctx, gen)
	return err
}

// sharedKey is wrong design 2: every term writes one fence object. A claim
// reads it, refuses a higher term, and overwrites it (a CAS against a busy
// incumbent's token would starve the claimant, which is why such designs
// overwrite); the holder then CASes the object as the real chain does.
type sharedKey struct{}

const sharedFenceKey = "fence/shared"

func (sharedKey) claim(ctx context.Context, store *blobstore.Container, term int64, alloc string) (holder, error) {
	var seq int64
	obj, err := store.Get(ctx, sharedFenceKey)
	switch {
	case err == nil:
		rec, err := fence.DecodeRecord(Shard, sharedFenceKey, obj.Body)
		if err != nil {
			return nil, err
		}
		if rec.Term > term {
			return nil, &fence.FencedError{Shard: Shard, Key: sharedFenceKey, Term: term, Allocation: alloc, Successor: rec.Term, Reason: "stale grant"}
		}
		seq = rec.Seq + 1
	case !errors.Is(err, blobstore.ErrNotFound):
		return nil, err
	}
	want := fence.Record{Shard: Shard, Term: term, Allocation: alloc, Seq: seq}
	body, err := want.Encode()
	if err != nil {
		return nil, err
	}
	tok, err := store.Put(ctx, sharedFenceKey, body)
	if err != nil {
		return nil, err
	}
	obj, err = store.Get(ctx, sharedFenceKey)
	if err != nil {
		return nil, err
	}
	if obj.Token != tok {
		return nil, &fence.FencedError{Shard: Shard, Key: sharedFenceKey, Term: term, Allocation: alloc, Reason: "fence object overwritten during the claim"}
	}
	return &sharedHolder{store: store, rec: want, tok: tok}, nil
}

type sharedHolder struct {
	store *blobstore.Container
	rec   fence.Record
	tok   blobstore.Token
}

func (h *sharedHolder) advance(ctx context.Context, gen int64) error {
	next := h.rec
	next.Seq, next.Gen = h.rec.Seq+1, gen
	body, err := next.Encode()
	if err != nil {
		return err
	}
	tok, err := h.store.CompareAndSwap(ctx, sharedFenceKey, h.tok, body)
	if err != nil {
		return &fence.FencedError{Shard: Shard, Key: sharedFenceKey, Term: h.rec.Term, Allocation: h.rec.Allocation, Reason: err.Error()}
	}
	h.rec, h.tok = next, tok
	return nil
}

// claimWorld holds the claim invariants: a higher term, once claimed, is
// never displaced by a lower one, and with no newer claim the highest one
// completes and keeps committing.
type claimWorld struct {
	mu       sync.Mutex
	terms    map[string]int64
	claimed  map[string]int // actor -> step its claim completed
	fenced   map[string]string
	commits  map[string]int
	failures []string
	opened   chan struct{}
}

func (w *claimWorld) Digest() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprint(len(w.claimed), w.commits, len(w.fenced))
}

func (w *claimWorld) Check(*Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		return errors.New(w.failures[0])
	}
	for hi, hs := range w.claimed {
		for lo, ls := range w.claimed {
			if w.terms[lo] < w.terms[hi] && ls > hs {
				return fmt.Errorf("HigherTermPrevails: %s claimed term %d at step %d, after %s had claimed term %d at step %d (a stale read let the lower term take the shard)",
					lo, w.terms[lo], ls, hi, w.terms[hi], hs)
			}
		}
	}
	return nil
}

func (w *claimWorld) Final(*Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var top string
	for a, t := range w.terms {
		if top == "" || t > w.terms[top] {
			top = a
		}
	}
	if _, ok := w.claimed[top]; !ok {
		return fmt.Errorf("HigherTermPrevails: %s's claim of term %d, the highest, did not complete: %s", top, w.terms[top], w.fenced[top])
	}
	if why, ok := w.fenced[top]; ok {
		return fmt.Errorf("HigherTermPrevails: %s (term %d, the highest) was fenced: %s", top, w.terms[top], why)
	}
	return nil
}

func claimant(r *Run, w *claimWorld, d design, actor string, term int64, gens int) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		if term > 1 {
			<-w.opened
		}
		h, err := d.claim(ctx, store, term, actor)
		if term == 1 {
			close(w.opened)
		}
		if r.Ended() {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case err == nil:
			w.claimed[actor] = r.Step()
		case errors.Is(err, fence.ErrFenced):
			w.fenced[actor] = reason(err)
			return
		default:
			w.failures = append(w.failures, fmt.Sprintf("%s: claim of term %d failed without a fencing verdict: %v", actor, term, err))
			return
		}
		r.Note("%s claimed term %d", actor, term)
		for g := int64(1); g <= int64(gens); g++ {
			w.mu.Unlock()
			err := h.advance(ctx, term*10+g)
			w.mu.Lock()
			if r.Ended() {
				return
			}
			if err != nil {
				w.fenced[actor] = reason(err)
				r.Note("%s fenced: %s", actor, reason(err))
				return
			}
			w.commits[actor]++
		}
	})
}

func claimScenario(name string, d design, faults int) Scenario {
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := &claimWorld{terms: map[string]int64{}, claimed: map[string]int{}, fenced: map[string]string{}, commits: map[string]int{}, opened: make(chan struct{})}
			claimant(r, w, d, "w1", 1, 1)
			claimant(r, w, d, "c2", 2, 1)
			claimant(r, w, d, "c3", 3, 1)
			return w
		},
	}
}

func init() {
	register(claimScenario("claims-term-keys", termKeys{}, 0))
	register(claimScenario("wrong-shared-fence", sharedKey{}, 0))
}
