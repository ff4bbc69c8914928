package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardfence/shardfence/translog/tlbench"
)

const benchTranslogSummary = "fenced translog: ack latency, throughput and requests per sync by ack order"

func runBenchTranslog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench translog", stdout)
	latency := addLatencyFlag(fs)
	appenders := fs.Int("appenders", 64, "concurrent appenders, each in a closed loop")
	opSize := fs.Int("op-size", 1024, "bytes per op (one op per append)")
	duration := fs.Duration("duration", 5*time.Second, "run time per mode")
	modes := fs.String("modes", "concurrent,sequenced,unfenced,create_only", "comma-separated modes: concurrent, sequenced, unfenced, lease, create_only, observe")
	seed := fs.Uint64("seed", 1, "seed of the fault injector")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var run []tlbench.Mode
	for _, name := range strings.Split(*modes, ",") {
		m, ok := tlbench.ModeByName(strings.TrimSpace(name))
		if !ok {
			return fmt.Errorf("%w: unknown mode %q (want concurrent, sequenced, unfenced or lease)", errUsage, name)
		}
		run = append(run, m)
	}
	cfg := tlbench.Config{Latency: *latency, Appenders: *appenders, OpSize: *opSize, Duration: *duration, Seed: *seed}
	var results []tlbench.Result
	for _, m := range run {
		fmt.Fprintf(stderr, "running %s for %v...\n", m.Name, cfg.Duration)
		r, err := tlbench.Run(ctx, cfg, m)
		if err != nil {
			return fmt.Errorf("bench translog %s: %w", m.Name, err)
		}
		results = append(results, r)
	}
	tlbench.WriteTable(stdout, cfg, results)
	tlbench.WriteTargets(stdout, cfg, results)
	return nil
}
