package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

const benchSealSummary = "takeover latency: store requests and ms from claim start to an open writer"

// sealRow is one measured recovery.Open.
type sealRow struct {
	scenario string
	elapsed  time.Duration // the median run's
	best     time.Duration
	req      metered.Snapshot
}

func runBenchSeal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench seal", stderr)
	latency := fs.Duration("latency", 10*time.Millisecond, "delay added to every store request (one injected round trip)")
	gens := fs.Int("gens", 20, "generations the predecessor wrote since its restore point")
	opSize := fs.Int("op-size", 256, "bytes per op (one op per generation)")
	runs := fs.Int("runs", 3, "runs per scenario (the table shows the median)")
	trace := fs.Bool("trace", false, "print every request of each measured Open with its start time to stderr")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *gens < 1 || *runs < 1 || *latency < 0 {
		return fmt.Errorf("%w: want -gens >= 1, -runs >= 1, -latency >= 0 and no arguments", errUsage)
	}
	scenarios := []struct {
		name  string
		setup func(ctx context.Context, store *blobstore.Container) (stop func(), err error)
		term  int64
	}{
		{"new shard", func(context.Context, *blobstore.Container) (func(), error) { return func() {}, nil }, 1},
		{"takeover, predecessor closed", func(ctx context.Context, store *blobstore.Container) (func(), error) {
			return sealPredecessor(ctx, store, *gens, *opSize, false)
		}, 2},
		{"takeover, predecessor appending", func(ctx context.Context, store *blobstore.Container) (func(), error) {
			return sealPredecessor(ctx, store, *gens, *opSize, true)
		}, 2},
		{"takeover, with checkpoint", func(ctx context.Context, store *blobstore.Container) (func(), error) {
			return sealPredecessor(ctx, store, *gens, *opSize, false)
		}, 2},
	}
	var rows []sealRow
	for i, sc := range scenarios {
		var samples []sealRow
		for range *runs {
			f := faulty.New(mem.New(), 1)
			m := metered.New(f.Container, "bench")
			stop, err := sc.setup(ctx, m.Container)
			if err != nil {
				return fmt.Errorf("bench seal %s: setup: %w", sc.name, err)
			}
			dir := ""
			if i == 3 {
				if dir, err = os.MkdirTemp("", "shardfence-bench-seal-"); err != nil {
					return err
				}
				if err := publishTiny(ctx, m.Container, dir, int64(*gens)/2); err != nil {
					return err
				}
			}
			f.MustAdd(faulty.Rule{Latency: faulty.Fixed(*latency)})
			before := m.Snapshot()
			start := time.Now()
			if *trace {
				fmt.Fprintf(stderr, "-- %s\n", sc.name)
				f.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
					fmt.Fprintf(stderr, "%8.1f ms  %-14s %s\n", float64(time.Since(start).Microseconds())/1000, r.Op, r.Key)
					return nil
				}})
			}
			o := recovery.Options{Dir: dir, Writer: translog.Options{}}
			sh, err := recovery.Open(ctx, m.Container, benchShard, sc.term, fmt.Sprintf("a%d", sc.term), o)
			elapsed := time.Since(start)
			after := m.Snapshot()
			if *trace {
				fmt.Fprintf(stderr, "%8.1f ms  open returned\n", float64(elapsed.Microseconds())/1000)
			}
			f.Clear()
			f.SetHooks(faulty.Hooks{})
			stop()
			if dir != "" {
				_ = os.RemoveAll(dir)
			}
			if err != nil {
				return fmt.Errorf("bench seal %s: %w", sc.name, err)
			}
			_ = sh.Writer.Close(ctx)
			samples = append(samples, sealRow{scenario: sc.name, elapsed: elapsed, req: after.Sub(before)})
		}
		rows = append(rows, median(samples))
	}
	writeSealTable(stdout, *latency, *gens, rows)
	return nil
}

const benchShard = "bench"

// sealPredecessor opens term 1 and writes gens generations; with live, it
// keeps appending until stop is called (it is fenced by then).
func sealPredecessor(ctx context.Context, store *blobstore.Container, gens, opSize int, live bool) (func(), error) {
	o := recovery.Options{Clock: fence.SystemClock()}
	sh, err := recovery.Open(ctx, store, benchShard, 1, "a1", o)
	if err != nil {
		return nil, err
	}
	op := make([]byte, opSize)
	for range gens {
		if _, err := sh.Writer.Append(ctx, [][]byte{op}); err != nil {
			return nil, err
		}
	}
	if !live {
		return func() {}, sh.Writer.Close(ctx)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := sh.Writer.Append(ctx, [][]byte{op}); err != nil {
				return
			}
		}
	})
	return func() { close(done); wg.Wait(); _ = sh.Writer.Close(ctx) }, nil
}

// publishTiny publishes a one-file checkpoint of the predecessor (term 1)
// at gen, through a chain adopted by the same allocation.
func publishTiny(ctx context.Context, store *blobstore.Container, dir string, gen int64) error {
	in, err := fence.NewInstance(store, benchShard, "a1")
	if err != nil {
		return err
	}
	obj, err := store.Get(ctx, fence.Key(1))
	if err != nil {
		return err
	}
	chain, err := in.Accept(ctx, 1, obj.Token)
	if err != nil {
		return err
	}
	p := dir + "/state"
	if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
		return err
	}
	_, err = seal.PublishCheckpoint(ctx, store, chain, gen, []seal.LocalFile{{Name: "state", Path: p}}, seal.PublishOptions{NextSeqNo: gen})
	return err
}

func median(s []sealRow) sealRow {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].elapsed < s[j-1].elapsed; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	r := s[len(s)/2]
	r.best = s[0].elapsed
	return r
}

func writeSealTable(out io.Writer, latency time.Duration, gens int, rows []sealRow) {
	fmt.Fprintf(out, "recovery.Open from claim start to an open writer; %v per request; predecessor wrote %d generations\n\n", latency, gens)
	fmt.Fprintln(out, "| scenario | requests | LIST | GET | create | CAS | DELETE | PUT | elapsed (median) | sequential (median) | sequential (best) |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %d | %d | %d | %d | %d | %d | %d | %.1f ms | %s | %s |\n", r.scenario, r.req.Requests(), r.req.List, r.req.Get,
			r.req.CreateIfAbsent, r.req.CompareAndSwap, r.req.Delete, r.req.Put, float64(r.elapsed.Microseconds())/1000,
			sequential(r.elapsed, latency), sequential(r.best, latency))
	}
	for _, r := range rows {
		if r.scenario != "takeover, predecessor closed" || latency <= 0 {
			continue
		}
		n := float64(r.best) / float64(latency)
		verdict := "met"
		if math.Round(n) > 8 {
			verdict = "MISSED"
		}
		fmt.Fprintf(out, "\ntarget <= 8 sequential requests from claim start to open (takeover, best run): %.1f (%s)\n", n, verdict)
	}
}

// sequential is the critical path in round trips: elapsed over the
// injected latency (local work is negligible next to it).
func sequential(elapsed, latency time.Duration) string {
	if latency <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(elapsed)/float64(latency))
}
