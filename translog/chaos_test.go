package translog

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore/faulty"
)

// NoSpuriousFencing under a mix of every non-fencing fault at once, with
// concurrent appenders and pipelined syncs: nothing fences, every
// acknowledged op is readable, and the fence commits the last acked gen.
func TestMixedFaultsNeverFenceAndLoseNothing(t *testing.T) {
	for _, order := range []AckOrder{Concurrent, Sequenced} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", order, seed), func(t *testing.T) {
				r := newSeededRig(t, 1, Options{AckOrder: order, InlineLimit: 2048}, seed)
				for i, f := range []faulty.Fault{faulty.LostResponse, faulty.LostRequest, faulty.Conflict, faulty.Unavailable} {
					r.store.MustAdd(faulty.Rule{Fault: f, Probability: 0.06 + 0.02*float64(i)})
				}
				r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Uniform(0, 500*time.Microsecond)})
				var mu sync.Mutex
				acked := map[string]int64{}
				var wg sync.WaitGroup
				for a := range 8 {
					wg.Go(func() {
						for i := range 15 {
							op := fmt.Sprintf("a%d-%d-%s", a, i, make([]byte, (a*i*37)%700))
							ack, err := r.append(op)
							if err != nil {
								t.Errorf("append: %v", err)
								return
							}
							mu.Lock()
							acked[op] = ack.Gen
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				r.store.Clear()
				if r.w.Err() != nil || r.chain.Err() != nil {
					t.Fatalf("fenced with no successor: %v / %v", r.w.Err(), r.chain.Err())
				}
				last := r.w.NextGen() - 1
				got := map[string]bool{}
				for _, op := range r.readAll(1, 1, last) {
					if got[op] {
						t.Fatalf("op %.12q stored twice", op)
					}
					got[op] = true
				}
				for op := range acked {
					if !got[op] {
						t.Fatalf("acknowledged op %.12q missing", op)
					}
				}
				if fg := r.fenceGen(1); fg != last {
					t.Fatalf("fence commits gen %d, last gen %d", fg, last)
				}
				if r.store.InjectedTotal(faulty.LostResponse) == 0 || r.store.InjectedTotal(faulty.Conflict) == 0 {
					t.Fatal("faults did not fire")
				}
			})
		}
	}
}
