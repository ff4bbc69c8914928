package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

type fetched struct {
	b     translog.Batch
	bytes int64
	err   error
}

// prefetcher reads generations from..to of the lineage ahead of their
// replay, at most window at a time, so translog reads overlap the
// checkpoint's download. Its goroutines end in stop.
type prefetcher struct {
	from, to int64
	slots    []chan fetched
	sem      chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startPrefetch(ctx context.Context, store *blobstore.Container, shard string, lin seal.Lineage, cachedTerm int64, cached map[int64]translog.MD, from, to int64, window int, opts Options) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{from: from, to: to, sem: make(chan struct{}, max(1, window)), cancel: cancel}
	if to < from {
		return p
	}
	r := translog.NewReader(store, shard)
	p.slots = make([]chan fetched, to-from+1)
	for i := range p.slots {
		p.slots[i] = make(chan fetched, 1)
	}
	p.wg.Go(func() {
		for i := range p.slots {
			select {
			case p.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			p.wg.Go(func() {
				p.slots[i] <- fetch(ctx, r, store, shard, lin, cachedTerm, cached, from+int64(i), opts)
			})
		}
	})
	return p
}

func (p *prefetcher) stop() { p.cancel(); p.wg.Wait() }

// replay hands the prefetched generations to Apply strictly in order.
// Sequence numbers must run on without gaps from next: a break means an md
// of another history. The first error stops the replay; a corrupt md is
// never skipped.
func (p *prefetcher) replay(ctx context.Context, shard string, next int64, opts Options) (Replay, int64, error) {
	defer p.stop()
	rep := Replay{From: p.from, To: p.to}
	n := int64(len(p.slots))
	for i := int64(0); i < n; i++ {
		var f fetched
		select {
		case f = <-p.slots[i]:
		case <-ctx.Done():
			return rep, next, ctx.Err()
		}
		<-p.sem
		if f.err != nil {
			return rep, next, f.err
		}
		if f.b.FirstSeqNo != next {
			return rep, next, &fence.BodyError{Shard: shard, Key: layout.MDKey(f.b.Term, f.b.Gen), Err: fence.ErrCorruptBody,
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

func fetch(ctx context.Context, r *translog.Reader, store *blobstore.Container, shard string, lin seal.Lineage, cachedTerm int64, cached map[int64]translog.MD, gen int64, opts Options) fetched {
	term, ok := lin.TermOf(gen)
	if !ok {
		return fetched{err: fmt.Errorf("%w: no term on the lineage holds generation %d", seal.ErrLineageTruncated, gen)}
	}
	var b translog.Batch
	if md, ok := cached[gen]; ok && term == cachedTerm && md.Kind == translog.KindSync {
		var data []byte
		if !md.Inline {
			var err error
			if data, err = readData(ctx, store, shard, md, opts); err != nil {
				return fetched{err: err}
			}
		}
		var err error
		if b, err = translog.BatchOf(shard, md, data); err != nil {
			return fetched{err: err}
		}
	} else if err := backoff.Do(ctx, opts.Clock, opts.Backoff, blobstore.IsRetryable, func(ctx context.Context) error {
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

// readData reads the data object of an md the seal already read, retrying
// store trouble; translog.BatchOf verifies it, the same checks
// Reader.ReadBatch makes.
func readData(ctx context.Context, store *blobstore.Container, shard string, md translog.MD, opts Options) ([]byte, error) {
	key, dkey := layout.MDKey(md.Term, md.Gen), layout.DataKey(md.Term, md.Gen)
	var obj blobstore.Object
	err := backoff.Do(ctx, opts.Clock, opts.Backoff, blobstore.IsRetryable, func(ctx context.Context) error {
		var err error
		obj, err = store.Get(ctx, dkey)
		return err
	})
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, &fence.BodyError{Shard: shard, Key: dkey, Err: fence.ErrCorruptBody, Detail: fmt.Sprintf("md %q refers to a data object that does not exist", key)}
	}
	if err != nil {
		return nil, &translog.Error{Op: "Read", Shard: shard, Key: dkey, Gen: md.Gen, Err: err}
	}
	return obj.Body, nil
}
