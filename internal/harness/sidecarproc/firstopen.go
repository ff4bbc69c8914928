package sidecarproc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// RunFirstOpenRace is the multi-process race of a shard's first opens on
// storeURL: rounds times, three sidecar processes open a new shard at terms
// 1, 2 and 3 at nearly the same moment, each a little later than the one
// below it, by more every round (each open reads the shard's settings
// beside its claim, and reads the seal's first round beside the LIST that
// verifies its sweep), and clients append to every sidecar that opened,
// for phase. A fourth sidecar then opens term 4 and reads the lineage:
// every acknowledged op must be in it once, and the term-3 open, whose
// claim no higher term can beat, must always open.
func RunFirstOpenRace(t *testing.T, cmd Command, storeURL string, rounds int, phase time.Duration) {
	procs := []*Proc{Start(t, cmd, "A", storeURL), Start(t, cmd, "B", storeURL), Start(t, cmd, "C", storeURL)}
	reader := Start(t, cmd, "R", storeURL)
	for round := range rounds {
		shard := fmt.Sprintf("race-%d", round)
		var mu sync.Mutex
		acked := map[string]string{}
		opened := make([]bool, len(procs))
		errs := make([]error, len(procs))
		ctx, cancel := context.WithTimeout(t.Context(), phase+time.Minute)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, p := range procs {
			wg.Go(func() {
				<-start
				time.Sleep(time.Duration(i*round) * 40 * time.Millisecond)
				term := int64(i + 1)
				if errs[i] = OpenShard(ctx, p.Client, shard, term, fmt.Sprintf("alloc-%s-%d", p.Name, round)); errs[i] != nil {
					return
				}
				opened[i] = true
				until := time.Now().Add(phase)
				for n := 0; time.Now().Before(until); n++ {
					op := fmt.Sprintf("%s-%d", p.Name, n)
					if err := p.Append(ctx, shard, []byte(op)); err != nil {
						// Fenced by a higher term that opened since:
						// nothing more is acknowledged here.
						time.Sleep(2 * time.Millisecond)
						continue
					}
					mu.Lock()
					acked[op] = p.Name
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		cancel()
		if !opened[2] {
			t.Fatalf("round %d: the term-3 open failed: %v", round, errs[2])
		}
		for i, err := range errs {
			if err != nil && ReasonOf(err) == "" {
				t.Errorf("round %d: sidecar %s's open failed without a reason: %v", round, procs[i].Name, err)
			}
		}
		reader.Open(t, shard, 4, fmt.Sprintf("alloc-r-%d", round))
		read, err := reader.ReadAll(t.Context(), shard)
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]int{}
		for op, who := range acked {
			by[who]++
			if read[op] != 1 {
				t.Errorf("round %d: op %s acknowledged by %s appears %d times in the lineage", round, op, who, read[op])
			}
		}
		if by["C"] == 0 {
			t.Errorf("round %d: the term-3 sidecar acknowledged nothing: the round did not exercise it", round)
		}
		t.Logf("round %d: opened %v (errors %v); acknowledged A %d, B %d, C %d; lineage %d ops", round, opened, errs, by["A"], by["B"], by["C"], len(read))
	}
	for _, p := range append(procs, reader) {
		p.Terminate(t)
	}
}
