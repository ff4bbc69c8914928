package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// sealDirect is a successor's section-5 step reduced to one lineage term
// (term 1): take the contiguous md prefix, poison the first missing
// generation unless poison is off, and return the restore point. It is the
// stand-in the write-path scenarios use where a full recovery would only
// add steps; the recovery scenarios run the real seal.
func sealDirect(ctx context.Context, store *blobstore.Container, sealedBy int64, poison bool) (int64, []string, error) {
	return sealDirectWith(ctx, store, sealedBy, poison, false)
}

// sealDirectWith is sealDirect; onePoison is a wrong successor that stops
// after its first poison attempt: when the create finds the lineage term's
// md there, it takes the restore point at the prefix, without that md and
// without poisoning the next generation.
func sealDirectWith(ctx context.Context, store *blobstore.Container, sealedBy int64, poison, onePoison bool) (int64, []string, error) {
	rd := translog.NewReader(store, Shard)
	clock := clock.NewAuto()
	m := int64(0)
	for {
		var md translog.MD
		found := false
		err := fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
			var err error
			md, err = rd.ReadMD(ctx, 1, m+1)
			if errors.Is(err, translog.ErrMissingGen) {
				return nil
			}
			found = err == nil
			return err
		})
		if err != nil {
			return 0, nil, err
		}
		if found && md.Kind == translog.KindSync {
			m++
			continue
		}
		if found || !poison {
			break
		}
		body, err := translog.EncodePoison(Shard, 1, m+1, sealedBy)
		if err != nil {
			return 0, nil, err
		}
		err = fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
			_, err := store.CreateIfAbsent(ctx, layout.MDKey(1, m+1), body)
			return err
		})
		if err == nil {
			break
		}
		if !errors.Is(err, blobstore.ErrAlreadyExists) && !blobstore.IsAmbiguous(err) {
			return 0, nil, err
		}
		if onePoison && errors.Is(err, blobstore.ErrAlreadyExists) {
			break
		}
		// Someone's md, or our own poison whose answer was lost: read again.
	}
	var ops []string
	err := fence.Retry(ctx, clock, backoff, func(ctx context.Context) error {
		ops = ops[:0]
		return rd.Iterate(ctx, 1, 1, m, func(b translog.Batch) error {
			for _, op := range b.Ops {
				ops = append(ops, string(op))
			}
			return nil
		})
	})
	return m, ops, err
}

// successorDirect claims term, seals with sealDirect, then appends n ops.
// gcPoison deletes every poison once the restore point is fixed (wrong
// design 3).
func successorDirect(r *Run, w *world, actor string, term int64, n int, poison, gcPoison bool) {
	w.terms[actor] = term
	r.Go(actor, func(ctx context.Context, store *blobstore.Container) {
		<-w.opened
		chain, err := fence.Claim(ctx, store, Shard, term, actor, claimOpts()...)
		w.claimResult(r, actor, term, err)
		if err != nil {
			return
		}
		m, ops, err := sealDirect(ctx, store, term, poison)
		if err != nil {
			w.fail(r, "%s: seal: %v", actor, err)
			return
		}
		w.restored(r, actor, term, ops)
		if gcPoison {
			err := fence.Retry(ctx, clock.NewAuto(), backoff, func(ctx context.Context) error {
				return store.Delete(ctx, layout.MDKey(1, m+1))
			})
			if err != nil {
				w.fail(r, "%s: gc: %v", actor, err)
				return
			}
			r.Note("%s deleted the poison at term 1 gen %d", actor, m+1)
		}
		if n == 0 {
			return
		}
		opts := writerOpts(translog.Concurrent)
		opts.StartGen = m + 1
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

// plainMDStore is wrong design 1's store: the writer's md create becomes a
// plain overwriting PUT.
func plainMDStore(c *blobstore.Container) *blobstore.Container {
	return c.With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		if call.Op == blobstore.OpCreateIfAbsent && strings.HasPrefix(call.Key, layout.MDPrefix) {
			call.Op = blobstore.OpPut
		}
		return next(ctx, call)
	})
}

// writeCase is a term-1 primary appending syncs ops, optionally raced by a
// term-2 successor.
type writeCase struct {
	name      string
	syncs     int
	order     translog.AckOrder
	successor bool
	variant   string // "", "plain-md", "no-poison", "gc-poison"
	faults    int
	unique    bool // tokens new on every write (GCS, Azure) instead of S3's body hashes
}

func (c writeCase) scenario() Scenario {
	return Scenario{
		Name:         c.name,
		Faults:       c.faults,
		UniqueTokens: c.unique,
		Start: func(r *Run) Checker {
			w := newWorld(c.successor)
			var wrap func(*blobstore.Container) *blobstore.Container
			poison, gc := true, false
			switch c.variant {
			case "plain-md":
				wrap, poison = plainMDStore, false
			case "no-poison":
				poison = false
			case "gc-poison":
				gc = true
			}
			primary(r, w, "w1", c.syncs, c.order, wrap)
			if c.successor {
				successorDirect(r, w, "c2", 2, 0, poison, gc)
			}
			return w
		},
	}
}

func init() {
	seq, con := translog.Sequenced, translog.Concurrent
	for _, c := range []writeCase{
		{name: "solo-faults", syncs: 2, order: con, faults: 1},
		{name: "solo-faults-deep", syncs: 3, order: con, faults: 2},
		{name: "takeover", syncs: 2, order: con, successor: true},
		{name: "takeover-deep", syncs: 3, order: con, successor: true},
		{name: "takeover-faults", syncs: 1, order: con, successor: true, faults: 1},
		{name: "takeover-faults-deep", syncs: 2, order: con, successor: true, faults: 1},
		{name: "takeover-sequenced", syncs: 2, order: seq, successor: true},
		{name: "takeover-sequenced-deep", syncs: 2, order: seq, successor: true, faults: 1},
		{name: "sequenced-no-poison", syncs: 1, order: seq, successor: true, variant: "no-poison", faults: 1, unique: true},
		{name: "sequenced-no-poison-deep", syncs: 2, order: seq, successor: true, variant: "no-poison", faults: 1, unique: true},
		{name: "sequenced-no-poison-s3", syncs: 1, order: seq, successor: true, variant: "no-poison", faults: 1},
		{name: "sequenced-no-poison-s3-deep", syncs: 2, order: seq, successor: true, variant: "no-poison", faults: 1},
		{name: "wrong-plain-md", syncs: 2, order: con, successor: true, variant: "plain-md"},
		{name: "wrong-gc-poison", syncs: 1, order: con, successor: true, variant: "gc-poison"},
	} {
		register(c.scenario())
	}
}

var scenarios = map[string]Scenario{}

func register(sc Scenario) {
	if _, dup := scenarios[sc.Name]; dup {
		panic(fmt.Sprintf("scenario %s registered twice", sc.Name))
	}
	scenarios[sc.Name] = sc
}
