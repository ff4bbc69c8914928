package translog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
)

// The store requests of a sync. Each is idempotent and retried with capped
// backoff for as long as the writer is open: giving up would leave the
// generation's outcome unknown and the next generation with nothing to
// follow. What a step returns is final for its sync.

// StoreHealth reports the store errors the writer's syncs are retrying,
// and when it last acknowledged a generation. Times are wall-clock.
func (w *Writer) StoreHealth() StoreHealth {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.health
	for _, at := range w.waiting {
		if h.WaitingSince.IsZero() || at.Before(h.WaitingSince) {
			h.WaitingSince = at
		}
	}
	return h
}

// noteWaitStart records that a sync step sends a store request; the
// returned id ends it (noteWaitEnd).
func (w *Writer) noteWaitStart() uint64 {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == nil {
		w.waiting = map[uint64]time.Time{}
	}
	w.waitSeq++
	w.waiting[w.waitSeq] = now
	return w.waitSeq
}

func (w *Writer) noteWaitEnd(id uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiting, id)
}

// noteStoreError records a store error a sync step is about to retry;
// first says the step just started failing.
func (w *Writer) noteStoreError(err error, first bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.health.LastError, w.health.LastErrorAt = err, now
	w.health.Retries++
	if first {
		if w.retrying == 0 {
			w.health.RetryingSince = now
		}
		w.retrying++
	}
}

// noteStepDone ends a sync step that retried store errors.
func (w *Writer) noteStepDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.retrying--; w.retrying == 0 {
		w.health.RetryingSince = time.Time{}
	}
}

// terminal returns the writer's terminal error or the closing context's.
func (w *Writer) terminal() error {
	w.mu.Lock()
	err := w.p.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if w.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// retry runs one idempotent step of a sync until it succeeds or fails for
// good (again false).
func (w *Writer) retry(step func() (again bool, err error)) error {
	failing := false
	defer func() {
		if failing {
			w.noteStepDone()
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := w.terminal(); err != nil {
			return err
		}
		id := w.noteWaitStart()
		again, err := step()
		w.noteWaitEnd(id)
		if errors.Is(err, context.Canceled) && w.ctx.Err() != nil {
			// Close gave up on the syncs in progress and cancelled the
			// step's request: its outcome is abandoned.
			return ErrClosed
		}
		if !again {
			return err
		}
		if err != nil {
			w.noteStoreError(err, !failing)
			failing = true
		}
		if clock.Sleep(w.ctx, w.clock, w.opts.Backoff.Delay(attempt)) != nil {
			return ErrClosed
		}
	}
}

// putData writes the payload of a sync too large to inline, with a plain
// PUT: the name is this generation's alone, and a resend writes the same
// bytes.
func (w *Writer) putData(gen int64, payload []byte) error {
	key := layout.DataKey(w.opts.Term, gen)
	body := EncodeData(w.opts.Shard, w.opts.Term, gen, payload)
	return w.retry(func() (bool, error) {
		_, err := w.store.Put(w.ctx, key, body)
		if err != nil && blobstore.IsRetryable(err) {
			return true, err
		}
		if err != nil {
			return false, &Error{Op: "Append", Shard: w.opts.Shard, Key: key, Gen: gen, Err: err}
		}
		return false, nil
	})
}

// createMD creates the generation's md, settling AlreadyExists and lost
// responses by reading what the key holds: our own record is success, a
// poison or another writer's md is fenced, an empty key is sent again.
func (w *Writer) createMD(md MD, body []byte) error {
	key := layout.MDKey(md.Term, md.Gen)
	step := settle.Step[MD]{
		Key: key, Body: body,
		Get: func(ctx context.Context, key string) (blobstore.Object, bool, error) {
			return settle.Once(ctx, w.store, key)
		},
		Decode: func(b []byte) (MD, error) { return DecodeMD(w.opts.Shard, key, b) },
		Ours: func(found MD) (bool, string) {
			v := SettleMDCreate(found, md)
			return v.Action == fence.Adopt, v.Reason
		},
	}
	return w.retry(func() (bool, error) {
		v, err := settle.Create(w.ctx, w.store, step)
		switch {
		case err != nil:
			return blobstore.IsRetryable(err), err
		case v.Action == settle.Resend:
			return true, nil // the create did not land: send it again
		case v.Action == settle.Lost:
			return false, w.fence(SettleMDCreate(v.Held, md).Successor, key, fmt.Sprintf("%s (md key %q)", v.Reason, key))
		}
		return false, nil
	})
}

// advance CASes the fence key for the sync's generation, retrying store
// trouble, and returns the outcome with the steady time it was sent.
func (w *Writer) advance(s *syncState) outcome {
	w.locked(func(p *pipeline) { p.noteCAS() })
	sent := w.clock.Now()
	err := w.retry(func() (bool, error) {
		_, err := w.chain.Advance(w.ctx, s.gen)
		if err != nil && blobstore.IsRetryable(err) && !errors.Is(err, fence.ErrFenced) {
			return true, err
		}
		return false, err
	})
	return outcome{sync: s, step: stepCAS, err: err, sent: sent}
}

func (w *Writer) fence(successor int64, key, reason string) error {
	if w.chain != nil {
		err := w.chain.Fence(successor, reason)
		if w.opts.FencingMode != Observe || w.opts.FencingDisabled {
			return err
		}
		// Observe mode: the instance may hold an earlier verdict (a
		// refused CAS, only reported); this one ends the writer and
		// must say why.
	}
	return &fence.FencedError{Shard: w.opts.Shard, Key: key, Term: w.opts.Term, Allocation: w.opts.Allocation, Successor: successor, Reason: reason}
}

// startCheck starts a create-only fence check when the pipeline says so: a
// read of the fence key that fences the instance once the key no longer
// names this claim as the owner (fence.Chain.Check). A sync sends no CAS
// in this mode, so without the check a writer that lost the term would go
// on creating md until a successor's poison stops it.
func (w *Writer) startCheck(force bool) {
	var gen int64
	var ok bool
	w.locked(func(p *pipeline) { gen, ok = p.startCheck(force) })
	if !ok {
		return
	}
	w.mdWG.Go(func() {
		failing := false
		for attempt := 1; ; attempt++ {
			err := w.chain.Check(w.ctx)
			if err != nil && w.ctx.Err() != nil {
				err = ErrClosed // Close gave up on the requests in flight
			}
			var again bool
			w.locked(func(p *pipeline) { again = p.checked(gen, err, w.clock.Now(), w.instanceErr()) })
			if !again {
				break
			}
			// Store trouble before the writer was confirmed: its acks
			// wait for this check, so it is sent again.
			w.noteStoreError(err, !failing)
			failing = true
			if clock.Sleep(w.ctx, w.clock, w.opts.Backoff.Delay(attempt)) != nil {
				w.locked(func(p *pipeline) { p.checked(gen, ErrClosed, w.clock.Now(), w.instanceErr()) })
				break
			}
		}
		if failing {
			w.noteStepDone()
		}
		select {
		case w.checked <- struct{}{}:
		default:
		}
	})
}

// awaitWindow holds the next sync back while it would start more than
// CheckWindow generations past the last good fence check, starting checks
// (with backoff after store errors) until one lets it go or the writer
// fails or closes. A sync that cannot start is failed by start.
func (w *Writer) awaitWindow() {
	for attempt := 1; ; attempt++ {
		var open bool
		w.locked(func(p *pipeline) { open = p.windowOpen() })
		if open || w.ctx.Err() != nil {
			return
		}
		w.startCheck(true)
		select {
		case <-w.checked:
		case <-w.ctx.Done():
			return
		}
		w.locked(func(p *pipeline) { open = p.windowOpen() })
		if open {
			return
		}
		if attempt > 1 && clock.Sleep(w.ctx, w.clock, w.opts.Backoff.Delay(attempt)) != nil {
			return
		}
	}
}
