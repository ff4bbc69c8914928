package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/translog"
)

// A predecessor that never stops on its own (unfenced, or observe mode)
// and always wins the race for the generation the seal poisons: before
// each poison at its next generation reaches the store, the writer's md
// for that generation lands. The walk would chase it forever; its barrier
// (a poison further up) bounds it. The successor's open returns, every op
// the writer acknowledged is in its restore point, and the writer is
// stopped at the barrier at the latest.
func TestSealEndsAgainstAWriterThatAlwaysWinsTheRace(t *testing.T) {
	for _, mode := range []string{"unfenced", "observe"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			inner := mem.New()
			o := options(nil)
			if mode == "unfenced" {
				o.Writer.FencingDisabled = true
			} else {
				o.Writer.FencingMode = translog.Observe
			}
			sh1 := open(t, inner, 1, "a1", o)
			appendOps(t, sh1.Writer, "first")
			acked := map[string]bool{"first": true}
			wins := 0
			successor := faulty.New(inner, 1)
			successor.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
				if r.Op != blobstore.OpCreateIfAbsent {
					return nil
				}
				p, ok := layout.ParseMDKey(r.Key)
				term, gen := p.Term, p.Gen
				if !ok || term != 1 || gen != sh1.Writer.NextGen() {
					return nil
				}
				op := fmt.Sprint("win-", gen)
				if _, err := sh1.Writer.Append(ctx, [][]byte{[]byte(op)}); err == nil {
					acked[op] = true
					wins++
				}
				return nil
			}})
			var l log
			o2 := options(&l)
			o2.Writer = o.Writer
			octx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			sh2, err := recovery.Open(octx, successor.Container, shard, 2, "a2", o2)
			if err != nil {
				t.Fatalf("the successor's open against a writer that always wins (%d wins): %v", wins, err)
			}
			t.Cleanup(func() { _ = sh2.Writer.Close(context.Background()) })
			if wins < 3 {
				t.Fatalf("the writer won the race %d times: the chase was not exercised", wins)
			}
			got := l.set()
			for op := range acked {
				if !got[op] {
					t.Fatalf("acknowledged op %q is not in the restore point (%d acked, %d restored)", op, len(acked), len(got))
				}
			}
			if _, err := sh1.Writer.Append(ctx, [][]byte{[]byte("late")}); !errors.Is(err, translog.ErrFenced) {
				t.Fatalf("the old writer after the successor's open: %v, want fenced", err)
			}
		})
	}
}
