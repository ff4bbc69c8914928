package sim

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "TestSeed: the seed to run (its trace is printed)")
	seedsFlag = flag.Int("sim.seeds", 50, "TestSimSeeds: how many seeds to run")
	firstFlag = flag.Uint64("sim.first", 1, "TestSimSeeds: the first seed")
)

// runSeed runs one plan in a fresh bubble.
func runPlan(t *testing.T, p Plan) Result {
	t.Helper()
	var res Result
	dir := t.TempDir()
	synctest.Test(t, func(*testing.T) { res = RunPlan(p, DefaultShape, DefaultTiming, dir) })
	return res
}

func report(res Result) string {
	var b strings.Builder
	b.WriteString(res.Plan.String())
	b.WriteString("trace:\n")
	for _, l := range res.Trace {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(&b, "replay with: go test ./sim -run 'TestSeed$' -v -seed %d", res.Plan.Seed)
	return b.String()
}

func TestSeed(t *testing.T) {
	if *seedFlag == 0 {
		t.Skip("give -seed N")
	}
	runtime.GOMAXPROCS(1)
	res := runPlan(t, NewPlan(*seedFlag, DefaultShape))
	t.Log(report(res))
	if res.Violation != nil {
		t.Fatal(res.Violation)
	}
}

func TestSimSeeds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var total Stats
	start := time.Now()
	for seed := *firstFlag; seed < *firstFlag+uint64(*seedsFlag); seed++ {
		res := runPlan(t, NewPlan(seed, DefaultShape))
		total.add(res.Stats)
		if res.Violation != nil {
			t.Fatalf("seed %d: %v\n%s", seed, res.Violation, report(res))
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds, %v simulated, %d faults, %d messages, %d store requests, %d acks, %d moves, %d failovers in %v (%.1f seeds/s)",
		total.Seeds, total.Simulated, total.Faults, total.Messages, total.StoreRequests, total.Acked, total.Moves, total.Failovers, el.Round(time.Millisecond), float64(total.Seeds)/el.Seconds())
}
