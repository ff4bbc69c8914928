// Package recoverybench measures opening a shard under a new term with
// recovery.Open: the takeover (claim, seal, open) in store requests and
// round trips against a store with a fixed injected latency, and the
// hydration and replay of a large shard against a plain parallel GET of the
// same bytes. `shardfence bench seal` and `shardfence bench recovery` run
// it.
package recoverybench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// TakeoverConfig is one takeover bench run.
type TakeoverConfig struct {
	// Latency is added to every store request (one injected round trip).
	Latency time.Duration
	// Gens is how many generations the predecessor wrote since its
	// restore point; OpSize the bytes of its one op per generation.
	Gens, OpSize int
	// Runs per scenario; the table shows the median.
	Runs int
	// Trace, when set, receives every request of each measured Open with
	// its start time.
	Trace io.Writer
}

// row is one measured recovery.Open.
type row struct {
	scenario string
	elapsed  time.Duration // the median run's
	best     time.Duration
	req      metered.Snapshot
	path     []sent // the best run's requests, in the order sent
}

// sent is one request of the measured Open, when it was sent.
type sent struct {
	at  time.Duration
	op  string
	key string
}

// claimantKey marks the measured Open's context, so the critical path
// leaves out the requests of a predecessor still appending.
type claimantKey struct{}

// RunTakeover measures recovery.Open from claim start to an open writer
// for a new shard and three takeovers, and writes the table to out.
func RunTakeover(ctx context.Context, cfg TakeoverConfig, out io.Writer) error {
	scenarios := []struct {
		name  string
		setup func(ctx context.Context, store *blobstore.Container) (stop func(), err error)
		term  int64
	}{
		{"new shard", func(context.Context, *blobstore.Container) (func(), error) { return func() {}, nil }, 1},
		{"takeover, predecessor closed", func(ctx context.Context, store *blobstore.Container) (func(), error) {
			return sealPredecessor(ctx, store, cfg.Gens, cfg.OpSize, false)
		}, 2},
		{"takeover, predecessor appending", func(ctx context.Context, store *blobstore.Container) (func(), error) {
			return sealPredecessor(ctx, store, cfg.Gens, cfg.OpSize, true)
		}, 2},
		{"takeover, with checkpoint", func(ctx context.Context, store *blobstore.Container) (func(), error) {
			return sealPredecessor(ctx, store, cfg.Gens, cfg.OpSize, false)
		}, 2},
	}
	var rows []row
	for i, sc := range scenarios {
		var samples []row
		for range cfg.Runs {
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
				if err := publishTiny(ctx, m.Container, dir, int64(cfg.Gens)/2); err != nil {
					return err
				}
			}
			f.MustAdd(faulty.Rule{Latency: faulty.Fixed(cfg.Latency)})
			before := m.Snapshot()
			if cfg.Trace != nil {
				fmt.Fprintf(cfg.Trace, "-- %s\n", sc.name)
			}
			var mu sync.Mutex
			var path []sent
			start := time.Now()
			f.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
				at := time.Since(start)
				if cfg.Trace != nil {
					fmt.Fprintf(cfg.Trace, "%8.1f ms  %-14s %s\n", float64(at.Microseconds())/1000, r.Op, r.Key)
				}
				if ctx.Value(claimantKey{}) != nil {
					mu.Lock()
					path = append(path, sent{at: at, op: fmt.Sprint(r.Op), key: r.Key})
					mu.Unlock()
				}
				return nil
			}})
			o := recovery.Options{Dir: dir, Writer: translog.Options{}}
			sh, err := recovery.Open(context.WithValue(ctx, claimantKey{}, true), m.Container, shard, sc.term, fmt.Sprintf("a%d", sc.term), o)
			elapsed := time.Since(start)
			after := m.Snapshot()
			if cfg.Trace != nil {
				fmt.Fprintf(cfg.Trace, "%8.1f ms  open returned\n", float64(elapsed.Microseconds())/1000)
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
			mu.Lock()
			samples = append(samples, row{scenario: sc.name, elapsed: elapsed, req: after.Sub(before), path: path})
			mu.Unlock()
		}
		rows = append(rows, median(samples))
	}
	writeTakeoverTable(out, cfg.Latency, cfg.Gens, rows)
	return nil
}

// shard is the shard every bench of this package writes.
const shard = "bench"

// sealPredecessor opens term 1 and writes gens generations; with live, it
// keeps appending until stop is called (it is fenced by then).
func sealPredecessor(ctx context.Context, store *blobstore.Container, gens, opSize int, live bool) (func(), error) {
	o := recovery.Options{Clock: clock.System()}
	sh, err := recovery.Open(ctx, store, shard, 1, "a1", o)
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
	in, err := fence.NewInstance(store, shard, "a1")
	if err != nil {
		return err
	}
	obj, err := store.Get(ctx, layout.FenceKey(1))
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

func median(s []row) row {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].elapsed < s[j-1].elapsed; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	r := s[len(s)/2]
	r.best, r.path = s[0].elapsed, s[0].path
	return r
}

func writeTakeoverTable(out io.Writer, latency time.Duration, gens int, rows []row) {
	fmt.Fprintf(out, "recovery.Open from claim start to an open writer; %v per request; predecessor wrote %d generations\n\n", latency, gens)
	fmt.Fprintln(out, "| scenario | requests | LIST | GET | create | CAS | DELETE | PUT | elapsed (median) | sequential (median) | sequential (best) |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %d | %d | %d | %d | %d | %d | %d | %.1f ms | %s | %s |\n", r.scenario, r.req.Requests(), r.req.List, r.req.Get,
			r.req.CreateIfAbsent, r.req.CompareAndSwap, r.req.Delete, r.req.Put, float64(r.elapsed.Microseconds())/1000,
			sequential(r.elapsed, latency), sequential(r.best, latency))
	}
	if latency <= 0 {
		return
	}
	fmt.Fprintf(out, "\ncritical path of each best run: the measured Open's requests by round trip (a request sent %v or more after the round's first starts the next)\n", latency*3/4)
	worst, most := 0.0, 0
	for _, r := range rows {
		rounds := roundsOf(r.path, latency*3/4)
		fmt.Fprintf(out, "\n%s: %d round trips\n", r.scenario, len(rounds))
		for i, rd := range rounds {
			fmt.Fprintf(out, "  %2d %7.1f ms  %s\n", i+1, float64(rd.at.Microseconds())/1000, rd.what)
		}
		worst = max(worst, float64(r.best)/float64(latency))
		most = max(most, len(rounds))
	}
	verdict := "met"
	if most > takeoverRoundsTarget {
		verdict = "MISSED"
	}
	fmt.Fprintf(out, "\ntarget <= %d sequential round trips from claim start to open (every scenario, best run's critical path): %d at most, %.1f x the latency (%s)\n", takeoverRoundsTarget, most, worst, verdict)
}

// takeoverRoundsTarget is issue 33's bound on a takeover's sequential
// round trips (docs/BENCHMARKS.md, "Takeover latency (seal)").
const takeoverRoundsTarget = 5

// round is one round trip of a critical path: when it started and what
// it sent.
type round struct {
	at   time.Duration
	what string
}

// roundsOf groups requests into round trips: a request sent gap or more
// after the current round's first request starts a new one. Requests are
// named by operation and key family (the key up to its first "__"), with
// a count when a round sends several of one kind.
func roundsOf(path []sent, gap time.Duration) []round {
	sort.SliceStable(path, func(i, j int) bool { return path[i].at < path[j].at })
	var out []round
	var cur []sent
	flush := func() {
		if len(cur) == 0 {
			return
		}
		counts := map[string]int{}
		var order []string
		for _, r := range cur {
			k := r.key
			if i := strings.Index(k, "__"); i >= 0 {
				k = k[:i+2] + "…"
			}
			name := r.op + " " + k
			if counts[name] == 0 {
				order = append(order, name)
			}
			counts[name]++
		}
		parts := make([]string, len(order))
		for i, name := range order {
			parts[i] = name
			if n := counts[name]; n > 1 {
				parts[i] = fmt.Sprintf("%s x%d", name, n)
			}
		}
		out = append(out, round{at: cur[0].at, what: strings.Join(parts, ", ")})
		cur = nil
	}
	for _, r := range path {
		if len(cur) > 0 && r.at-cur[0].at >= gap {
			flush()
		}
		cur = append(cur, r)
	}
	flush()
	return out
}

// sequential is the critical path in round trips: elapsed over the
// injected latency (local work is negligible next to it).
func sequential(elapsed, latency time.Duration) string {
	if latency <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(elapsed)/float64(latency))
}
