package main

import (
	"context"
	"fmt"
	"io"

	"github.com/shardfence/shardfence/recovery/recoverybench"
)

const benchSealSummary = "takeover latency: store requests and ms from claim start to an open writer"

func runBenchSeal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench seal", stdout)
	latency := addLatencyFlag(fs)
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
	cfg := recoverybench.TakeoverConfig{Latency: *latency, Gens: *gens, OpSize: *opSize, Runs: *runs}
	if *trace {
		cfg.Trace = stderr
	}
	return recoverybench.RunTakeover(ctx, cfg, stdout)
}
