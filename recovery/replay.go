package recovery

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

type fetched struct {
	b     translog.Batch
	bytes int64
	err   error
}

// replay reads generations from..to of the lineage, prefetching up to
// Parallelism ahead, and hands them to Apply strictly in order. Sequence
// numbers must run on without gaps from next: a break means an md of
// another history. The first error stops the replay; a corrupt md is never
// skipped.
//
// cached holds md of term cachedTerm the seal already read: inline ones are
// replayed from it without another request.
func replay(ctx context.Context, store blobstore.Container, shard string, lin seal.Lineage, cachedTerm int64, cached map[int64]translog.MD, from, to, next int64, opts Options) (Replay, int64, error) {
	rep := Replay{From: from, To: to}
	if to < from {
		return rep, next, nil
	}
	window := opts.Parallelism
	if window <= 0 {
		window = 32
	}
	r := translog.NewReader(store, shard)
	ctx, cancel := context.WithCancel(ctx)
	n := to - from + 1
	slots := make([]chan fetched, n)
	for i := range slots {
		slots[i] = make(chan fetched, 1)
	}
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	// The fetchers run only inside this call: cancel, then wait, before
	// replay returns.
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		for i := int64(0); i < n; i++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				slots[i] <- fetch(ctx, r, shard, lin, cachedTerm, cached, from+i, opts)
			})
		}
	})
	for i := int64(0); i < n; i++ {
		var f fetched
		select {
		case f = <-slots[i]:
		case <-ctx.Done():
			return rep, next, ctx.Err()
		}
		<-sem
		if f.err != nil {
			return rep, next, f.err
		}
		if f.b.FirstSeqNo != next {
			return rep, next, &fence.BodyError{Shard: shard, Key: translog.MDKey(f.b.Term, f.b.Gen), Err: fence.ErrCorruptBody,
				Detail: fmt.Sprintf("first sequence number %d, the restored history ends before %d", f.b.FirstSeqNo, next)}
		}
		if opts.Apply != nil {
			if err := opts.Apply(ctx, f.b); err != nil {
				return rep, next, fmt.Errorf("apply generation %d of term %d: %w", f.b.Gen, f.b.Term, err)
			}
		}
		next += int64(len(f.b.Ops))
		rep.Ops += int64(len(f.b.Ops))
		rep.Bytes += f.bytes
		if opts.Progress != nil {
			opts.Progress(Progress{Phase: "replay", Gens: i + 1, GensTotal: n})
		}
	}
	return rep, next, nil
}

func fetch(ctx context.Context, r *translog.Reader, shard string, lin seal.Lineage, cachedTerm int64, cached map[int64]translog.MD, gen int64, opts Options) fetched {
	term, ok := lin.TermOf(gen)
	if !ok {
		return fetched{err: fmt.Errorf("%w: no term on the lineage holds generation %d", seal.ErrLineageTruncated, gen)}
	}
	var b translog.Batch
	if md, ok := cached[gen]; ok && term == cachedTerm && md.Kind == translog.KindSync && md.Inline {
		ops, err := translog.DecodeOps(md.Payload, md.OpCount)
		if err != nil {
			return fetched{err: &fence.BodyError{Shard: shard, Key: translog.MDKey(term, gen), Err: fence.ErrCorruptBody, Detail: err.Error()}}
		}
		b = translog.Batch{Term: term, Gen: gen, FirstSeqNo: md.FirstSeqNo, Ops: ops}
	} else if err := fence.Retry(ctx, opts.Clock, opts.Backoff, func(ctx context.Context) error {
		var err error
		b, err = r.ReadBatch(ctx, term, gen)
		return err
	}); err != nil {
		return fetched{err: err}
	}
	var size int64
	for _, op := range b.Ops {
		size += int64(len(op))
	}
	return fetched{b: b, bytes: size}
}
