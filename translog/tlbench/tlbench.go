// Package tlbench measures the fenced translog against a store with a fixed
// injected round trip: ack latency, throughput and store requests per sync,
// for the concurrent and sequenced ack orders and the unfenced baseline. The
// `shardfence bench translog` command and the package's Go benchmark both
// run it.
package tlbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// Mode is one writer configuration to measure.
type Mode struct {
	Name        string
	AckOrder    translog.AckOrder
	Fenced      bool
	FencingMode translog.FencingMode
}

// Modes are the configurations the bench knows, by name.
func Modes() []Mode {
	return []Mode{
		{Name: "concurrent", AckOrder: translog.Concurrent, Fenced: true},
		{Name: "sequenced", AckOrder: translog.Sequenced, Fenced: true},
		{Name: "unfenced", Fenced: false},
		{Name: "lease", AckOrder: translog.Concurrent, Fenced: true, FencingMode: translog.Lease},
		{Name: "create_only", Fenced: true, FencingMode: translog.CreateOnly},
		{Name: "observe", AckOrder: translog.Concurrent, Fenced: true, FencingMode: translog.Observe},
	}
}

// ModeByName finds a mode of Modes.
func ModeByName(name string) (Mode, bool) {
	for _, m := range Modes() {
		if m.Name == name {
			return m, true
		}
	}
	return Mode{}, false
}

// Config is one bench run.
type Config struct {
	Latency   time.Duration // added to every store request
	Appenders int           // concurrent appenders, each in a closed loop
	OpSize    int           // bytes per op, one op per append
	Duration  time.Duration // how long each mode runs (when Appends is 0)
	Appends   int           // total appends per mode; 0: run for Duration
	Seed      uint64
}

// Result is one mode's measurements.
type Result struct {
	Mode      string
	Appends   int64
	Syncs     int64
	Elapsed   time.Duration
	P50, P99  time.Duration
	OpsPerSec float64
	// Requests per sync by kind.
	Put, Create, CAS, Get, List float64
	PeakRSS                     int64 // bytes during the run; -1 when the OS does not tell
}

// WritesPerSync is the PUT-priced requests per sync.
func (r Result) WritesPerSync() float64 { return r.Put + r.Create + r.CAS }

// Run measures one mode on a fresh in-memory store behind a latency
// injector and a request counter.
func Run(ctx context.Context, cfg Config, m Mode) (Result, error) {
	if cfg.Appenders < 1 || cfg.OpSize < 0 || (cfg.Duration <= 0 && cfg.Appends <= 0) {
		return Result{}, fmt.Errorf("bench config %+v: need appenders >= 1 and a duration or an append count", cfg)
	}
	slow := faulty.New(mem.New(), cfg.Seed)
	if cfg.Latency > 0 {
		slow.MustAdd(faulty.Rule{Latency: faulty.Fixed(cfg.Latency)})
	}
	store := metered.New(slow.Container, "bench")
	const shard = "bench-shard"
	var chain *fence.Chain
	if m.Fenced {
		var err error
		if chain, err = fence.Claim(ctx, store.Container, shard, 1, "bench-allocation"); err != nil {
			return Result{}, err
		}
	}
	w, err := translog.Open(ctx, store.Container, chain, translog.Options{
		Shard: shard, Term: 1, Allocation: "bench-allocation",
		AckOrder: m.AckOrder, FencingDisabled: !m.Fenced, FencingMode: m.FencingMode,
	})
	if err != nil {
		return Result{}, err
	}
	defer w.Close(context.WithoutCancel(ctx))

	resetPeakRSS()
	before := store.Snapshot()
	op := make([]byte, cfg.OpSize)
	lats := make([][]time.Duration, cfg.Appenders)
	var mu sync.Mutex
	var firstErr error
	var issued int64
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if firstErr != nil || (cfg.Appends > 0 && issued >= int64(cfg.Appends)) {
			return false
		}
		issued++
		return true
	}
	runCtx := ctx
	if cfg.Appends <= 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Appenders {
		wg.Go(func() {
			for runCtx.Err() == nil && take() {
				t0 := time.Now()
				_, err := w.Append(context.WithoutCancel(runCtx), [][]byte{op})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{}, firstErr
	}
	d := store.Snapshot().Sub(before)
	st := w.Stats()
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := Result{Mode: m.Name, Appends: int64(len(all)), Syncs: st.Syncs, Elapsed: elapsed, PeakRSS: peakRSS()}
	if len(all) > 0 {
		r.P50, r.P99 = all[len(all)/2], all[min(len(all)-1, len(all)*99/100)]
		r.OpsPerSec = float64(len(all)) / elapsed.Seconds()
	}
	if s := float64(st.Syncs); s > 0 {
		r.Put, r.Create, r.CAS = float64(d.Put)/s, float64(d.CreateIfAbsent)/s, float64(d.CompareAndSwap)/s
		r.Get, r.List = float64(d.Get)/s, float64(d.List)/s
	}
	return r, nil
}

// WriteTable prints results side by side, with each mode's p50 in round
// trips and its throughput relative to the unfenced run when there is one.
func WriteTable(out io.Writer, cfg Config, rs []Result) {
	var base float64
	for _, r := range rs {
		if r.Mode == "unfenced" {
			base = r.OpsPerSec
		}
	}
	fmt.Fprintf(out, "translog bench: %d appenders, %d-byte ops, %v added to every store request\n\n", cfg.Appenders, cfg.OpSize, cfg.Latency)
	fmt.Fprintln(out, "| mode | appends | syncs | ack p50 | ack p99 | p50 / RTT | ops/s | vs unfenced | PUT/sync | create/sync | CAS/sync | GET/sync | LIST/sync | writes/sync | peak RSS |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rs {
		rtt, rel := "-", "-"
		if cfg.Latency > 0 {
			rtt = fmt.Sprintf("%.2f", float64(r.P50)/float64(cfg.Latency))
		}
		if base > 0 {
			rel = fmt.Sprintf("%.2f", r.OpsPerSec/base)
		}
		rss := "n/a"
		if r.PeakRSS >= 0 {
			rss = fmt.Sprintf("%.0f MiB", float64(r.PeakRSS)/(1<<20))
		}
		fmt.Fprintf(out, "| %s | %d | %d | %s | %s | %s | %.0f | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n",
			r.Mode, r.Appends, r.Syncs, ms(r.P50), ms(r.P99), rtt, r.OpsPerSec, rel,
			r.Put, r.Create, r.CAS, r.Get, r.List, r.WritesPerSync(), rss)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// resetPeakRSS restarts the kernel's peak-RSS counter for this process
// (Linux: writing 5 to clear_refs), so each mode reports its own peak.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS reads VmHWM, the peak resident set since the last reset.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// WriteTargets checks the results against the design targets: the
// concurrent order acks in about one round trip, fencing costs at most 10%
// of the unfenced throughput, and an inline sync is two PUTs; create-only
// mode acks in about one round trip at one PUT per sync and at least 0.95x
// the unfenced throughput.
func WriteTargets(out io.Writer, cfg Config, rs []Result) {
	by := map[string]Result{}
	for _, r := range rs {
		by[r.Mode] = r
	}
	c, okC := by["concurrent"]
	u, okU := by["unfenced"]
	co, okCO := by["create_only"]
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	if okC || okCO {
		fmt.Fprintln(out)
	}
	if okCO {
		if cfg.Latency > 0 {
			x := float64(co.P50) / float64(cfg.Latency)
			fmt.Fprintf(out, "target create_only ack p50 <= 1.3 round trips: %.2f (%s)\n", x, verdict(x <= 1.3))
		}
		if okU && u.OpsPerSec > 0 {
			x := co.OpsPerSec / u.OpsPerSec
			fmt.Fprintf(out, "target create_only throughput >= 0.95x unfenced: %.2fx (%s)\n", x, verdict(x >= 0.95))
		}
		fmt.Fprintf(out, "target create_only 1 PUT per inline sync: %.2f (%s)\n", co.WritesPerSync(), verdict(co.WritesPerSync() <= 1.0))
	}
	if !okC {
		return
	}
	if cfg.Latency > 0 {
		x := float64(c.P50) / float64(cfg.Latency)
		fmt.Fprintf(out, "target concurrent ack p50 <= 1.3 round trips: %.2f (%s)\n", x, verdict(x <= 1.3))
	}
	if okU && u.OpsPerSec > 0 {
		x := c.OpsPerSec / u.OpsPerSec
		fmt.Fprintf(out, "target fenced throughput >= 0.9x unfenced: %.2fx (%s)\n", x, verdict(x >= 0.9))
	}
	fmt.Fprintf(out, "target 2 PUTs per inline sync: %.2f (%s)\n", c.WritesPerSync(), verdict(c.WritesPerSync() <= 2.0))
}
