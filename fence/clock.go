package fence

import (
	"context"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/backoff"
)

// Clock is a steady (monotonic) clock. Leases and backoff are measured on
// it, never on wall time, which can jump. Tests and the protocol checker
// inject a FakeClock.
//
// Deprecated: use clock.Clock (package clock is the clock's home).
type Clock = clock.Clock

// FakeClock is a Clock moved only by Advance, or, in auto-advance mode, by
// every After call (so retries and backoff finish instantly and
// deterministically in tests). It also hands out nonces (NonceSource).
//
// Deprecated: use clock.Fake.
type FakeClock = clock.Fake

// NewFakeClock returns a clock at 0 that moves only when told to.
//
// Deprecated: use clock.NewFake.
func NewFakeClock() *FakeClock { return clock.NewFake() }

// NewAutoClock returns a clock at 0 whose After advances time by the
// requested duration and fires at once.
//
// Deprecated: use clock.NewAuto.
func NewAutoClock() *FakeClock { return clock.NewAuto() }

// SystemClock returns the process's monotonic clock.
//
// Deprecated: use clock.System.
func SystemClock() Clock { return clock.System() }

// Sleep waits d on c, or until ctx ends (returning its error).
//
// Deprecated: use clock.Sleep.
func Sleep(ctx context.Context, c Clock, d time.Duration) error { return clock.Sleep(ctx, c, d) }

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
