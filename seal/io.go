package seal

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/settle"
)

// Options configure the store access of seal, checkpoint, inspect and GC
// calls.
type Options struct {
	// Clock measures backoff and freshness. Default: the system's steady
	// clock.
	Clock clock.Clock
	// Backoff bounds retries of requests without a definite answer.
	Backoff backoff.Policy
	// Parallelism caps concurrent requests of one call. Default 32.
	Parallelism int
	// BarrierLead is how far above the generation it poisons a seal's
	// walk places its barrier once a writer still appending beat two of
	// its poisons (docs/PROTOCOL.md, section 5). Default 16; the checker
	// uses a short lead to keep its state space small.
	BarrierLead int
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.System()
	}
	o.Backoff = o.Backoff.Or(backoff.Store())
	if o.Parallelism <= 0 {
		o.Parallelism = 32
	}
	if o.BarrierLead <= 0 {
		o.BarrierLead = barrierLead
	}
	return o
}

// storeIO is the store access shared by the package's calls.
type storeIO struct {
	store *blobstore.Container
	shard string
	opts  Options
}

func (s storeIO) retry(ctx context.Context, op func(ctx context.Context) error) error {
	return backoff.Do(ctx, s.opts.Clock, s.opts.Backoff, blobstore.IsRetryable, op)
}

func (s storeIO) list(ctx context.Context, prefix string) ([]blobstore.Attrs, error) {
	var items []blobstore.Attrs
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		items, err = blobstore.ListAll(ctx, s.store, prefix)
		return err
	})
	return items, err
}

// get reads key, retrying store trouble; found is false for a missing key.
func (s storeIO) get(ctx context.Context, key string) (obj blobstore.Object, found bool, err error) {
	err = s.retry(ctx, func(ctx context.Context) error {
		obj, found, err = settle.Once(ctx, s.store, key)
		return err
	})
	return obj, found, err
}

// create runs one create-if-absent of step, settled by reading (with
// retries) what the key holds; the caller's retry sends it again.
func create[T any](ctx context.Context, s storeIO, step settle.Step[T]) (settle.Verdict[T], error) {
	step.Get = s.get
	return settle.Create(ctx, s.store, step)
}

// errResend makes a retry send a create of what again after settling
// showed that it did not land.
func errResend(what string) error {
	return blobstore.Unavailable(fmt.Errorf("%s create did not land; sending it again", what))
}

func (s storeIO) delete(ctx context.Context, key string) error {
	return s.retry(ctx, func(ctx context.Context) error { return s.store.Delete(ctx, key) })
}

// parallel runs fn for 0..n-1 with at most limit at a time and returns the
// first error. Every goroutine has ended when it returns.
func parallel(ctx context.Context, limit, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, max(1, limit))
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		// The caller's context ended: report it, not a partial success.
		return ctx.Err()
	}
	return first
}

// fresh reports whether a successful CAS still proves ownership at now.
func fresh(now int64, last Proof, interval time.Duration) bool {
	return last.Valid && interval > 0 && now < last.At+int64(interval)
}
