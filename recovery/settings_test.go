package recovery_test

import (
	"context"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/translog"
)

// An unfenced shard opens through recovery (the writer takes its identity
// from the claim) and a later unfenced term replays what it wrote.
func TestUnfencedShardOpensAppendsAndReplays(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	o := options(nil)
	o.Writer.FencingDisabled = true
	sh1 := open(t, store, 1, "a1", o)
	ack := appendOps(t, sh1.Writer, "x", "y")
	closeW(t, sh1.Writer)
	var got []string
	err := translog.NewReader(store, shard).Iterate(ctx, 1, ack.Gen, ack.Gen, func(b translog.Batch) error {
		for _, op := range b.Ops {
			got = append(got, string(op))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Fatalf("read back %q, want [x y]", got)
	}

	var l log
	o2 := options(&l)
	o2.Writer.FencingDisabled = true
	sh2 := open(t, store, 2, "a2", o2)
	appendOps(t, sh2.Writer, "z")
	if r := l.set(); !r["x"] || !r["y"] || len(r) != 2 {
		t.Errorf("term 2 replayed %v, want x and y", l.ops)
	}
}
