package fence

import (
	"context"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/steady"
)

// Clock is a steady (monotonic) clock. Leases and backoff are measured on
// it, never on wall time, which can jump. Tests and the protocol checker
// inject a FakeClock. (The clock lives in an internal package shared by
// the protocol packages; these names are its public face.)
type Clock = steady.Clock

// FakeClock is a Clock moved only by Advance, or, in auto-advance mode, by
// every After call (so retries and backoff finish instantly and
// deterministically in tests). It also hands out nonces (NonceSource).
type FakeClock = steady.Fake

// NewFakeClock returns a clock at 0 that moves only when told to.
func NewFakeClock() *FakeClock { return steady.NewFake() }

// NewAutoClock returns a clock at 0 whose After advances time by the
// requested duration and fires at once.
func NewAutoClock() *FakeClock { return steady.NewAuto() }

// SystemClock returns the process's monotonic clock.
func SystemClock() Clock { return steady.System() }

// Sleep waits d on c, or until ctx ends (returning its error).
func Sleep(ctx context.Context, c Clock, d time.Duration) error { return steady.Sleep(ctx, c, d) }

// Backoff bounds retries of requests that failed without a definite
// answer (timeouts, 5xx, 409 conflicts, unavailable): delays double from
// Initial up to Max; Attempts counts every try, the first included.
type Backoff = backoff.Policy

// DefaultBackoff retries for roughly five seconds before giving up with a
// retryable error.
func DefaultBackoff() Backoff { return backoff.Store() }

// Retry runs op until it succeeds, fails definitely, or the attempts run
// out. Only errors for which blobstore.IsRetryable holds are retried.
func Retry(ctx context.Context, c Clock, b Backoff, op func(ctx context.Context) error) error {
	return backoff.Do(ctx, c, b, blobstore.IsRetryable, op)
}
