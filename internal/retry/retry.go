// Package retry bounds how requests without a definite answer are sent
// again: capped exponential backoff on the steady clock, no jitter (so the
// protocol checker replays exactly). Outside this module the same names
// are fence.Backoff, fence.DefaultBackoff and fence.Retry.
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/steady"
)

// Backoff bounds retries of requests that failed without a definite answer
// (timeouts, 5xx, 409 conflicts, unavailable). Delays double from Initial up
// to Max; Attempts counts every try, the first included.
type Backoff struct {
	Initial  time.Duration
	Max      time.Duration
	Attempts int
}

// DefaultBackoff retries for roughly five seconds before giving up with a
// retryable error: long enough to ride out a throttling burst, short enough
// that a caller learns about a dead store while failover still pays off.
func DefaultBackoff() Backoff {
	return Backoff{Initial: 20 * time.Millisecond, Max: time.Second, Attempts: 10}
}

// Or returns b, or def when b is the zero Backoff.
func (b Backoff) Or(def Backoff) Backoff {
	if b == (Backoff{}) {
		return def
	}
	return b
}

// Delay is the wait before try number attempt+1 (attempt counts from 1).
// There is no jitter: retries stay deterministic for the protocol checker,
// and contention is per shard, not across a fleet.
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	return d
}

func (b Backoff) attempts() int {
	if b.Attempts < 1 {
		return 1
	}
	return b.Attempts
}

// Do runs op until it succeeds, fails definitely, or the attempts run out.
// Only errors for which blobstore.IsRetryable holds are retried; callers
// that must settle an unknown outcome first do so inside op.
func Do(ctx context.Context, c steady.Clock, b Backoff, op func(ctx context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = op(ctx)
		if err == nil || !blobstore.IsRetryable(err) || attempt >= b.attempts() {
			return err
		}
		if serr := steady.Sleep(ctx, c, b.Delay(attempt)); serr != nil {
			return errors.Join(err, serr)
		}
	}
}
