// Package backoff is the project's one retry pacing: capped exponential
// back-off, no jitter (so the protocol checker and the simulation replay
// exactly), and Do, the loop that retries what a caller's predicate calls
// retryable on a steady clock. The store's retries (fence.Backoff,
// fence.DefaultBackoff, fence.Retry), the agent's and the client's
// reconnects and the master's offboarding jobs all pace with a Policy.
package backoff

import (
	"context"
	"errors"
	"time"

	"github.com/shardfence/shardfence/clock"
)

// Policy bounds retries: delays double from Initial up to Max; Attempts
// counts every try, the first included (Do only; zero means one try).
type Policy struct {
	Initial  time.Duration
	Max      time.Duration
	Attempts int
}

// Store is the default for store requests without a definite answer: it
// retries for roughly five seconds before giving up with a retryable
// error, long enough to ride out a throttling burst, short enough that a
// caller learns about a dead store while failover still pays off.
func Store() Policy {
	return Policy{Initial: 20 * time.Millisecond, Max: time.Second, Attempts: 10}
}

// Or returns p, or def when p is the zero Policy.
func (p Policy) Or(def Policy) Policy {
	if p == (Policy{}) {
		return def
	}
	return p
}

// Delay is the wait after failed try number attempt (counting from 1):
// Initial, doubling, at most Max. There is no jitter: retries stay
// deterministic for the checker, and contention is per shard or per node,
// not synchronized across a fleet.
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

func (p Policy) attempts() int {
	return max(p.Attempts, 1)
}

// Do runs op until it succeeds, fails with an error retryable does not
// accept, or the attempts run out. Callers that must settle an unknown
// outcome first do so inside op.
func Do(ctx context.Context, c clock.Clock, p Policy, retryable func(error) bool, op func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || !retryable(err) || attempt >= p.attempts() {
			return err
		}
		if serr := clock.Sleep(ctx, c, p.Delay(attempt)); serr != nil {
			return errors.Join(err, serr)
		}
	}
}
