package translog

import (
	"errors"
	"fmt"
	"testing"
)

// A window over whole generations: the batches before From are dropped,
// the first is cut at From, the last at Max, and the iteration ends once
// the window is full.
func TestSeqWindow(t *testing.T) {
	batch := func(first int64, n int) Batch {
		b := Batch{FirstSeqNo: first}
		for i := range n {
			b.Ops = append(b.Ops, []byte(fmt.Sprint(first+int64(i))))
		}
		return b
	}
	// Generations of 3, 2 and 4 ops: sequence numbers 0..2, 3..4, 5..8.
	gens := []Batch{batch(0, 3), batch(3, 2), batch(5, 4)}
	for _, c := range []struct {
		from, max int64
		want      string
		full      bool
	}{
		{0, 0, "[0 1 2][3 4][5 6 7 8]", false},
		{1, 0, "[1 2][3 4][5 6 7 8]", false},
		{3, 0, "[3 4][5 6 7 8]", false},
		{4, 3, "[4][5 6]", true},
		{0, 3, "[0 1 2]", true},
		{8, 5, "[8]", false},
		{9, 0, "", false},
	} {
		w := &SeqWindow{From: c.from, Max: c.max}
		got := ""
		fn := w.Filter(func(b Batch) error {
			got += fmt.Sprintf("%s", b.Ops)
			return nil
		})
		var err error
		for _, b := range gens {
			if err = fn(b); err != nil {
				break
			}
		}
		if got != c.want || errors.Is(err, ErrWindowFull) != c.full {
			t.Errorf("from %d max %d: read %s (full %v), want %s (full %v)", c.from, c.max, got, err, c.want, c.full)
		}
	}
}
