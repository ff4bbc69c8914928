package verify

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// Checker holds the invariants of one run. Its methods run on the
// scheduler's goroutine while every actor is blocked.
type Checker interface {
	// Check runs after every step.
	Check(r *Run) error
	// Final runs once every actor has finished.
	Final(r *Run) error
	// Digest is the invariant state the store and the actors' histories do
	// not already fix (for example which actors acknowledged what), so
	// state pruning never merges runs the invariants tell apart.
	Digest() string
}

// Scenario is a set of actors and the invariants they must keep.
type Scenario struct {
	Name string
	// Start seeds the store and starts the actors of one run with Run.Go.
	// It runs inside the run's bubble.
	Start func(r *Run) Checker
	// Faults bounds the outcomes other than Deliver and Land in one
	// schedule.
	Faults int
	// Faulty says whether a request may get a fault outcome; nil allows
	// every fault the operation admits.
	Faulty func(req *Request, o Outcome) bool
	// UniqueTokens gives every write a new token, as GCS generations and
	// Azure ETags are; by default a token is the body's hash, as S3's ETag
	// of a single PUT is (a body written again gets its old token back).
	UniqueTokens bool
	// MaxSteps bounds one schedule; a schedule still running after it is a
	// liveness violation. Default 500.
	MaxSteps int
	// Tick, when set, puts time in the schedule (clock.go): the actors'
	// clocks (Run.Clock) move by Tick only when the scheduler ticks.
	Tick time.Duration
	// Horizon is how many ticks the scheduler may take at any step; past
	// it, time moves only when nothing else can happen and a timer waits.
	Horizon int
}

// Run is one execution of a scenario.
type Run struct {
	Store *Store

	sc      *Scenario
	wg      sync.WaitGroup
	mu      sync.Mutex
	actors  map[string]bool // name -> finished
	history map[string][32]byte
	trace   []string
	notes   []string
	answers []Answer
	faults  int

	tmu    sync.Mutex // scheduled time (clock.go)
	now    int64
	timers []*timer
	clocks map[string]*Clock
	// timeEnded: the schedule ended; every wait ends at once.
	timeEnded bool
}

func newRun(sc *Scenario) *Run {
	return &Run{Store: newStore(sc.UniqueTokens), sc: sc, actors: map[string]bool{}, history: map[string][32]byte{}, clocks: map[string]*Clock{}}
}

// Go starts an actor. Its store view sends every request through the
// scheduler.
func (r *Run) Go(actor string, fn func(ctx context.Context, store *blobstore.Container)) {
	r.mu.Lock()
	r.actors[actor] = false
	r.mu.Unlock()
	r.wg.Go(func() {
		fn(context.Background(), r.Store.As(actor))
		r.mu.Lock()
		r.actors[actor] = true
		r.mu.Unlock()
	})
}

// Gate blocks the actor until the scheduler opens the gate. It returns
// false once the schedule has ended: the actor should stop.
func (r *Run) Gate(actor, name string) bool {
	rep := r.Store.submit(&Request{Actor: actor, Gate: true, Key: name})
	return rep.err == nil
}

// Note adds a line to the trace at the current step (an acknowledgement, a
// fencing verdict, a restore point).
func (r *Run) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, "      . "+fmt.Sprintf(format, args...))
}

// flushNotes moves the notes of the last step into the trace, sorted: the
// goroutines that wrote them ran concurrently, and a replayed trace must
// read the same. r.mu must be held.
func (r *Run) flushNotes() {
	sort.Strings(r.notes)
	r.trace = append(r.trace, r.notes...)
	r.notes = nil
}

// Ended reports whether the checker has stopped the schedule; actors stop
// recording outcomes then, since every request fails on purpose.
func (r *Run) Ended() bool {
	r.Store.mu.Lock()
	defer r.Store.mu.Unlock()
	return r.Store.ended
}

// Step is the number of choices taken so far.
func (r *Run) Step() int {
	r.Store.mu.Lock()
	defer r.Store.mu.Unlock()
	return r.Store.step
}

func (r *Run) finished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, done := range r.actors {
		if !done {
			return false
		}
	}
	return true
}

// choice is one thing the scheduler can do next.
type choice struct {
	req  *Request
	out  Outcome
	tick bool // move the scheduled time one tick (req is nil)
}

func (c choice) String() string {
	if c.tick {
		return "clock tick"
	}
	return fmt.Sprintf("%s [%s]", c.req.Label(), c.out)
}

// choices lists the options at the current state in a fixed order:
// deliveries, then landings of delayed requests, then a tick of the
// scheduled time, then faults.
func (r *Run) choices() []choice {
	s := r.Store
	s.mu.Lock()
	defer s.mu.Unlock()
	sortRequests(s.pending)
	sortRequests(s.delayed)
	var out []choice
	for _, q := range s.pending {
		out = append(out, choice{req: q, out: Deliver})
	}
	for _, q := range s.delayed {
		out = append(out, choice{req: q, out: Land})
	}
	if r.canTick(len(out) > 0) {
		out = append(out, choice{tick: true})
	}
	if r.faults < r.sc.Faults {
		for _, q := range s.pending {
			for _, o := range outcomes(q) {
				if r.sc.Faulty == nil || r.sc.Faulty(q, o) {
					out = append(out, choice{req: q, out: o})
				}
			}
		}
	}
	return out
}

func sortRequests(rs []*Request) {
	sort.SliceStable(rs, func(i, j int) bool {
		if a, b := rs[i].Label(), rs[j].Label(); a != b {
			return a < b
		}
		return rs[i].arrival < rs[j].arrival
	})
}

// take carries out c.
func (r *Run) take(c choice) {
	if c.tick {
		r.takeTick()
		return
	}
	s := r.Store
	s.mu.Lock()
	remove := func(list []*Request) []*Request {
		for i, q := range list {
			if q == c.req {
				return append(list[:i], list[i+1:]...)
			}
		}
		return list
	}
	if c.out == Land {
		s.delayed = remove(s.delayed)
	} else {
		s.pending = remove(s.pending)
	}
	if c.out == Delay {
		s.delayed = append(s.delayed, c.req)
	}
	summary, answer := s.perform(c.req, c.out)
	s.step++
	step := s.step
	s.mu.Unlock()

	r.mu.Lock()
	defer func() {
		r.mu.Unlock()
		if answer != nil {
			answer()
		}
	}()
	r.flushNotes()
	if c.out.fault() {
		r.faults++
	}
	heard := summary
	switch c.out {
	case Lose, Delay:
		heard = "ambiguous"
	case Fail:
		heard = "unavailable"
	}
	if r.sc.Tick > 0 {
		heard += "@" + strconv.FormatInt(r.Now(), 10)
	}
	if c.out != Land {
		h := r.history[c.req.Actor]
		r.history[c.req.Actor] = sha256.Sum256([]byte(string(h[:]) + "\x00" + c.req.Label() + "\x00" + heard))
	}
	line := fmt.Sprintf("%4d  %s -> %s", step, c.req.Label(), summary)
	if c.out != Deliver {
		line = fmt.Sprintf("%4d  %s [%s] -> %s", step, c.req.Label(), c.out, summary)
		if c.out == Lose || c.out == Delay {
			line += " (actor hears: ambiguous)"
		}
	}
	r.trace = append(r.trace, line)
	r.answers = append(r.answers, Answer{Step: step, Req: c.req, Out: c.out, Summary: summary})
}

// takeTick moves the scheduled time and wakes the timers that fell due,
// once the step is in the trace.
func (r *Run) takeTick() {
	s := r.Store
	s.mu.Lock()
	s.step++
	step := s.step
	s.mu.Unlock()
	now, due := r.tick()
	r.mu.Lock()
	r.flushNotes()
	var woken []string
	for _, t := range due {
		woken = append(woken, t.actor)
		h := r.history[t.actor]
		r.history[t.actor] = sha256.Sum256([]byte(string(h[:]) + "\x00timer@" + strconv.FormatInt(now, 10)))
	}
	line := fmt.Sprintf("%4d  clock tick -> t=%d", step, now)
	if len(woken) > 0 {
		line += " (wakes " + strings.Join(woken, ", ") + ")"
	}
	r.trace = append(r.trace, line)
	r.mu.Unlock()
	for _, t := range due {
		close(t.ch)
	}
}

// Answer is one request the scheduler decided.
type Answer struct {
	Step    int
	Req     *Request
	Out     Outcome
	Summary string // the store's answer, before a lost response hid it
}

// Applied reports whether the request took effect with a success answer.
func (a Answer) Applied() bool {
	return (a.Out == Deliver || a.Out == Lose || a.Out == Land) && (a.Summary == "ok" || strings.HasPrefix(a.Summary, "ok "))
}

// Answers returns every decision so far, in order.
func (r *Run) Answers() []Answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Answer(nil), r.answers...)
}

// hash identifies the state for pruning: the store's contents, the
// requests in flight, what every actor has heard (which, the actors being
// deterministic, fixes their local state), the fault budget spent, and the
// checker's own digest.
func (r *Run) hash(chk Checker) [32]byte {
	h := sha256.New()
	s := r.Store
	s.mu.Lock()
	keys := make([]string, 0, len(s.objects))
	for k := range s.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "o%s\x00%x\x00", k, s.objects[k].body)
	}
	var labels []string
	for _, q := range s.pending {
		labels = append(labels, "p"+q.Label())
	}
	for _, q := range s.delayed {
		labels = append(labels, "d"+q.Label())
	}
	s.mu.Unlock()
	sort.Strings(labels)
	fmt.Fprint(h, strings.Join(labels, "\x00"))
	r.mu.Lock()
	names := make([]string, 0, len(r.history))
	for a := range r.history {
		names = append(names, a)
	}
	sort.Strings(names)
	for _, a := range names {
		hh := r.history[a]
		fmt.Fprintf(h, "h%s\x00%x", a, hh[:])
	}
	_ = binary.Write(h, binary.LittleEndian, int64(r.faults))
	r.mu.Unlock()
	fmt.Fprint(h, r.timeState())
	fmt.Fprint(h, "c", chk.Digest())
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// picker chooses the next option of a fresh (not replayed) state; stop ends
// the schedule there.
type picker func(r *Run, chk Checker, step int, choices []choice) (idx int, stop bool)

// runResult is what one schedule did.
type runResult struct {
	path      []int
	trace     []string
	violation error
	complete  bool
	steps     int
}

var errNondeterministic = errors.New("replay diverged: the code under test made a choice the schedule does not fix")

// runSchedule runs one schedule inside the caller's bubble.
func (sc *Scenario) runSchedule(prefix []int, pick picker) (res runResult) {
	maxSteps := sc.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 500
	}
	r := newRun(sc)
	chk := sc.Start(r)
	defer func() {
		r.mu.Lock()
		r.flushNotes()
		r.mu.Unlock()
		r.Store.end()
		r.endTime()
		r.wg.Wait()
		r.mu.Lock()
		res.trace = r.trace
		r.mu.Unlock()
	}()
	for step := 0; ; step++ {
		synctest.Wait()
		res.steps = step
		if err := chk.Check(r); err != nil {
			res.violation = err
			return res
		}
		choices := r.choices()
		if len(choices) == 0 {
			if !r.finished() {
				// The actors cannot be ended through the store, so the run
				// cannot be torn down: report here, with every stack.
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				r.mu.Lock()
				r.flushNotes()
				trace := strings.Join(r.trace, "\n")
				r.mu.Unlock()
				panic(fmt.Sprintf("scenario %s: liveness: no request in flight but actors still running (blocked outside the store: a deadlock or a timer nobody advances)\npath %s\n%s\n\n%s",
					sc.Name, FormatPath(res.path), trace, buf))
			}
			if err := chk.Final(r); err != nil {
				res.violation = err
				return res
			}
			res.complete = true
			return res
		}
		if step >= maxSteps {
			res.violation = fmt.Errorf("liveness: schedule still running after %d steps", maxSteps)
			return res
		}
		var idx int
		if step < len(prefix) {
			idx = prefix[step]
			if idx >= len(choices) {
				res.violation = fmt.Errorf("%w (step %d offers %d options, the path takes option %d)", errNondeterministic, step, len(choices), idx)
				return res
			}
		} else {
			var stop bool
			idx, stop = pick(r, chk, step, choices)
			if stop {
				return res
			}
		}
		res.path = append(res.path, idx)
		r.take(choices[idx])
	}
}
