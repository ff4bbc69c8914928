package verify

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
)

// Checkpoints with GC. A checkpoint's one file, "ops", holds the ops up to
// its generation, one a line; a recovery that hydrates it starts its
// restore point from that file and replays the translog after it. GC then
// has something to cut: the translog at or below the newest complete
// lineage checkpoint.

const checkpointFile = "ops"

// recoverWithCheckpoint runs recovery.Open hydrating into memory and
// returns the shard and its restore point: the checkpoint's ops, then the
// replayed ones.
func recoverWithCheckpoint(ctx context.Context, store *blobstore.Container, term int64, actor string) (*recovery.Shard, []string, error) {
	var replayed []string
	o := recoveryOpts(&replayed)
	files := seal.NewMemFiles()
	o.Files = files
	sh, err := recovery.Open(ctx, store, Shard, term, actor, o)
	if err != nil {
		return nil, nil, err
	}
	var ops []string
	if sh.Checkpoint != nil {
		body, err := files.ReadFile(checkpointFile)
		if err != nil {
			return nil, nil, err
		}
		if len(body) > 0 {
			ops = strings.Split(string(body), "\n")
		}
	}
	return sh, append(ops, replayed...), nil
}

// publishAndCollect publishes the checkpoint of ops at gen (the writer's
// last acknowledged generation) and runs GC, both on the term's chain with
// no ownership proof at hand: the publish gate lists fence/ for a higher
// term, GC sends its own ownership CAS.
func publishAndCollect(ctx context.Context, r *Run, w *world, actor string, store *blobstore.Container, chain *fence.Chain, gen int64, ops []string) {
	files := seal.NewMemFiles()
	if _, err := files.WriteFile(checkpointFile, []byte(strings.Join(ops, "\n"))); err != nil {
		w.fail(r, "%s: %v", actor, err)
		return
	}
	so := seal.Options{Clock: clock.NewAuto(), Backoff: backoff}
	_, err := seal.PublishCheckpointFS(ctx, store, chain, gen, files, seal.PublishOptions{Options: so, NextSeqNo: int64(len(ops))})
	if !gcOutcome(r, w, actor, "checkpoint at gen", gen, err) {
		return
	}
	r.Note("%s published the checkpoint at gen %d: %v", actor, gen, ops)
	res, err := seal.GC(ctx, store, chain, seal.GCOptions{Options: so})
	if !gcOutcome(r, w, actor, "GC after gen", gen, err) {
		return
	}
	r.Note("%s GC deleted %v", actor, describeKeys(res.Deleted))
}

// gcOutcome: a deposed term's publish or GC may be refused (fenced, or
// superseded by a higher marker or fence key); store trouble that outlasts
// the retries is reported; anything else is a failure.
func gcOutcome(r *Run, w *world, actor, what string, gen int64, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, fence.ErrFenced), errors.Is(err, seal.ErrSuperseded), errors.Is(err, seal.ErrNotFresh), blobstore.IsRetryable(err):
		r.Note("%s: %s %d refused: %s", actor, what, gen, reason(err))
	default:
		w.fail(r, "%s: %s %d: %v", actor, what, gen, err)
	}
	return false
}

// checkpointer opens the shard at term (hydrating the newest lineage
// checkpoint), appends before ops, publishes a checkpoint of everything it
// holds and runs GC, then appends after ops more, racing whoever comes
// next.
// The first term closes published once its checkpoint and GC returned;
// a later term starts after start is closed.
func checkpointer(r *Run, w *world, actor string, term int64, before, after int, start, published chan struct{}) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		if published != nil {
			defer func() {
				select {
				case <-published:
				default:
					close(published)
				}
			}()
		}
		if term > 1 {
			<-start
		}
		sh, restored, err := recoverWithCheckpoint(ctx, store, term, actor)
		if term == 1 {
			close(w.opened)
		}
		if !w.recovered(r, actor, term, err, restored, writerOf(sh)) {
			return
		}
		wr := sh.Writer
		held := append([]string(nil), restored...)
		var mu sync.Mutex
		appendAll := func(first, n int) bool {
			var wg sync.WaitGroup
			ok := true
			for i := first; i < first+n; i++ {
				op := actor + "." + string(rune('0'+i))
				if !r.Gate(actor, "append "+op) {
					break
				}
				w.mu.Lock()
				w.appends[actor]++
				w.mu.Unlock()
				wg.Go(func() {
					a, err := wr.Append(ctx, [][]byte{[]byte(op)})
					w.appended(r, actor, term, op, a, err)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						ok = false
						return
					}
					held = append(held, op)
				})
			}
			wg.Wait()
			return ok
		}
		if appendAll(1, before) && before > 0 {
			publishAndCollect(ctx, r, w, actor, store, sh.Chain, wr.NextGen()-1, held)
		}
		if published != nil {
			close(published)
		}
		appendAll(before+1, after)
		_ = wr.Close(ctx)
	})
}

// checkpointScenario: a term-1 primary appends, checkpoints and collects,
// then keeps appending as a zombie while a term-2 successor recovers
// (hydrating the checkpoint when it is on the lineage), appends,
// checkpoints and collects in turn. The successor starts once the primary
// opened, or with late once the primary's checkpoint and GC returned (the
// bounded scope: it keeps the search on the successor hydrating a
// checkpoint below which the translog is gone).
func checkpointScenario(name string, faults int, late bool) Scenario {
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			published := make(chan struct{})
			start := w.opened
			if late {
				start = published
			}
			checkpointer(r, w, "w1", 1, 1, 1, nil, published)
			checkpointer(r, w, "c2", 2, 1, 0, start, nil)
			return gcWorld{lineageWorld{w}, map[string]bool{}}
		},
	}
}

func init() {
	register(checkpointScenario("checkpoint-gc", 0, true))
	register(checkpointScenario("checkpoint-gc-deep", 1, true))
	register(checkpointScenario("checkpoint-gc-race", 0, false))
	register(checkpointScenario("walk-checkpoint-gc", 3, false))
}

// TestCheckpoints: published checkpoints and GC beside a deposed primary
// that keeps writing, checkpointing and collecting.
func TestCheckpoints(t *testing.T) {
	runExpectations(t, []expectation{{scenario: "checkpoint-gc"}})
	if deep() {
		// The successor starts as soon as the primary opened, racing its
		// checkpoint and GC too.
		runExpectations(t, []expectation{{scenario: "checkpoint-gc-race"}})
	}
}
