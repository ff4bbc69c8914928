package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shardfence/shardfence/internal/e2ebench"
)

const benchE2ESummary = "appends through the sidecar API vs the in-process translog, same store, same run"

func runBenchE2E(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench e2e", stderr)
	storeURL := fs.String("store", "", "store URL (default: a fresh file:// store in a temporary folder); keys go under a random shardfence-bench-e2e/ prefix, removed afterwards")
	clients := fs.Int("clients", 64, "concurrent clients, each appending one op at a time in a closed loop")
	opSize := fs.Int("op-size", 1024, "bytes per op")
	batch := fs.Int("ops-per-append", 1, "ops each client sends per Append call")
	h2c := fs.Bool("h2c", true, "API clients share one HTTP/2 connection (h2c), as gRPC clients do; false: one HTTP/1.1 connection per client")
	duration := fs.Duration("duration", 5*time.Second, "run time per path")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *clients < 1 || *opSize < 1 || *batch < 1 || *duration <= 0 {
		return fmt.Errorf("%w: --clients, --op-size, --ops-per-append and --duration must be positive", errUsage)
	}
	store, where, closeStore, err := openStoreOrTemp(ctx, *storeURL, "shardfence-bench-e2e-")
	if err != nil {
		return err
	}
	defer closeStore()
	return e2ebench.Run(ctx, e2ebench.Config{Store: store, Where: where, Clients: *clients, OpSize: *opSize, Batch: *batch, Duration: *duration, H2C: *h2c}, stdout, stderr)
}
