package master

import (
	"sync"
	"time"
)

// SteadyTime is a reading of this process's monotonic clock in nanoseconds.
// Lease and soft-pin deadlines are SteadyTime values: they are compared only
// with readings of the same Clock and never written to the standby wire.
type SteadyTime int64

// Add returns t+d, saturating instead of overflowing.
func (t SteadyTime) Add(d time.Duration) SteadyTime {
	s := t + SteadyTime(d)
	if d > 0 && s < t {
		return SteadyTime(1<<63 - 1)
	}
	return s
}

// Clock gives the two times the master uses: Steady for every lease
// decision, Wall only for display and put start times.
type Clock interface {
	Steady() SteadyTime
	Wall() time.Time
}

// RealClock reads Go's monotonic clock.
type RealClock struct{ start time.Time }

// NewRealClock returns a clock whose steady readings count from now.
func NewRealClock() *RealClock { return &RealClock{start: time.Now()} }

// Steady uses the monotonic reading time.Now carries, so it does not move
// when the system clock is set.
func (c *RealClock) Steady() SteadyTime { return SteadyTime(time.Since(c.start)) + 1 }

// Wall is the system clock.
func (c *RealClock) Wall() time.Time { return time.Now() }

// FakeClock is a Clock for tests: steady time only moves by Advance, and the
// wall clock can be set anywhere, forwards or backwards, independently.
type FakeClock struct {
	mu     sync.Mutex
	steady SteadyTime
	wall   time.Time
}

// NewFakeClock starts the steady clock at an arbitrary non-zero value and the
// wall clock at wall.
func NewFakeClock(wall time.Time) *FakeClock {
	return &FakeClock{steady: SteadyTime(1_000_000_000), wall: wall}
}

// Steady returns the fake steady time.
func (c *FakeClock) Steady() SteadyTime {
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

func toDuration(d SteadyTime) time.Duration { return time.Duration(d) }
