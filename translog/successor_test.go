package translog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// sealForTest is the successor's side of protocol section 5, reduced to one
// lineage term: after its claim, take the contiguous md prefix of term 1,
// poison the first missing generation, and return the restore point's ops.
// The real seal step lives in its own package; this copy exists so the
// write path can be checked against the rule it must satisfy.
func sealForTest(ctx context.Context, t *testing.T, store *blobstore.Container, sealedBy int64) map[string]bool {
	t.Helper()
	poison := func(g int64) []byte {
		b, err := EncodePoison(shard, 1, g, sealedBy)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	r := NewReader(store, shard)
	m := int64(0)
	for {
		if _, err := r.ReadMD(ctx, 1, m+1); err == nil {
			m++
			continue
		} else if !errors.Is(err, ErrMissingGen) {
			t.Fatalf("lineage read: %v", err)
		}
		_, err := store.CreateIfAbsent(ctx, layout.MDKey(1, m+1), poison(m+1))
		if err == nil {
			break
		}
		if !errors.Is(err, blobstore.ErrAlreadyExists) {
			t.Fatalf("poison: %v", err)
		}
		md, err := r.ReadMD(ctx, 1, m+1)
		if err != nil {
			t.Fatal(err)
		}
		if md.Kind == KindPoison {
			break
		}
		m++ // the writer's md landed between our read and our poison
	}
	restored := map[string]bool{}
	if err := r.Iterate(ctx, 1, 1, m, func(b Batch) error {
		for _, op := range b.Ops {
			restored[string(op)] = true
		}
		return nil
	}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return restored
}

// NoAckedWriteLoss against the real writer: a term-1 primary keeps
// appending through a jittery store while a term-2 successor claims and
// seals. Every op the primary acknowledged must be in the restore point.
func TestAckedWritesSurviveSuccessorSeal(t *testing.T) {
	for _, o := range []Options{{AckOrder: Concurrent}, {AckOrder: Sequenced}, {FencingMode: CreateOnly}, {FencingMode: Observe}} {
		name := o.AckOrder.String()
		if o.FencingMode != 0 {
			name = o.FencingMode.String()
		}
		t.Run(name, func(t *testing.T) {
			ackedTotal := 0
			for round := range 20 {
				ctx := context.Background()
				r := newRig(t, 1, o)
				// md creates are slower than CASes, so a CAS often lands
				// before the successor's delete while its md lands after
				// the successor's lineage read: the race the poison closes.
				r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Uniform(0, time.Millisecond)})
				r.store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Prefix: layout.MDPrefix, Latency: faulty.Uniform(0, 4*time.Millisecond)})
				var mu sync.Mutex
				var acked []string
				var wg sync.WaitGroup
				for a := range 6 {
					wg.Go(func() {
						for i := 0; ; i++ {
							op := fmt.Sprintf("r%d-a%d-%d", round, a, i)
							_, err := r.append(op)
							if err != nil {
								if !errors.Is(err, ErrFenced) {
									t.Errorf("append: %v", err)
								}
								return
							}
							mu.Lock()
							acked = append(acked, op)
							mu.Unlock()
						}
					})
				}
				time.Sleep(time.Duration(1+round%4) * time.Millisecond)
				if _, err := fence.Claim(ctx, r.store.Container, shard, 2, "successor", fence.WithClock(clock.NewAuto())); err != nil {
					t.Fatalf("successor claim: %v", err)
				}
				restored := sealForTest(ctx, t, r.store.Container, 2)
				wg.Wait()
				for _, op := range acked {
					if !restored[op] {
						t.Fatalf("round %d: acknowledged op %q is not in the restore point (%d restored)", round, op, len(restored))
					}
				}
				ackedTotal += len(acked)
			}
			if ackedTotal == 0 {
				t.Fatal("the primary never acknowledged anything: the test checked nothing")
			}
		})
	}
}
