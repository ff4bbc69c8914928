// Package steady is the steady (monotonic) clock the protocol measures
// leases, backoff and freshness on, and the fake clocks tests and the
// protocol checker drive it with. Outside this module the same names are
// clock.Clock, clock.Fake, clock.NewFake, clock.NewAuto,
// clock.System and clock.Sleep.
package clock

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Clock is a steady (monotonic) clock. Leases and backoff are measured on it,
// never on wall time, which can jump. Tests and the protocol checker inject a
// Fake.
type Clock interface {
	// Now returns monotonic nanoseconds since an arbitrary origin.
	Now() int64
	// After returns a channel closed once d has elapsed on this clock.
	After(d time.Duration) <-chan struct{}
}

// Sleep waits d on c, or until ctx ends (returning its error).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-c.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// System returns the process's monotonic clock.
func System() Clock { return systemClock{origin: time.Now()} }

type systemClock struct{ origin time.Time }

// time.Since reads the monotonic reading captured in origin, so wall-clock
// steps do not move Now.
func (s systemClock) Now() int64 { return int64(time.Since(s.origin)) }

func (systemClock) After(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	if d <= 0 {
		close(ch)
		return ch
	}
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// Fake is a Clock moved only by Advance, or, in auto-advance mode, by
// every After call (so retries and backoff finish instantly and
// deterministically in tests). It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    int64
	auto   bool
	timers []fakeTimer
	nonces int64
}

type fakeTimer struct {
	at int64
	ch chan struct{}
}

// NewFake returns a clock at 0 that moves only when told to.
func NewFake() *Fake { return &Fake{} }

// NewAuto returns a clock at 0 whose After advances time by the
// requested duration and fires at once.
func NewAuto() *Fake { return &Fake{auto: true} }

// Now returns the fake monotonic time.
func (f *Fake) Now() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After registers a timer that fires when the clock reaches now+d.
func (f *Fake) After(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		close(ch)
		return ch
	}
	if f.auto {
		f.advanceLocked(int64(d))
		close(ch)
		return ch
	}
	f.timers = append(f.timers, fakeTimer{at: f.now + int64(d), ch: ch})
	return ch
}

// Nonce makes Fake a fence.NonceSource: a counter, so runs over a fake clock
// write the same bytes every time. Unique only per clock: instances that
// may claim the same term each need their own clock.
func (f *Fake) Nonce() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nonces++
	return "n" + strconv.FormatInt(f.nonces, 10)
}

// Advance moves the clock forward by d and fires every timer that is due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked(int64(d))
}

func (f *Fake) advanceLocked(d int64) {
	if d < 0 {
		return
	}
	f.now += d
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at < f.timers[j].at })
	n := 0
	for _, t := range f.timers {
		if t.at <= f.now {
			close(t.ch)
			continue
		}
		f.timers[n] = t
		n++
	}
	f.timers = f.timers[:n]
}

// Waiters reports how many timers are pending, so a test can wait until a
// goroutine is blocked on the clock before advancing it.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}
