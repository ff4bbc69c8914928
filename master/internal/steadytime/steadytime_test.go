package steadytime

import (
	"testing"
	"time"
)

func TestAddSaturates(t *testing.T) {
	for _, c := range []struct {
		t    Time
		d    time.Duration
		want Time
	}{
		{5, 3, 8},
		{5, -3, 2},
		{Time(1<<63 - 10), 100, Time(1<<63 - 1)},
	} {
		if got := c.t.Add(c.d); got != c.want {
			t.Errorf("%d.Add(%v) = %d, want %d", c.t, c.d, got, c.want)
		}
	}
}

// A wall clock step moves neither steady reading; Advance moves both.
func TestFakeClockWallIsIndependent(t *testing.T) {
	c := NewFake(time.Unix(1e9, 0))
	s := c.Steady()
	c.SetWall(time.Unix(1, 0))
	if c.Steady() != s || !c.Wall().Equal(time.Unix(1, 0)) {
		t.Fatalf("after a wall step: steady %d (was %d), wall %v", c.Steady(), s, c.Wall())
	}
	c.Advance(time.Second)
	if ToDuration(c.Steady()-s) != time.Second || !c.Wall().Equal(time.Unix(2, 0)) {
		t.Fatalf("after Advance: steady +%v, wall %v", ToDuration(c.Steady()-s), c.Wall())
	}
	if r := NewReal(); r.Steady() <= 0 {
		t.Fatalf("real steady reading %d", r.Steady())
	}
}
