// Package steadytime is the master's clock: a steady (monotonic) reading
// every lease and liveness window is measured on, and the wall clock it
// shows and stamps put starts with. Package master re-exports its names
// (as SteadyTime, Clock, RealClock, FakeClock).
package steadytime

import (
	"sync"
	"time"
)

// Time is a reading of this process's monotonic clock in nanoseconds.
// Lease and soft-pin deadlines are Time values: they are compared only
// with readings of the same Clock and never written to the standby wire.
type Time int64

// Add returns t+d, saturating instead of overflowing.
func (t Time) Add(d time.Duration) Time {
	s := t + Time(d)
	if d > 0 && s < t {
		return Time(1<<63 - 1)
	}
	return s
}

// Clock gives the two times the master uses: Steady for every lease
// decision, Wall only for display and put start times.
type Clock interface {
	Steady() Time
	Wall() time.Time
}

// RealClock reads Go's monotonic clock.
type RealClock struct{ start time.Time }

// NewReal returns a clock whose steady readings count from now.
func NewReal() *RealClock { return &RealClock{start: time.Now()} }

// Steady uses the monotonic reading time.Now carries, so it does not move
// when the system clock is set.
func (c *RealClock) Steady() Time { return Time(time.Since(c.start)) + 1 }

// Wall is the system clock.
func (c *RealClock) Wall() time.Time { return time.Now() }

// FakeClock is a Clock for tests: steady time only moves by Advance, and the
// wall clock can be set anywhere, forwards or backwards, independently.
type FakeClock struct {
	mu     sync.Mutex
	steady Time
	wall   time.Time
}

// NewFake starts the steady clock at an arbitrary non-zero value and the
// wall clock at wall.
func NewFake(wall time.Time) *FakeClock {
	return &FakeClock{steady: Time(1_000_000_000), wall: wall}
}

// Steady returns the fake steady time.
func (c *FakeClock) Steady() Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steady
}

// Wall returns the fake wall time.
func (c *FakeClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Advance moves both clocks forward by d, as real time passing would.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steady = c.steady.Add(d)
	c.wall = c.wall.Add(d)
}

// SetWall jumps the wall clock only, as an NTP step or an operator would.
func (c *FakeClock) SetWall(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = t
}

// ToDuration is a difference of two readings as a duration.
func ToDuration(d Time) time.Duration { return time.Duration(d) }
