package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

const benchSummary = "run a benchmark and print its table (shardfence bench TARGET -h)"

// benchTarget is one thing `shardfence bench` can measure. Adding a target
// is one line in benchTargets.
type benchTarget struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func benchTargets() []benchTarget {
	return []benchTarget{
		{"translog", benchTranslogSummary, runBenchTranslog},
		{"master", benchMasterSummary, runBenchMaster},
		{"seal", benchSealSummary, runBenchSeal},
		{"recovery", benchRecoverySummary, runBenchRecovery},
		{"warm", benchWarmSummary, runBenchWarm},
		{"store", benchStoreSummary, runBenchStore},
		{"e2e", benchE2ESummary, runBenchE2E},
		{"failover", benchFailoverSummary, runBenchFailover},
		{"barrier", benchBarrierSummary, runBenchBarrier},
		{"fleet", benchFleetSummary, runBenchFleet},
	}
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: shardfence bench TARGET [flags]")
	fmt.Fprintln(w)
	for _, t := range benchTargets() {
		fmt.Fprintf(w, "  %-12s %s\n", t.name, t.summary)
	}
}

// runBench dispatches on its first argument.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		benchUsage(stderr)
		return fmt.Errorf("%w: name a bench target", errUsage)
	}
	if a := args[0]; a == "-h" || a == "-help" || a == "--help" || a == "help" {
		benchUsage(stdout)
		return flag.ErrHelp
	}
	for _, t := range benchTargets() {
		if t.name == args[0] {
			return t.run(ctx, args[1:], stdout, stderr)
		}
	}
	benchUsage(stderr)
	return fmt.Errorf("%w: unknown bench target %q", errUsage, args[0])
}
