package storebench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestOpsByName(t *testing.T) {
	ops, err := OpsByName([]string{"cas", " Get"})
	if err != nil || len(ops) != 2 || ops[0].Name() != "CAS" || ops[1].Name() != "Get" {
		t.Fatalf("%v, %v", ops, err)
	}
	if _, err := OpsByName([]string{"Get", "Frobnicate"}); err == nil || !strings.Contains(err.Error(), "Frobnicate") {
		t.Fatalf("unknown operation: %v", err)
	}
}

// Every operation runs against a real (in-memory) store, a CAS chain never
// fails, and the scratch keys are gone afterwards.
func TestRunMeasuresEveryOperationAndCleansUp(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	var out, log strings.Builder
	cfg := Config{Duration: 10 * time.Millisecond, Clients: []int{1, 3}, Size: 64}
	if err := Run(ctx, store, cfg, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, op := range Operations() {
		if n := strings.Count(out.String(), "\n"+op.Name()+" "); n != 2 {
			t.Errorf("%d rows for %s, want one per client level:\n%s", n, op.Name(), out.String())
		}
	}
	if left, err := blobstore.ListAll(ctx, store, ""); err != nil || len(left) != 0 {
		t.Errorf("%d keys left after the run (%v)", len(left), err)
	}
}
