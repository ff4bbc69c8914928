package verify

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Bounds limit an exhaustive exploration.
type Bounds struct {
	// MaxStates stops the search after this many distinct states (0: no
	// limit); Stats.Truncated says so.
	MaxStates int
}

// Stats describe an exploration.
type Stats struct {
	States    int // distinct states reached
	Schedules int // schedules run (each replays its prefix from the start)
	Steps     int // steps executed, replays included
	Complete  int // schedules that ran until every actor finished
	MaxDepth  int // longest schedule
	Truncated bool
	Elapsed   time.Duration
}

func (s Stats) String() string {
	t := ""
	if s.Truncated {
		t = " (truncated)"
	}
	return fmt.Sprintf("%d states, %d schedules (%d run to the end), %d steps, depth %d, %v%s",
		s.States, s.Schedules, s.Complete, s.Steps, s.MaxDepth, s.Elapsed.Round(time.Millisecond), t)
}

// Violation is a schedule that breaks an invariant.
type Violation struct {
	Scenario string
	Err      error
	Path     []int
	Seed     uint64 // for a random walk; 0 for an exhaustive search
	Trace    []string
}

// PathString is the path in the form -path takes.
func (v *Violation) PathString() string { return FormatPath(v.Path) }

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s: %v\n", v.Scenario, v.Err)
	fmt.Fprintf(&b, "trace (step, actor, request, key, body -> answer):\n")
	for _, l := range v.Trace {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "replay with: go test ./verify -run TestReplay -v -scenario %s -path %s", v.Scenario, v.PathString())
	if v.Seed != 0 {
		fmt.Fprintf(&b, "   (or -seed %d)", v.Seed)
	}
	return b.String()
}

// FormatPath renders a schedule as dot-separated option indices.
func FormatPath(p []int) string {
	s := make([]string, len(p))
	for i, x := range p {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ".")
}

// ParsePath reads FormatPath's form.
func ParsePath(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var p []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("path %q: %q is not an option index", s, f)
		}
		p = append(p, n)
	}
	return p, nil
}

// once runs one schedule in a fresh bubble.
func once(t *testing.T, sc *Scenario, prefix []int, pick picker) runResult {
	t.Helper()
	var res runResult
	synctest.Test(t, func(*testing.T) { res = sc.runSchedule(prefix, pick) })
	return res
}

func violation(sc *Scenario, res runResult, seed uint64) *Violation {
	return &Violation{Scenario: sc.Name, Err: res.violation, Path: res.path, Seed: seed, Trace: res.trace}
}

// Explore runs every schedule of sc depth-first, replaying each prefix from
// the start and pruning states already reached. It stops at the first
// violation.
func Explore(t *testing.T, sc Scenario, b Bounds) (Stats, *Violation) {
	t.Helper()
	start := time.Now()
	var st Stats
	seen := map[[32]byte]struct{}{}
	type frame struct{ n, cur int }
	var stack []frame
	for {
		prefix := make([]int, len(stack))
		for i, f := range stack {
			prefix[i] = f.cur
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
		res := once(t, &sc, prefix, pick)
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

// Replay runs the schedule path names, then delivers the first pending
// request at every further step until the actors finish.
func Replay(t *testing.T, sc Scenario, path []int) (trace []string, v *Violation) {
	t.Helper()
	res := once(t, &sc, path, func(*Run, Checker, int, []choice) (int, bool) { return 0, false })
	if res.violation != nil {
		return res.trace, violation(&sc, res, 0)
	}
	return res.trace, nil
}

// Walk runs one schedule whose choices follow seed: mostly deliveries and
// landings in random order, a fault with probability faultRate while the
// budget lasts. The same seed always gives the same schedule.
func Walk(t *testing.T, sc Scenario, seed uint64, faultRate float64) (steps int, complete bool, v *Violation) {
	t.Helper()
	res := once(t, &sc, nil, walkPicker(seed, faultRate))
	if res.violation != nil {
		return res.steps, false, violation(&sc, res, seed)
	}
	return res.steps, res.complete, nil
}

func walkPicker(seed uint64, faultRate float64) picker {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	return func(_ *Run, _ Checker, _ int, choices []choice) (int, bool) {
		var calm, faulty []int
		for i, c := range choices {
			if c.out.fault() {
				faulty = append(faulty, i)
			} else {
				calm = append(calm, i)
			}
		}
		if len(faulty) > 0 && (len(calm) == 0 || rng.Float64() < faultRate) {
			return faulty[rng.IntN(len(faulty))], false
		}
		return calm[rng.IntN(len(calm))], false
	}
}
