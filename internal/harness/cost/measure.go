package cost

import (
	"context"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/translog/tlbench"
)

// benchMode is the translog bench's configuration of m.
func benchMode(m Mode) (tlbench.Mode, bool) {
	name := string(m)
	if m == PerSync {
		name = "concurrent" // per_sync in the concurrent ack order, the default
	}
	return tlbench.ModeByName(name)
}

// Measure runs the real translog writer in mode m on an in-memory store
// behind the metered wrapper (the bench `shardfence bench translog` runs),
// for appends appends from 8 appenders with latency added to every
// request, and returns the requests per sync it counted: writes and LISTs
// at the PUT price, GETs at the GET price. Lease mode's CAS is left out:
// a run shorter than the lease interval cannot show its rate, which Cost
// takes from the interval.
func Measure(ctx context.Context, m Mode, appends int, latency time.Duration) (Requests, int64, error) {
	bm, ok := benchMode(m)
	if !ok {
		return Requests{}, 0, fmt.Errorf("cost: no bench mode for %s", m)
	}
	r, err := tlbench.Run(ctx, tlbench.Config{Latency: latency, Appenders: 8, OpSize: 64, Appends: appends, Seed: 1}, bm)
	if err != nil {
		return Requests{}, 0, fmt.Errorf("cost: measuring %s: %w", m, err)
	}
	put := r.Put + r.Create + r.CAS + r.List
	if m == Lease {
		put = r.Put + r.Create + r.List
	}
	return Requests{Put: put, Get: r.Get, Source: fmt.Sprintf("measured: %d syncs of the translog writer, metered store", r.Syncs)}, r.Syncs, nil
}
