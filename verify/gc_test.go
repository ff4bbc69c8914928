package verify

import (
	"context"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// gcWorld adds GCSafety: a poison, once stored, never disappears (the
// zombie's CAS for that generation may have landed, so its md create must
// keep failing); what restore points need is covered by the final-lineage
// check of lineageWorld.
type gcWorld struct {
	lineageWorld
	poisons map[string]bool
}

func (w gcWorld) Check(r *Run) error {
	if err := w.lineageWorld.Check(r); err != nil {
		return err
	}
	for key := range w.poisons {
		if _, ok := r.Store.Get(key); !ok {
			return fmt.Errorf("GCSafety: the poison at %s was deleted", DescribeKey(key))
		}
	}
	for _, key := range r.Store.Keys(layout.MDPrefix) {
		body, _ := r.Store.Get(key)
		if md, err := translog.DecodeMD(Shard, key, body); err == nil && md.Kind == translog.KindPoison {
			w.poisons[key] = true
		}
	}
	return nil
}

// collector recovers at term, appends n ops, then runs the real GC.
func collector(r *Run, w *world, actor string, term int64, n int) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		<-w.opened
		var ops []string
		sh, err := recovery.Open(ctx, store, Shard, term, actor, recoveryOpts(&ops))
		if !w.recovered(r, actor, term, err, ops, writerOf(sh)) {
			return
		}
		appender(ctx, r, w, actor, term, sh.Writer, n)
		res, err := seal.GC(ctx, store, sh.Chain, seal.GCOptions{Options: seal.Options{Clock: clock.NewAuto(), Backoff: backoff}})
		if err != nil {
			w.fail(r, "%s: GC at term %d: %v", actor, term, err)
			return
		}
		r.Note("%s GC deleted %v", actor, describeKeys(res.Deleted))
	})
}

func describeKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = DescribeKey(k)
	}
	return out
}

// gcCase: a term-1 primary keeps writing while a term-2 successor recovers,
// writes and collects garbage.
func gcScenario(name string, syncs, faults int) Scenario {
	return Scenario{
		Name:   name,
		Faults: faults,
		Start: func(r *Run) Checker {
			w := newWorld(true)
			successorRecovery(r, w, "w1", 1, syncs)
			collector(r, w, "c2", 2, 1)
			return gcWorld{lineageWorld{w}, map[string]bool{}}
		},
	}
}

func init() {
	register(gcScenario("gc", 2, 0))
	register(gcScenario("gc-deep", 2, 1))
	register(gcScenario("walk-gc", 4, 3))
}
