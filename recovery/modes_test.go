package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// A shard's fencing changes only at a new term: unfenced -> observe ->
// per_sync -> create_only -> unfenced, each step a rewrite that claims its
// own term. After every step the writer of the previous mode is still
// alive and appending (a zombie); whatever it acknowledged, before or after
// the rewrite, is in the next open's restore point, whose seal runs the
// same poison rule whatever the predecessor's mode, and the zombie
// acknowledges nothing once that open returned. An open asking for the
// other side of fenced/unfenced than the stored mode is refused.
func TestFencingModeChangesAtTermBoundaries(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	modes := []struct {
		name string
		f    seal.Fencing
	}{
		{"unfenced", seal.Fencing{Disabled: true}},
		{"observe", seal.Fencing{Mode: translog.Observe}},
		{"per_sync", seal.Fencing{Mode: translog.PerSync}},
		{"create_only", seal.Fencing{Mode: translog.CreateOnly}},
		{"unfenced again", seal.Fencing{Disabled: true}},
	}
	var acked []string
	app := func(w *translog.Writer, op string) error {
		_, err := w.Append(ctx, [][]byte{[]byte(op)})
		if err == nil {
			acked = append(acked, op)
		}
		return err
	}
	var zombie *translog.Writer
	term := int64(1)
	for i, m := range modes {
		if i > 0 {
			// The rewrite claims its own term; the zombie of the previous
			// mode appends after it too.
			res, err := recovery.RewriteFencing(ctx, store, shard, term, "admin", m.f, recovery.RewriteOptions{Clock: clock.NewAuto(), Backoff: fastRetry})
			if err != nil {
				t.Fatalf("rewrite to %s: %v", m.name, err)
			}
			if res.To.String() != m.f.String() || res.From.String() != modes[i-1].f.String() {
				t.Fatalf("rewrite reported %v -> %v, want %v -> %v", res.From, res.To, modes[i-1].f, m.f)
			}
			term++
			_ = app(zombie, fmt.Sprintf("%s-after-rewrite", modes[i-1].name)) // acked or not: either is safe
			wrong := options(nil)
			wrong.Writer.FencingDisabled = !m.f.Disabled
			if _, err := recovery.Open(ctx, store, shard, term, "wrong", wrong); !errors.Is(err, seal.ErrFencingMismatch) {
				t.Fatalf("open asking for fencing disabled=%v on a %s shard: %v, want ErrFencingMismatch", wrong.Writer.FencingDisabled, m.name, err)
			}
		}
		var l log
		o := options(&l)
		o.Writer = m.f.Apply(o.Writer)
		sh := open(t, store, term, fmt.Sprintf("a%d", term), o)
		got := l.set()
		for _, op := range acked {
			if !got[op] {
				t.Fatalf("term %d (%s): acknowledged op %q is not in the restore point %v", term, m.name, op, l.ops)
			}
		}
		if zombie != nil {
			if err := app(zombie, "zombie-after-open"); err == nil {
				t.Fatalf("the %s writer acknowledged an append after term %d opened", modes[i-1].name, term)
			}
		}
		for j := range 3 {
			if err := app(sh.Writer, fmt.Sprintf("%s-%d", m.name, j)); err != nil {
				t.Fatalf("term %d (%s): %v", term, m.name, err)
			}
		}
		zombie = sh.Writer
		term++
	}
	if len(acked) < 3*len(modes) {
		t.Fatalf("only %d ops acknowledged", len(acked))
	}
}
