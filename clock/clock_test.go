package clock

import (
	"context"
	"testing"
	"time"
)

func TestFakeClock(t *testing.T) {
	clk := NewFake()
	ch := clk.After(time.Second)
	if clk.Waiters() != 1 {
		t.Fatalf("waiters %d", clk.Waiters())
	}
	clk.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	clk.Advance(time.Millisecond)
	<-ch
	if clk.Now() != int64(time.Second) {
		t.Fatalf("now %d", clk.Now())
	}
	auto := NewAuto()
	if err := Sleep(context.Background(), auto, time.Minute); err != nil || auto.Now() != int64(time.Minute) {
		t.Fatalf("auto clock: %v, now %d", err, auto.Now())
	}
	sys := System()
	a := sys.Now()
	<-sys.After(time.Millisecond)
	if sys.Now()-a < int64(time.Millisecond) {
		t.Fatal("system clock did not move")
	}
}
