package defaults

import (
	"testing"
	"time"
)

func TestPositiveAndZero(t *testing.T) {
	for _, c := range []struct {
		in, positive, zero time.Duration
	}{
		{in: 0, positive: time.Second, zero: time.Second},
		{in: -1, positive: time.Second, zero: -1},
		{in: 5 * time.Millisecond, positive: 5 * time.Millisecond, zero: 5 * time.Millisecond},
	} {
		p, z := c.in, c.in
		Positive(&p, time.Second)
		Zero(&z, time.Second)
		if p != c.positive || z != c.zero {
			t.Errorf("in %v: Positive gave %v (want %v), Zero gave %v (want %v)", c.in, p, c.positive, z, c.zero)
		}
	}
	n := 0
	Positive(&n, 64)
	if n != 64 {
		t.Errorf("Positive on an unset int gave %d, want 64", n)
	}
}
