package main

import (
	"context"
	"fmt"
	"io"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/sidecar/warmbench"
)

const benchWarmSummary = "warm open: time to first checkpoint read by checkpoint size, random reads partial vs full"

func runBenchWarm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("bench warm", stdout)
	rawURL := flags.String("url", "", "store URL (e.g. minio://...); empty: the fs driver in a temporary directory")
	sizes := flags.String("sizes-mib", "10,2048", "checkpoint sizes in MiB, comma-separated")
	fileMiB := flags.Int("file-mib", 64, "checkpoint file size in MiB")
	runs := flags.Int("runs", 3, "warm opens (one term each) per size")
	reads := flags.Int("reads", 500, "random reads over the largest checkpoint, partial then full (0: none)")
	readBytes := flags.Int("read-bytes", 4096, "bytes per random read")
	blockKiB := flags.Int64("block-kib", 1024, "the sidecar's cache block in KiB")
	hydrate := flags.Int("hydrate-parallelism", 0, "the sidecar's --warm-hydrate-parallelism (0: its default; -1: no background hydration, no full phase)")
	if err := parseArgs(flags, args); err != nil {
		return err
	}
	mibs, ok := parseCounts(*sizes, 1, 0)
	if !ok {
		return fmt.Errorf("%w: --sizes-mib %q: positive sizes, comma-separated", errUsage, *sizes)
	}
	if flags.NArg() > 0 || *fileMiB < 1 || *runs < 1 || *reads < 0 || *readBytes < 1 || *blockKiB < 4 {
		return fmt.Errorf("%w: sizes and counts must be positive and no arguments are taken", errUsage)
	}
	cfg := warmbench.Config{SizesMiB: mibs, FileMiB: *fileMiB, Runs: *runs, Reads: *reads, ReadBytes: *readBytes, BlockBytes: *blockKiB << 10, HydrateParallelism: *hydrate}
	if *rawURL != "" {
		c, err := blobstore.Open(ctx, *rawURL)
		if err != nil {
			return err
		}
		defer c.Close()
		cfg.Store, cfg.Where = c, blobstore.Redact(*rawURL)
	}
	return warmbench.Run(ctx, cfg, stdout, stderr)
}
