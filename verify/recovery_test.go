package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/testhooks"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

func recoveryOpts(ops *[]string) recovery.Options {
	return recovery.Options{
		Clock:   clock.NewAuto(),
		Backoff: backoff,
		Apply: func(_ context.Context, b translog.Batch) error {
			for _, op := range b.Ops {
				*ops = append(*ops, string(op))
			}
			return nil
		},
		Writer: writerOpts(translog.Concurrent),
	}
}

// successorRecovery (or the first primary, at term 1) opens the shard at term with the real recovery (claim,
// seal, replay, open) and appends n ops.
func successorRecovery(r *Run, w *world, actor string, term int64, n int) {
	recoverAt(r, w, actor, term, n, term > 1)
}

// recoverAt is successorRecovery; with gate false a successor starts at
// once instead of after the term-1 primary opened.
func recoverAt(r *Run, w *world, actor string, term int64, n int, gate bool) {
	recoverAtWith(r, w, actor, term, n, gate, writerOpts(translog.Concurrent))
}

// recoverAtWith is recoverAt asking for the writer options wo (a first
// open stores their fencing mode; a later one runs the stored mode).
func recoverAtWith(r *Run, w *world, actor string, term int64, n int, gate bool, wo translog.Options) {
	recoverWrapped(r, w, actor, term, n, gate, wo, nil, nil)
}

// recoverWrapped is recoverAtWith over wrap(store) when wrap is set, and,
// when after is set, starting only once it is closed.
func recoverWrapped(r *Run, w *world, actor string, term int64, n int, gate bool, wo translog.Options, wrap func(*blobstore.Container) *blobstore.Container, after <-chan struct{}) {
	recoverWrong(r, w, actor, term, n, gate, wo, wrap, after)
}

// recoverWrong is recoverWrapped with the wrong designs wrong turned on in
// the production code it runs (internal/testhooks).
func recoverWrong(r *Run, w *world, actor string, term int64, n int, gate bool, wo translog.Options, wrap func(*blobstore.Container) *blobstore.Container, after <-chan struct{}, wrong ...testhooks.Switch) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		for _, s := range wrong {
			ctx = testhooks.With(ctx, s)
		}
		if gate {
			<-w.opened
		}
		if after != nil {
			<-after
		}
		if wrap != nil {
			store = wrap(store)
		}
		var ops []string
		o := recoveryOpts(&ops)
		o.Writer = wo
		sh, err := recovery.Open(ctx, store, Shard, term, actor, o)
		if term == 1 {
			close(w.opened)
		}
		if !w.recovered(r, actor, term, err, ops, writerOf(sh)) {
			return
		}
		appender(ctx, r, w, actor, term, sh.Writer, n)
	})
}

// writerOf is an opened shard's writer; nil for a failed open.
func writerOf(sh *recovery.Shard) *translog.Writer {
	if sh == nil {
		return nil
	}
	return sh.Writer
}

// finalLineage restores the store as the run left it at a term above every
// claim, outside the schedule, and returns the ops of the lineage (from the
// newest lineage checkpoint when there is one).
func finalLineage(r *Run) ([]string, error) {
	ctx := context.Background()
	c, err := finalStore(ctx, r)
	if err != nil {
		return nil, err
	}
	sh, ops, err := recoverWithCheckpoint(ctx, c, 1000, "reader")
	if err != nil {
		return nil, err
	}
	if err := sh.Writer.Close(ctx); err != nil {
		return nil, err
	}
	return ops, nil
}

// lineageWorld adds the final-lineage half of NoAckedWriteLoss.
type lineageWorld struct{ *world }

func (w lineageWorld) Final(r *Run) error {
	if err := w.world.Final(r); err != nil {
		return err
	}
	ops, err := finalLineage(r)
	if err != nil {
		return fmt.Errorf("final lineage: a recovery over the final store failed: %w", err)
	}
	return w.allAckedIn(ops)
}

// finalStore copies the run's final store contents into a fresh store.
func finalStore(ctx context.Context, r *Run) (*blobstore.Container, error) {
	c := mem.New()
	for k, body := range r.Store.Snapshot() {
		if _, err := c.Put(ctx, k, body); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// allAckedIn is the final-lineage half of NoAckedWriteLoss: every op the
// run acknowledged is among ops, the final lineage.
func (w *world) allAckedIn(ops []string) error {
	have := map[string]bool{}
	for _, op := range ops {
		have[op] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var lost []string
	for _, a := range w.acks {
		if !have[a.op] {
			lost = append(lost, a.op)
		}
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		return fmt.Errorf("NoAckedWriteLoss: acked ops %v are not in the final lineage %v", lost, ops)
	}
	return nil
}

// recoveryCase: a term-1 primary, a term-2 successor that recovers and
// writes, and optionally a term-3 successor racing it.
type recoveryCase struct {
	name   string
	syncs  int
	order  translog.AckOrder
	third  bool
	writes int // ops each successor appends
	faults int
	race   bool // the successor starts at once, racing the first open
}

func (c recoveryCase) scenario() Scenario {
	return Scenario{
		Name:   c.name,
		Faults: c.faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			successorRecovery(r, w, "w1", 1, c.syncs)
			recoverAt(r, w, "c2", 2, c.writes, !c.race)
			if c.third {
				successorRecovery(r, w, "c3", 3, c.writes)
			}
			return lineageWorld{w}
		},
	}
}

func init() {
	con := translog.Concurrent
	for _, c := range []recoveryCase{
		{name: "recovery", syncs: 1, order: con, writes: 1},
		{name: "recovery-deep", syncs: 2, order: con, writes: 1, faults: 1},
		{name: "recovery-race", syncs: 1, order: con, third: true},
		{name: "recovery-race-deep", syncs: 1, order: con, third: true, writes: 1},
		// The counterpart of wrong-early-survey: the same race through
		// the real recovery.Open, whose seal reads beside the LIST that
		// verifies the sweep.
		{name: "recovery-first-open", syncs: 1, order: con, race: true},
		{name: "recovery-first-open-faults", syncs: 1, order: con, race: true, faults: 1},
	} {
		register(c.scenario())
	}
}

// earlySurveyRecovery is a wrong successor: it takes the seal's first round
// of reads (seal.TakeSurvey) beside its claim's first LIST, before its sweep
// deleted any lower fence key, instead of beside the LIST that verifies the
// sweep (fence.Hooks.Swept, what recovery.Open does). It guesses the term
// below its own as the predecessor, then seals from that survey, restores
// the lineage and appends n ops. It starts at once, racing the first
// primary's open.
//
// With atDelete, the survey goes out with the claim's delete of the lower
// key instead (beside the create, the round before the verifying LIST),
// not once the delete was acknowledged: the delete moved a round earlier,
// the reads did not have to, and this successor shows why they cannot.
func earlySurveyRecovery(r *Run, w *world, actor string, term int64, n int, atDelete bool, after <-chan struct{}) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		if after != nil {
			<-after
		}
		so := seal.Options{Clock: clock.NewAuto(), Backoff: backoff}
		var sv *seal.Survey
		var svErr error
		var hooks fence.Hooks
		if !atDelete {
			hooks.Before = func(ctx context.Context) error {
				sv, svErr = seal.TakeSurvey(ctx, store, Shard, term, []int64{term - 1}, so)
				return svErr
			}
		} else {
			// The survey starts when the claim sends its first delete of
			// a lower fence key; the Swept hook takes it as it is.
			var surveyed chan struct{}
			store = store.With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
				if t, ok := layout.ParseFenceKey(call.Key); ok && call.Op == blobstore.OpDelete && t < term && surveyed == nil {
					surveyed = make(chan struct{})
					go func() {
						defer close(surveyed)
						sv, svErr = seal.TakeSurvey(ctx, store, Shard, term, []int64{t}, so)
					}()
				}
				return next(ctx, call)
			})
			hooks.Swept = func(ctx context.Context, swept []int64) error {
				if surveyed == nil {
					sv, svErr = seal.TakeSurvey(ctx, store, Shard, term, swept, so)
					return svErr
				}
				<-surveyed
				return svErr
			}
		}
		in, err := fence.NewInstance(store, Shard, actor, claimOpts()...)
		if err != nil {
			w.fail(r, "%s: %v", actor, err)
			return
		}
		chain, err := in.ClaimWith(ctx, term, hooks)
		w.claimResult(r, actor, term, err)
		if err != nil {
			return
		}
		res, err := seal.SealWith(ctx, store, chain, sv, so, nil)
		if err != nil {
			var fe *fence.FencedError
			if !errors.As(err, &fe) {
				w.fail(r, "%s: seal: %v", actor, err)
			}
			return
		}
		var ops []string
		rd := translog.NewReader(store, Shard)
		for _, rg := range res.Lineage.Ranges {
			to := min(rg.To, res.Restore().Gen)
			if to < rg.From {
				continue
			}
			err := fence.Retry(ctx, clock.NewAuto(), backoff, func(ctx context.Context) error {
				return rd.Iterate(ctx, rg.Term, rg.From, to, func(b translog.Batch) error {
					for _, op := range b.Ops {
						ops = append(ops, string(op))
					}
					return nil
				})
			})
			if err != nil {
				w.fail(r, "%s: replay: %v", actor, err)
				return
			}
		}
		w.restored(r, actor, term, ops)
		opts := writerOpts(translog.Concurrent)
		opts.StartGen = res.Restore().Gen + 1
		wr, err := translog.Open(ctx, store, chain, opts)
		if err != nil {
			w.fail(r, "%s: open writer: %v", actor, err)
			return
		}
		w.mu.Lock()
		w.writers[actor], w.startGen[actor] = wr, wr.NextGen()
		w.mu.Unlock()
		appender(ctx, r, w, actor, term, wr, n)
	})
}

func init() {
	// The seal's reads must follow the sweep: a successor that reads
	// before it loses what a lower term opened and acknowledged after the
	// read and before the delete of its key.
	register(Scenario{
		Name: "wrong-early-survey",
		Start: func(r *Run) Checker {
			w := newWorld(true)
			successorRecovery(r, w, "w1", 1, 1)
			earlySurveyRecovery(r, w, "c2", 2, 0, false, nil)
			return lineageWorld{w}
		},
	})
	// The claim's delete goes beside its create (docs/PROTOCOL.md,
	// section 4), the seal's reads still after the delete was
	// acknowledged. Sent beside the delete, the reads are refuted the
	// same way: w1 opens and acknowledges after c2's LIST of seal/ and
	// before c2's delete of its key lands.
	//
	// Both successors start once w1's fence key was created, so their
	// first LIST lists it and their claim deletes it beside its create;
	// recovery-claimed-first-open is the real recovery.Open in that race.
	register(Scenario{
		Name: "wrong-survey-beside-delete",
		Start: func(r *Run) Checker {
			w := newWorld(true)
			keyed := firstOpenKeyed(r, w, writerOpts(translog.Concurrent))
			earlySurveyRecovery(r, w, "c2", 2, 0, true, keyed)
			return lineageWorld{w}
		},
	})
	for _, faults := range []int{0, 1} {
		name := "recovery-claimed-first-open"
		if faults > 0 {
			name += "-faults"
		}
		register(Scenario{
			Name:   name,
			Faults: faults,
			Start: func(r *Run) Checker {
				w := newWorld(true)
				keyed := firstOpenKeyed(r, w, writerOpts(translog.Concurrent))
				recoverWrapped(r, w, "c2", 2, 0, false, writerOpts(translog.Concurrent), nil, keyed)
				return lineageWorld{w}
			},
		})
	}
}

// firstOpenKeyed starts w1's first open at term 1 (one append, writer
// options wo, the wrong designs wrong) and returns a channel closed once
// w1's create of its fence key was answered ok.
func firstOpenKeyed(r *Run, w *world, wo translog.Options, wrong ...testhooks.Switch) <-chan struct{} {
	keyed := make(chan struct{})
	var once bool
	wrap := func(c *blobstore.Container) *blobstore.Container {
		return c.With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
			res, err := next(ctx, call)
			if call.Op == blobstore.OpCreateIfAbsent && call.Key == layout.FenceKey(1) && err == nil && !once {
				once = true
				close(keyed)
			}
			return res, err
		})
	}
	recoverWrong(r, w, "w1", 1, 1, false, wo, wrap, nil, wrong...)
	return keyed
}

// markerBesidePoison is a wrong successor: it claims term with the real
// claim, lists the md of term 1 and sends the poison of the first missing
// generation and its seal marker side by side, the marker naming the
// generation before the poison as its restore point, as if the poison
// will land. When the poison loses (w1's md is already there) the marker
// is wrong and cannot be taken back: this successor notices and stands
// down without opening, but the next term restores from its marker (the
// final lineage check runs the real recovery.Open at a higher term) and
// loses what w1 acknowledged at that generation. The seal's marker must wait for the poison's answer
// (docs/PROTOCOL.md, section 4, "the claim's rounds").
func markerBesidePoison(r *Run, w *world, actor string, term int64) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		<-w.opened
		chain, err := fence.Claim(ctx, store, Shard, term, actor, claimOpts()...)
		w.claimResult(r, actor, term, err)
		if err != nil {
			return
		}
		clock := clock.NewAuto()
		var gens []int64
		if err := fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
			var err error
			gens, err = translog.NewReader(store, Shard).Gens(ctx, 1)
			return err
		}); err != nil {
			w.fail(r, "%s: list md: %v", actor, err)
			return
		}
		m := int64(0)
		for _, g := range gens {
			if g == m+1 {
				m = g
			}
		}
		want := seal.Marker{Shard: Shard, Term: term, Allocation: chain.Allocation(),
			Restore:  seal.RestorePoint{Term: 1, Gen: m},
			Poisoned: layout.MDKey(1, m+1), Prev: layout.MarkerKey(1)}
		if m > 0 {
			want.Restore.MDKey = layout.MDKey(1, m)
		}
		marker, err := want.Encode()
		if err != nil {
			w.fail(r, "%s: %v", actor, err)
			return
		}
		poison, err := translog.EncodePoison(Shard, 1, m+1, term)
		if err != nil {
			w.fail(r, "%s: %v", actor, err)
			return
		}
		var wg sync.WaitGroup
		var poisonErr, markerErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			poisonErr = fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
				_, err := store.CreateIfAbsent(ctx, layout.MDKey(1, m+1), poison)
				return err
			})
		}()
		go func() {
			defer wg.Done()
			markerErr = fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
				_, err := store.CreateIfAbsent(ctx, layout.MarkerKey(term), marker)
				return err
			})
		}()
		wg.Wait()
		if markerErr != nil && !errors.Is(markerErr, blobstore.ErrAlreadyExists) {
			w.fail(r, "%s: marker: %v", actor, markerErr)
			return
		}
		if poisonErr != nil {
			r.Note("%s: its poison at gen %d lost (%s): it stands down, its marker stays", actor, m+1, reason(poisonErr))
			return
		}
		r.Note("%s: poison at gen %d landed beside its marker", actor, m+1)
	})
}

func init() {
	register(Scenario{
		Name: "wrong-marker-beside-poison",
		Start: func(r *Run) Checker {
			w := newWorld(true)
			successorRecovery(r, w, "w1", 1, 1)
			markerBesidePoison(r, w, "c2", 2)
			return lineageWorld{w}
		},
	})
}
