package backoff

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
)

func TestBackoff(t *testing.T) {
	b := Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Attempts: 4}
	var got []time.Duration
	for a := 1; a <= 5; a++ {
		got = append(got, b.Delay(a))
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v", got)
		}
	}
	clk := clock.NewAuto()
	calls := 0
	err := Do(context.Background(), clk, b, blobstore.IsRetryable, func(context.Context) error {
		calls++
		return blobstore.ErrConflict
	})
	if calls != 4 || !errors.Is(err, blobstore.ErrConflict) {
		t.Fatalf("%d calls, %v", calls, err)
	}
	if clk.Now() != int64(70*time.Millisecond) {
		t.Fatalf("slept %v, want 70ms", time.Duration(clk.Now()))
	}
	calls = 0
	err = Do(context.Background(), clk, b, blobstore.IsRetryable, func(context.Context) error {
		calls++
		return blobstore.ErrPreconditionFailed
	})
	if calls != 1 || !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("a definite answer must not be retried: %d calls, %v", calls, err)
	}
}

func TestOrFillsOnlyTheZeroBackoff(t *testing.T) {
	custom := Policy{Max: time.Second}
	if got := custom.Or(Store()); got != custom {
		t.Fatalf("a set backoff was replaced: %+v", got)
	}
	if got := (Policy{}).Or(Store()); got != Store() {
		t.Fatalf("the zero backoff became %+v", got)
	}
}
