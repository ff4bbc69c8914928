package verify

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Scheduled time. In a scenario with a Tick, the actors' steady clocks
// (Run.Clock) read one shared time that moves only when the scheduler takes
// a tick: time is a choice interleaved with the store's steps, so a
// lease-mode writer checking its lease, a successor's lease wait and a
// request still in flight can end in every order the quantum allows.
//
// The model:
//   - Time is an integer number of ticks; Now is ticks x Tick. Every
//     duration the protocol compares (lease, margin) is a multiple of
//     Tick in these scenarios, so the grid loses no order between an event
//     and a deadline.
//   - A wait of at least one Tick (a lease wait) is a timer that fires at
//     the first tick reaching its deadline. A shorter wait (the retry
//     backoff, 1ms) passes at once: a retry takes no time of its own, and
//     the scheduler may still tick before the retried request is answered.
//   - The scheduler may tick at any step while time is below the
//     scenario's Horizon; past it, only when nothing else can happen and a
//     timer waits (so a wait always ends, but late).
//   - Every answer, gate and timer an actor hears is recorded with the time
//     it heard it, so state pruning never merges runs whose actors read
//     different times.

// Clock is an actor's view of a run's scheduled time: a clock.Clock (and a
// fence.NonceSource, counting per actor so runs write the same bytes).
type Clock struct {
	r      *Run
	actor  string
	nonces int64 // guarded by r.tmu
}

type timer struct {
	actor string
	at    int64 // in ticks
	ch    chan struct{}
}

// Clock returns actor's clock. Without a scheduled time (Scenario.Tick 0)
// it panics: such scenarios use clock.NewAuto.
func (r *Run) Clock(actor string) *Clock {
	if r.sc.Tick <= 0 {
		panic(fmt.Sprintf("scenario %s: Run.Clock without a Tick", r.sc.Name))
	}
	r.tmu.Lock()
	defer r.tmu.Unlock()
	if c, ok := r.clocks[actor]; ok {
		return c
	}
	c := &Clock{r: r, actor: actor}
	r.clocks[actor] = c
	return c
}

// Now returns the scheduled time in nanoseconds.
func (c *Clock) Now() int64 {
	c.r.tmu.Lock()
	defer c.r.tmu.Unlock()
	return c.r.now * int64(c.r.sc.Tick)
}

// After returns a channel closed once d has passed on the scheduled time:
// at once for less than one tick, else at the first tick at or past the
// deadline.
func (c *Clock) After(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	r := c.r
	if d < r.sc.Tick {
		close(ch)
		return ch
	}
	r.tmu.Lock()
	defer r.tmu.Unlock()
	if r.timeEnded {
		close(ch)
		return ch
	}
	ticks := (int64(d) + int64(r.sc.Tick) - 1) / int64(r.sc.Tick)
	r.timers = append(r.timers, &timer{actor: c.actor, at: r.now + ticks, ch: ch})
	return ch
}

// Nonce makes Clock a fence.NonceSource.
func (c *Clock) Nonce() string {
	c.r.tmu.Lock()
	defer c.r.tmu.Unlock()
	c.nonces++
	return c.actor + "n" + strconv.FormatInt(c.nonces, 10)
}

// Now is the run's scheduled time in ticks.
func (r *Run) Now() int64 {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	return r.now
}

// canTick reports whether the scheduler may move time now: freely below the
// horizon, or because nothing else can happen and a timer waits.
func (r *Run) canTick(others bool) bool {
	if r.sc.Tick <= 0 {
		return false
	}
	r.tmu.Lock()
	defer r.tmu.Unlock()
	return r.now < int64(r.sc.Horizon) || (!others && len(r.timers) > 0)
}

// tick moves time one step and returns the timers that fell due (their
// channels still open: the caller closes them once the step is traced).
func (r *Run) tick() (int64, []*timer) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.now++
	var due []*timer
	n := 0
	for _, t := range r.timers {
		if t.at <= r.now {
			due = append(due, t)
			continue
		}
		r.timers[n] = t
		n++
	}
	r.timers = r.timers[:n]
	sort.Slice(due, func(i, j int) bool { return due[i].actor < due[j].actor })
	return r.now, due
}

// endTime fires every timer, now and later: the schedule has ended, and an
// actor waiting on the clock must wake to find the store closed.
func (r *Run) endTime() {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.timeEnded = true
	for _, t := range r.timers {
		close(t.ch)
	}
	r.timers = nil
}

// timeState is what time adds to a state: the tick and the pending timers
// (which the actors' histories fix too; kept for clarity).
func (r *Run) timeState() string {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	if r.sc.Tick <= 0 {
		return ""
	}
	ts := make([]string, len(r.timers))
	for i, t := range r.timers {
		ts[i] = fmt.Sprintf("%s@%d", t.actor, t.at-r.now)
	}
	sort.Strings(ts)
	return fmt.Sprintf("t%d[%s]", r.now, strings.Join(ts, ","))
}
