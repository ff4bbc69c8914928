package verify

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var (
	flagScenario = flag.String("scenario", "", "run only this scenario (with -path or -seed: replay it)")
	flagPath     = flag.String("path", "", "replay this schedule (dot-separated option indices) of -scenario and print its trace")
	flagSeed     = flag.Uint64("seed", 0, "replay the random walk of this seed of -scenario and print its trace")
)

// deep reports whether make verify asked for the larger scopes.
func deep() bool { return os.Getenv("SHARDFENCE_VERIFY") == "deep" }

// expectation is what the checker must find in a scenario: nothing, or a
// counterexample for a deliberately wrong design.
type expectation struct {
	scenario string
	refuted  bool
	// invariant names the invariant the counterexample must break.
	invariant string
	bounds    Bounds
}

func checkExpectation(t *testing.T, e expectation) {
	sc, ok := scenarios[e.scenario]
	if !ok {
		t.Fatalf("no scenario %q", e.scenario)
	}
	st, v := Explore(t, sc, e.bounds)
	t.Logf("%s: %s", e.scenario, st)
	switch {
	case e.refuted && v == nil:
		t.Fatalf("wrong design %s was not refuted: %s", e.scenario, st)
	case e.refuted:
		if !strings.Contains(v.Err.Error(), e.invariant) {
			t.Fatalf("wrong design %s broke another invariant than %s:\n%v", e.scenario, e.invariant, v)
		}
		t.Logf("refuted as expected:\n%v", v)
	case v != nil:
		t.Fatalf("%v", v)
	}
	if !e.refuted && st.Truncated {
		t.Logf("%s: search truncated at %d states (raise the bound in deep mode)", e.scenario, st.States)
	}
	if !e.refuted && st.Complete == 0 {
		t.Fatalf("%s: no schedule ran to the end: the search checked nothing", e.scenario)
	}
}

// TestReplay replays one schedule given on the command line:
//
//	go test ./verify -run TestReplay -scenario takeover -path 0.3.1
//	go test ./verify -run TestReplay -scenario takeover -seed 42
func TestReplay(t *testing.T) {
	if *flagPath == "" && *flagSeed == 0 {
		t.Skip("no -path or -seed given")
	}
	sc, ok := scenarios[*flagScenario]
	if !ok {
		t.Fatalf("-scenario %q: not one of %v", *flagScenario, names())
	}
	var v *Violation
	if *flagSeed != 0 {
		_, v = Walk(t, sc, *flagSeed, walkFaultRate)
	} else {
		path, err := ParsePath(*flagPath)
		if err != nil {
			t.Fatal(err)
		}
		var trace []string
		trace, v = Replay(t, sc, path)
		if v == nil {
			t.Logf("no violation; trace:\n%s", strings.Join(trace, "\n"))
		}
	}
	if v != nil {
		t.Fatalf("%v", v)
	}
}

func names() []string {
	var out []string
	for n := range scenarios {
		out = append(out, n)
	}
	return out
}

func TestWritePath(t *testing.T) {
	small := Bounds{MaxStates: 200000}
	for _, e := range []expectation{
		{scenario: "solo-faults", bounds: small},
		{scenario: "takeover", bounds: small},
		{scenario: "takeover-sequenced", bounds: small},
		{scenario: "sequenced-no-poison", bounds: small},
		{scenario: "wrong-plain-md", refuted: true, invariant: "NoAckedWriteLoss", bounds: small},
		{scenario: "wrong-gc-poison", refuted: true, invariant: "NoAckedWriteLoss", bounds: small},
	} {
		if *flagScenario != "" && *flagScenario != e.scenario {
			continue
		}
		t.Run(e.scenario, func(t *testing.T) { checkExpectation(t, e) })
	}
}

const walkFaultRate = 0.1
