package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/storebench"
)

const benchStoreSummary = "object-store driver: p50/p99 latency and ops/s per operation at 1 and N clients"

func runBenchStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench store", stdout)
	store := fs.String("store", "", "store URL to measure, e.g. s3://bucket/prefix?endpoint=..., minio://host:port/bucket, file://./data, mem://x")
	duration := fs.Duration("duration", 500*time.Millisecond, "run time of each operation at each concurrency (the run takes about 12 times this)")
	clientsFlag := fs.String("clients", "1,16", "comma-separated concurrency levels, each client in a closed loop")
	size := fs.Int("size", 1024, "body size in bytes of every write")
	opsFlag := fs.String("ops", "Get,Put,CreateIfAbsent,CAS,List,Delete", "comma-separated operations to measure (Delete removes what CreateIfAbsent made, so keep them together)")
	fs.Usage = func() {
		w := fs.Output() // the flag package prints usage itself on -h, to its output
		fmt.Fprintf(w, "usage: shardfence bench store --store URL [--duration D] [--clients 1,16] [--size N] [--ops a,b]\n\n")
		fmt.Fprintf(w, "Measures each operation of the store's driver in a closed loop and prints p50/p99 latency and\n")
		fmt.Fprintf(w, "ops/s. Every key is written under a unique shardfence-bench/ prefix, removed afterwards.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the store goes in --store)", errUsage, fs.Arg(0))
	}
	if *store == "" {
		return fmt.Errorf("%w: --store is required", errUsage)
	}
	if *duration <= 0 || *size < 0 {
		return fmt.Errorf("%w: --duration must be positive and --size not negative", errUsage)
	}
	cfg := storebench.Config{Duration: *duration, Size: *size}
	clients, ok := parseCounts(*clientsFlag, 1, 1024)
	if !ok {
		return fmt.Errorf("%w: --clients %q: want comma-separated counts from 1 to 1024", errUsage, *clientsFlag)
	}
	cfg.Clients = clients
	ops, err := storebench.OpsByName(strings.Split(*opsFlag, ","))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	cfg.Ops = ops
	root, err := blobstore.Open(ctx, *store)
	if err != nil {
		return err
	}
	defer root.Close()
	return storebench.Run(ctx, root, cfg, stdout, stderr)
}
