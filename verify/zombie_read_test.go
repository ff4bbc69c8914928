package verify

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func init() {
	for _, c := range []readCase{
		// The read barrier as built, per_sync: w1 appends one op and
		// serves two reads while c2 claims term 2 and writes one.
		{name: "zombie-read", appends: 1, reads: 2, writes: 1},
		{name: "zombie-read-deep", appends: 2, reads: 3, writes: 1, faults: 1},
		// Lease mode on scheduled time: w1's second append and its reads
		// may fall inside the lease of its first CAS (answered with no
		// store request); past it the barrier reads the key.
		{name: "zombie-read-lease", lease: true, appends: 2, reads: 2, writes: 1, horizon: 3},
		{name: "zombie-read-lease-deep", lease: true, appends: 2, reads: 3, writes: 1, faults: 1, horizon: 5},
		// Random walks: more reads, a fault, time free to move longer.
		{name: "walk-zombie-read", appends: 2, reads: 3, writes: 1, faults: 1},
		{name: "walk-zombie-read-lease", lease: true, appends: 2, reads: 3, writes: 1, faults: 1, horizon: 6},
		// Wrong designs: no barrier at all, per_sync and lease; a barrier
		// that joins a fence key read already on its way when it was
		// called.
		{name: "wrong-read-no-barrier", appends: 1, reads: 2, writes: 1, noBarrier: true},
		{name: "wrong-read-no-barrier-lease", lease: true, appends: 2, reads: 2, writes: 1, horizon: 3, noBarrier: true},
		{name: "wrong-read-join-sent", appends: 1, reads: 2, writes: 1, joinSent: true},
	} {
		register(c.scenario())
	}
}

// TestZombieRead: a primary serving reads from its own state beside a
// successor that claims its shard and acknowledges a write. Without the
// read barrier, or with a barrier that joins a fence key read sent before
// it was called, a read misses the successor's write (LinearizableRead);
// with the barrier as built, per_sync and lease, every read that answers
// holds every write acknowledged before it was called.
//
// The depth-first searches explore the successor's run against the
// primary's last reads (its requests sort first): reads called after the
// successor acknowledged, which the barrier must refuse. Reads answered
// before the successor's sweep, inside the lease, or behind a fence key
// read on its way sit early in a schedule, where the random walks go.
func TestZombieRead(t *testing.T) {
	b := Bounds{MaxStates: stateBound()}
	walks := 1000
	switch {
	case deep():
		walks = 10000
	case brief():
		b.MaxStates, walks = 500, 150
	}
	es := []expectation{
		{scenario: "zombie-read", bounds: b},
		{scenario: "zombie-read-lease", bounds: b},
		{scenario: "wrong-read-no-barrier", refuted: true, invariant: "LinearizableRead", bounds: b},
		{scenario: "wrong-read-no-barrier-lease", refuted: true, invariant: "LinearizableRead", bounds: b},
	}
	for _, e := range es {
		e.scenario = scope(e.scenario)
		if *flagScenario != "" && *flagScenario != e.scenario {
			continue
		}
		t.Run(e.scenario, func(t *testing.T) {
			c := resetReadCount(e.scenario)
			checkExpectation(t, e)
			t.Logf("%s: %v", e.scenario, c)
			if !e.refuted && (c.stale.Load() == 0 || c.refused.Load() == 0) {
				t.Fatalf("%s: no run called a read after the successor acknowledged and refused one: the scope checked nothing", e.scenario)
			}
		})
	}
	for _, name := range []string{"walk-zombie-read", "walk-zombie-read-lease"} {
		if *flagScenario != "" && *flagScenario != name {
			continue
		}
		t.Run(name, func(t *testing.T) {
			c := resetReadCount(name)
			start := time.Now()
			steps := 0
			for seed := uint64(1); seed <= uint64(walks); seed++ {
				n, done, v := readWalk(t, name, seed)
				if v != nil {
					t.Fatalf("seed %d:\n%v", seed, v)
				}
				if !done {
					t.Fatalf("seed %d: the walk did not run to the end", seed)
				}
				steps += n
			}
			t.Logf("%s: %d seeds, %d steps, %v; %v", name, walks, steps, time.Since(start).Round(time.Millisecond), c)
			// Reads refused after the successor acknowledged, reads
			// answered with the primary's ops; per_sync: after a fence
			// key read, and behind one on its way (the group is the same
			// in every mode); lease: from the lease.
			missed := c.stale.Load() == 0 || c.refused.Load() == 0 || c.answered.Load() == 0
			if strings.HasSuffix(name, "-lease") {
				missed = missed || c.local.Load() == 0
			} else {
				missed = missed || c.store.Load() == 0 || c.queued.Load() == 0
			}
			if missed {
				t.Fatalf("%s: the walks missed what they are for: %v", name, c)
			}
		})
	}
	// Refuted by random walks: their counterexamples sit early in a
	// schedule (a read answered from the lease or a fence key read taken
	// before the successor's sweep), beyond the depth-first search's reach.
	for _, name := range []string{"wrong-read-join-sent"} {
		if *flagScenario != "" && *flagScenario != name {
			continue
		}
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			for seed := uint64(1); seed <= 5000; seed++ {
				_, _, v := readWalk(t, name, seed)
				if v == nil {
					continue
				}
				if !strings.Contains(v.Err.Error(), "LinearizableRead") {
					t.Fatalf("wrong design %s broke another invariant than LinearizableRead:\n%v", name, v)
				}
				t.Logf("refuted as expected by the walk of seed %d after %v:\n%v", seed, time.Since(start).Round(time.Millisecond), v)
				// The same schedule with the group as built: the late
				// read waits for a read of its own, which finds the key
				// gone.
				trace, again := Replay(t, scenarios["zombie-read"], v.Path)
				if again != nil || !strings.Contains(strings.Join(trace, "\n"), "refused: the barrier found the writer fenced") {
					t.Fatalf("the counterexample's schedule with the group as built: want no violation and a read refused, got %v:\n%s", again, strings.Join(trace, "\n"))
				}
				t.Logf("the same schedule with the group as built (zombie-read):\n%s", strings.Join(trace, "\n"))
				return
			}
			t.Fatalf("wrong design %s was not refuted by 5,000 walks", name)
		})
	}
}

// readSlowRate is how likely a walk is to call a read or deliver a fence
// key read's response at a step where anything else could happen: a
// client calls reads now and then, and a response may take a while. With
// every choice equally likely (Walk), the primary's reads would all come
// before the successor's run of about twenty steps.
const readSlowRate = 0.1

// readWalk runs the random walk of seed over a zombie-read scenario: as
// Walk, but the primary's read gates and fence key read responses are
// slow (readSlowRate). The same seed always gives the same schedule; a
// violation prints the path that replays it.
func readWalk(t *testing.T, name string, seed uint64) (steps int, complete bool, v *Violation) {
	t.Helper()
	sc := scenarios[name]
	res := once(t, &sc, nil, readWalkPicker(seed))
	if res.violation != nil {
		return res.steps, false, violation(&sc, res, 0)
	}
	return res.steps, res.complete, nil
}

func readWalkPicker(seed uint64) picker {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	return func(_ *Run, _ Checker, _ int, choices []choice) (int, bool) {
		var calm, slow, faulty []int
		for i, c := range choices {
			switch {
			case c.out.fault():
				faulty = append(faulty, i)
			case !c.tick && c.req.Gate && (strings.HasPrefix(c.req.Key, "read ") || strings.HasPrefix(c.req.Key, "response of fence read")):
				slow = append(slow, i)
			default:
				calm = append(calm, i)
			}
		}
		if len(faulty) > 0 && (len(calm)+len(slow) == 0 || rng.Float64() < walkFaultRate) {
			return faulty[rng.IntN(len(faulty))], false
		}
		if len(slow) > 0 && (len(calm) == 0 || rng.Float64() < readSlowRate) {
			return slow[rng.IntN(len(slow))], false
		}
		return calm[rng.IntN(len(calm))], false
	}
}
