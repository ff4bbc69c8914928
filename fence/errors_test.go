package fence

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
)

func TestErrorsNameShardKeyAndNextStep(t *testing.T) {
	fenced := error(&FencedError{Shard: "idx/3", Key: layout.FenceKey(4), Term: 4, Allocation: "a1", Successor: 5, Reason: "fence key deleted"})
	if !errors.Is(fenced, ErrFenced) || errors.Is(fenced, ErrCorruptBody) {
		t.Fatal("FencedError must match ErrFenced and nothing else")
	}
	if s, ok := SuccessorTerm(fenced); !ok || s != 5 {
		t.Fatalf("SuccessorTerm = %d, %v", s, ok)
	}
	if _, ok := SuccessorTerm(&FencedError{}); ok {
		t.Fatal("an unknown successor must not be reported")
	}
	retry := error(&Error{Op: "Advance", Shard: "idx/3", Key: layout.FenceKey(4), Term: 4, Err: blobstore.Unavailable(errors.New("503"))})
	body := error(&BodyError{Shard: "idx/3", Key: layout.FenceKey(4), Err: ErrForeignShard, Detail: "names shard \"x\""})
	for _, c := range []struct {
		err  error
		want []string
	}{
		{fenced, []string{`"idx/3"`, layout.FenceKey(4), "successor term 5", "must stop acknowledging"}},
		{retry, []string{`"idx/3"`, layout.FenceKey(4), "Advance", "retry the operation"}},
		{body, []string{`"idx/3"`, layout.FenceKey(4), "body of another shard", "never overwrite"}},
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
