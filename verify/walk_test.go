package verify

import (
	"testing"
	"time"

	"github.com/shardfence/shardfence/translog"
)

// The random walks run larger scopes than the exhaustive search can: more
// syncs, three terms, a relocation-free but fault-heavy mix.
func init() {
	con, seq := translog.Concurrent, translog.Sequenced
	register(recoveryCase{name: "walk-recovery-race", syncs: 3, order: con, third: true, writes: 2, faults: 3}.scenario())
	register(recoveryCase{name: "walk-recovery-sequenced", syncs: 3, order: seq, third: true, writes: 2, faults: 3}.scenario())
	register(writeCase{name: "walk-takeover", syncs: 4, order: con, successor: true, faults: 4}.scenario())
	register(writeCase{name: "walk-solo", syncs: 4, order: con, faults: 4}.scenario())
}

var walkScenarios = []string{"walk-recovery-race", "walk-recovery-sequenced", "walk-takeover", "walk-solo", "walk-gc", "walk-handoff",
	"walk-lease-recovery", "walk-relocation", "walk-checkpoint-gc"}

// TestRandomWalks runs seeded random schedules: seed n runs scenario
// n mod 9. 500 seeds in make test, 10,000 under make verify; a failure
// prints the seed and the path that replay it.
func TestRandomWalks(t *testing.T) {
	seeds := 500
	if deep() {
		seeds = 10000
	}
	start := time.Now()
	steps, complete, ran := 0, 0, 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		name := walkScenarios[seed%uint64(len(walkScenarios))]
		if *flagScenario != "" && *flagScenario != name {
			continue
		}
		n, done, v := Walk(t, scenarios[name], seed, walkFaultRate)
		steps += n
		ran++
		if done {
			complete++
		}
		if v != nil {
			t.Fatalf("seed %d:\n%v", seed, v)
		}
	}
	t.Logf("%d seeds, %d run to the end, %d steps, %v", ran, complete, steps, time.Since(start).Round(time.Millisecond))
	if complete < ran {
		t.Fatalf("only %d of %d walks ran to the end", complete, ran)
	}
}
