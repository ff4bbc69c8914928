package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/recovery/recoverybench"
)

const benchRecoverySummary = "hydrate + replay throughput against a plain parallel GET of the same bytes"

func runBenchRecovery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("bench recovery", stdout)
	rawURL := flags.String("url", "", "store URL (e.g. minio://...); empty: the fs driver in a temporary directory")
	ckptMiB := flags.Int("checkpoint-mib", 900, "checkpoint size in MiB")
	tlogMiB := flags.Int("translog-mib", 100, "translog payload after the checkpoint in MiB")
	fileMiB := flags.Int("file-mib", 64, "checkpoint file size in MiB")
	syncKiB := flags.Int("sync-kib", 1024, "translog payload per generation in KiB (above 1 MiB inline limit: data objects)")
	par := flags.Int("parallelism", 16, "concurrent requests of both the recovery and the plain GET")
	profile := flags.String("cpuprofile", "", "write a CPU profile of the whole run (setup, GETs and recoveries) to this file; read the recovery with go tool pprof -focus recovery.Open")
	if err := parseArgs(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 0 || *ckptMiB < 0 || *tlogMiB < 0 || *fileMiB < 1 || *syncKiB < 1 || *par < 1 {
		return fmt.Errorf("%w: sizes must be positive and no arguments are taken", errUsage)
	}
	cfg := recoverybench.HydrateConfig{CheckpointMiB: *ckptMiB, TranslogMiB: *tlogMiB, FileMiB: *fileMiB, SyncKiB: *syncKiB, Parallelism: *par}
	if *rawURL != "" {
		c, err := blobstore.Open(ctx, *rawURL)
		if err != nil {
			return err
		}
		defer c.Close()
		cfg.Store, cfg.Where = c, blobstore.Redact(*rawURL)
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return recoverybench.RunHydrate(ctx, cfg, stdout, stderr)
}
