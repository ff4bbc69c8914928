package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/translog"
)

const benchBarrierSummary = "read barriers per fencing mode: store round trips per barrier and barriers/s, one reader and many at once"

func runBenchBarrier(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench barrier", stdout)
	latency := addLatencyFlag(fs)
	readers := fs.Int("readers", 64, "concurrent readers, each calling Barrier in a closed loop")
	duration := fs.Duration("duration", 3*time.Second, "run time per mode and reader count")
	modes := fs.String("modes", "per_sync,create_only,observe,lease", "comma-separated fencing modes")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *readers < 1 || *duration <= 0 || *latency < 0 {
		return fmt.Errorf("%w: bench barrier takes flags only; --readers and --duration positive", errUsage)
	}
	var rows []barrierRow
	for _, name := range strings.Split(*modes, ",") {
		mode, err := parseMode(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		for _, n := range []int{1, *readers} {
			fmt.Fprintf(stderr, "running %s with %d readers for %v...\n", name, n, *duration)
			r, err := barrierOnce(ctx, mode, n, *latency, *duration)
			if err != nil {
				return fmt.Errorf("bench barrier %s: %w", name, err)
			}
			r.mode = strings.TrimSpace(name)
			rows = append(rows, r)
		}
	}
	fmt.Fprintf(stdout, "store latency %v per request (mem store with injected latency); a light appender (one append every 100 ms) keeps each shard active\n\n", *latency)
	fmt.Fprintln(stdout, "| mode | readers | barriers/s | store reads per barrier | answered locally | p50 | p99 |")
	fmt.Fprintln(stdout, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(stdout, "| %s | %d | %.0f | %.3f | %.0f%% | %v | %v |\n", r.mode, r.readers, r.rate, r.readsPer, 100*r.local, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))
	}
	fmt.Fprintln(stdout, "\ntargets: one store round trip per barrier, shared by concurrent barriers (per_sync, create_only, observe); none inside the lease (lease)")
	return nil
}

type barrierRow struct {
	mode      string
	readers   int
	rate      float64
	readsPer  float64
	local     float64
	p50, p99  time.Duration
	barriers  int64
	fenceGets int64
}

// barrierOnce opens a shard in mode on an in-process sidecar over a store
// with latency, and runs readers barriers in closed loops for d.
func barrierOnce(ctx context.Context, mode translog.FencingMode, readers int, latency, d time.Duration) (barrierRow, error) {
	r := barrierRow{readers: readers}
	store := faulty.New(mem.New(), 1)
	if latency > 0 {
		store.MustAdd(faulty.Rule{Latency: faulty.Fixed(latency)})
	}
	var gets atomic.Int64
	counting := atomic.Bool{}
	store.SetHooks(faulty.Hooks{Before: func(_ context.Context, req faulty.Request) error {
		if counting.Load() && req.Op == blobstore.OpGet && strings.Contains(req.Key, layout.FenceDir) {
			gets.Add(1)
		}
		return nil
	}})
	srv, err := sidecar.New(ctx, store.Container, sidecar.Options{Node: "bench"})
	if err != nil {
		return r, err
	}
	defer srv.Shutdown(context.Background())
	settings := sidecar.Settings{Mode: mode}
	if mode == translog.Lease {
		settings.LeaseInterval = time.Second
	}
	if _, err := srv.OpenWith(ctx, "b", 1, "bench", settings, sidecar.OpenOptions{}, nil); err != nil {
		return r, err
	}
	if _, err := srv.Append(ctx, "b", [][]byte{[]byte("x")}, 0); err != nil {
		return r, err
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { // the light appender
		for rctx.Err() == nil {
			_, _ = srv.Append(rctx, "b", [][]byte{[]byte("x")}, 0)
			select {
			case <-rctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	var mu sync.Mutex
	var lat []time.Duration
	var local int64
	var firstErr error
	counting.Store(true)
	start := time.Now()
	for range readers {
		wg.Go(func() {
			var mine []time.Duration
			var loc int64
			for rctx.Err() == nil {
				t0 := time.Now()
				res, err := srv.Barrier(rctx, "b", 1)
				if err != nil {
					if rctx.Err() == nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					break
				}
				mine = append(mine, time.Since(t0))
				if res.Local {
					loc++
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			local += loc
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	counting.Store(false)
	if firstErr != nil {
		return r, firstErr
	}
	if len(lat) == 0 {
		return r, fmt.Errorf("no barrier completed")
	}
	slices.Sort(lat)
	r.barriers, r.fenceGets = int64(len(lat)), gets.Load()
	r.rate = float64(len(lat)) / elapsed.Seconds()
	r.readsPer = float64(r.fenceGets) / float64(len(lat))
	r.local = float64(local) / float64(len(lat))
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r, nil
}
