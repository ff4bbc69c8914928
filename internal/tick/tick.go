// Package tick is the one periodic loop of the processes: a step run every
// interval and whenever it is kicked, until its context ends.
package tick

import (
	"context"
	"time"
)

// Every runs step every d, and at once whenever kick receives (a nil kick
// never does), until ctx is done; it returns then. step runs on the
// caller's goroutine, so a slow step delays the next: ticks that fall due
// meanwhile collapse into one, as time.Ticker drops them. A step that
// cancels ctx ends the loop before the next.
func Every(ctx context.Context, d time.Duration, kick <-chan struct{}, step func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
		if ctx.Err() != nil {
			return
		}
		step()
	}
}

// Kick wakes a loop that waits on ch (a channel of capacity one) without
// blocking: a kick still pending covers this one.
func Kick(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
