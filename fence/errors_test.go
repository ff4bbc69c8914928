package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

func TestErrorsNameShardKeyAndNextStep(t *testing.T) {
	fenced := error(&FencedError{Shard: "idx/3", Key: Key(4), Term: 4, Allocation: "a1", Successor: 5, Reason: "fence key deleted"})
	if !errors.Is(fenced, ErrFenced) || errors.Is(fenced, ErrCorruptBody) {
		t.Fatal("FencedError must match ErrFenced and nothing else")
	}
	if s, ok := SuccessorTerm(fenced); !ok || s != 5 {
		t.Fatalf("SuccessorTerm = %d, %v", s, ok)
	}
	if _, ok := SuccessorTerm(&FencedError{}); ok {
		t.Fatal("an unknown successor must not be reported")
	}
	retry := error(&Error{Op: "Advance", Shard: "idx/3", Key: Key(4), Term: 4, Err: blobstore.Unavailable(errors.New("503"))})
	body := error(&BodyError{Shard: "idx/3", Key: Key(4), Err: ErrForeignShard, Detail: "names shard \"x\""})
	for _, c := range []struct {
		err  error
		want []string
	}{
		{fenced, []string{`"idx/3"`, Key(4), "successor term 5", "must stop acknowledging"}},
		{retry, []string{`"idx/3"`, Key(4), "Advance", "retry the operation"}},
		{body, []string{`"idx/3"`, Key(4), "body of another shard", "never overwrite"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%q lacks %q", c.err.Error(), w)
			}
		}
	}
	if !blobstore.IsRetryable(retry) || !errors.Is(body, ErrForeignShard) {
		t.Fatal("wrapped errors must stay matchable")
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Attempts: 4}
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
	clk := NewAutoClock()
	calls := 0
	err := Retry(context.Background(), clk, b, func(context.Context) error {
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
	err = Retry(context.Background(), clk, b, func(context.Context) error {
		calls++
		return blobstore.ErrPreconditionFailed
	})
	if calls != 1 || !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("a definite answer must not be retried: %d calls, %v", calls, err)
	}
}
