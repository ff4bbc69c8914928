// Command shardfence is the one binary of the project: the sidecar, the
// master, the store conformance and benchmark commands, and admin tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/shardfence/shardfence/blobstore/drivers"
)

// command is one subcommand. run gets the arguments after the command name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"bench", benchSummary, runBench},
		{"conformance", conformanceSummary, runConformance},
		{"master", masterSummary, runMaster},
		{"serve", serveSummary, runServe},
		{"open", openSummary, runOpen},
		{"append", appendSummary, runAppend},
		{"read", readSummary, runRead},
		{"read-file", readFileSummary, runReadFile},
		{"status", statusSummary, runStatus},
		{"watch", watchSummary, runWatch},
		{"barrier", barrierSummary, runBarrier},
		{"close", closeSummary, runClose},
		{"gc", gcSummary, runGC},
		{"handoff", handoffSummary, runHandoff},
		{"inspect", inspectSummary, runInspect},
		{"settings", settingsSummary, runSettings},
		{"demo", demoSummary, runDemo},
		{"cost", costSummary, runCost},
		{"version", versionSummary, runVersion},
	}
}

// errUsage marks an error caused by the command line; main exits 2 for it.
var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shardfence COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'shardfence COMMAND -h' for a command's flags.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "shardfence %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "shardfence %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "shardfence: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// newFlags returns a flag set that reports errors instead of exiting;
// parse it with parseArgs. -h prints the flags to help (the command's
// stdout, so `shardfence COMMAND -h | less` works); errors go to stderr
// through dispatch.
func newFlags(name string, help io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("shardfence "+name, flag.ContinueOnError)
	fs.SetOutput(help)
	return fs
}

// parseArgs parses args into fs. -h prints the flags and returns
// flag.ErrHelp (exit 0); a bad flag or value is a usage error (exit 2),
// printed once, by dispatch.
func parseArgs(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return flag.ErrHelp
	}
	return fmt.Errorf("%w: %v (see '%s -h')", errUsage, err, fs.Name())
}
