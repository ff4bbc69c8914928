package verify

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The new primary's quiet period (master/ha, ha.Node.quietUntil and
// oplog.Quiet; docs/PROTOCOL.md section 10, "A claim over unseen
// generations waits"). In the late-ack schedule the old primary's lease,
// renewed by an append whose md the standby never read, runs past the
// standby's sweep; a new primary that answered at once would answer beside
// it. The election scenario models the quiet period (election_test.go,
// standby.quietUntil) and checks NoOverlap after every step
// (election_world_test.go). Here: the late-ack schedule without the quiet
// period, and an exhaustive search of every schedule that continues the
// late-ack schedule from the standby's decision to claim, with the old
// primary's gen 2 (its CAS and its md) still on the wire.

// TestElectionLateAckWithoutQuiet runs the late-ack schedule with a new
// primary that answers at once (wrong design (d)): s1 answers from its
// open at t=40ms, while p's lease from gen 2 (sent at t=20ms, acknowledged
// after s1's sweep) runs until t=47ms. NoOverlap breaks.
func TestElectionLateAckWithoutQuiet(t *testing.T) {
	_, res := runLateAck(t, "wrong-election-no-quiet")
	sc := scenarios["wrong-election-no-quiet"]
	if res.violation == nil || !strings.Contains(res.violation.Error(), "NoOverlap") {
		t.Fatalf("want a NoOverlap violation, got %v:\n%s", res.violation, strings.Join(res.trace, "\n"))
	}
	t.Logf("refuted as expected:\n%v", violation(&sc, res, 0))
}

// TestElectionQuiet explores every schedule that continues the late-ack
// schedule from the step at which s1 decides to claim (t=40ms; p's gen 2
// CAS and md both on the wire, its mutation p.1 in it): s1's claim, sweep
// and seal against gen 2's CAS and md in every order, s1's quiet period,
// renewals and mutation, ticks. With the quiet period it is clean and the
// quiet period is what holds s1 back while p answers; without it
// (wrong-election-no-quiet) NoOverlap breaks.
func TestElectionQuiet(t *testing.T) {
	_, res := runLateAck(t, "election-late-ack")
	if res.violation != nil || !res.complete {
		t.Fatalf("the late-ack schedule: violation %v (complete %v):\n%s", res.violation, res.complete, strings.Join(res.trace, "\n"))
	}
	k := claimStep(res.trace, "s1")
	if k <= 0 {
		t.Fatalf("s1 never decided to claim in the late-ack schedule:\n%s", strings.Join(res.trace, "\n"))
	}
	prefix := res.path[:k]
	b := Bounds{MaxStates: 5000}
	switch {
	case deep():
		b.MaxStates = stateBound()
	case brief():
		b.MaxStates = 500
	}
	for _, e := range []expectation{
		{scenario: "election-late-ack", bounds: b},
		{scenario: "wrong-election-no-quiet", refuted: true, invariant: "NoOverlap", bounds: b},
	} {
		if *flagScenario != "" && *flagScenario != e.scenario {
			continue
		}
		t.Run(e.scenario+"-from-claim", func(t *testing.T) {
			c := resetElectionCount(e.scenario)
			st, v := ExploreFrom(t, scenarios[e.scenario], prefix, e.bounds)
			t.Logf("%s from step %d (path %s): %s", e.scenario, k, FormatPath(prefix), st)
			t.Logf("%s: %v", e.scenario, c)
			switch {
			case e.refuted && v == nil:
				t.Fatalf("wrong design %s was not refuted: %s", e.scenario, st)
			case e.refuted && !strings.Contains(v.Err.Error(), e.invariant):
				t.Fatalf("wrong design %s broke another invariant than %s:\n%v", e.scenario, e.invariant, v)
			case e.refuted:
				t.Logf("refuted as expected:\n%v", v)
			case v != nil:
				t.Fatalf("%v", v)
			case st.Complete == 0 || c.quiet.Load() == 0 || c.held.Load() == 0:
				t.Fatalf("%s: no schedule ran to the end with s1 quiet while p answered: the search checked nothing (%v)", e.scenario, c)
			}
		})
	}
}

var stepLine = regexp.MustCompile(`^\s*([0-9]+)\s`)

// claimStep is the number of steps taken when actor noted its decision to
// claim, read off a trace.
func claimStep(trace []string, actor string) int {
	step := 0
	for _, l := range trace {
		if m := stepLine.FindStringSubmatch(l); m != nil {
			step, _ = strconv.Atoi(m[1])
			continue
		}
		if strings.Contains(l, ". "+actor+" claims term ") {
			return step
		}
	}
	return 0
}

// ExploreFrom is Explore over the schedules that begin with prefix: the
// search varies only the steps after it, so it reaches the middle of a
// schedule (a directed one's neighbourhood) that a search from the start
// would come to only after exhausting every tail before it. A replay of a
// violation's path (prefix included) reproduces it.
func ExploreFrom(t *testing.T, sc Scenario, prefix []int, b Bounds) (Stats, *Violation) {
	t.Helper()
	start := time.Now()
	var st Stats
	seen := map[[32]byte]struct{}{}
	type frame struct{ n, cur int }
	var stack []frame
	for {
		path := append([]int(nil), prefix...)
		for _, f := range stack {
			path = append(path, f.cur)
		}
		pick := func(r *Run, chk Checker, step int, choices []choice) (int, bool) {
			if b.MaxStates > 0 && len(seen) >= b.MaxStates {
				st.Truncated = true
				return 0, true
			}
			h := r.hash(chk)
			if _, ok := seen[h]; ok {
				return 0, true
			}
			seen[h] = struct{}{}
			stack = append(stack, frame{n: len(choices)})
			return 0, false
		}
		res := once(t, &sc, path, pick)
		st.Schedules++
		st.Steps += res.steps
		st.MaxDepth = max(st.MaxDepth, res.steps)
		if res.complete {
			st.Complete++
		}
		st.States = len(seen)
		if res.violation != nil {
			st.Elapsed = time.Since(start)
			return st, violation(&sc, res, 0)
		}
		if st.Truncated {
			break
		}
		for len(stack) > 0 && stack[len(stack)-1].cur+1 >= stack[len(stack)-1].n {
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			break
		}
		stack[len(stack)-1].cur++
	}
	st.Elapsed = time.Since(start)
	return st, nil
}
