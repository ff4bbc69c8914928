package master

import (
	"time"

	"github.com/shardfence/shardfence/master/internal/steadytime"
)

// SteadyTime is a reading of this process's monotonic clock in nanoseconds.
// Lease and soft-pin deadlines are SteadyTime values: they are compared only
// with readings of the same Clock and never written to the standby wire.
type SteadyTime = steadytime.Time

// Clock gives the two times the master uses: Steady for every lease
// decision, Wall only for display and put start times.
type Clock = steadytime.Clock

// RealClock reads Go's monotonic clock.
type RealClock = steadytime.RealClock

// FakeClock is a Clock for tests: steady time only moves by Advance, and the
// wall clock can be set anywhere, forwards or backwards, independently.
type FakeClock = steadytime.FakeClock

// NewRealClock returns a clock whose steady readings count from now.
func NewRealClock() *RealClock { return steadytime.NewReal() }

// NewFakeClock starts the steady clock at an arbitrary non-zero value and the
// wall clock at wall.
func NewFakeClock(wall time.Time) *FakeClock { return steadytime.NewFake(wall) }

func toDuration(d SteadyTime) time.Duration { return steadytime.ToDuration(d) }
