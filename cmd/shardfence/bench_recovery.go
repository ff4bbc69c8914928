package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/harness/testservers"
	"github.com/shardfence/shardfence/recovery/recoverybench"
)

const benchRecoverySummary = "hydrate + replay throughput against a plain parallel GET of the same bytes and the local disk's write rate"

func runBenchRecovery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("bench recovery", stdout)
	stores := flags.String("store", "fs", "comma-separated stores to measure in turn: fs (the fs driver in a temporary directory), minio (a MinIO server started from the local test-server binary from make tools), or a store URL (e.g. minio://...)")
	rawURL := flags.String("url", "", "store URL (e.g. minio://...); the same as -store URL")
	ckptMiB := flags.Int("checkpoint-mib", 900, "checkpoint size in MiB")
	tlogMiB := flags.Int("translog-mib", 100, "translog payload after the checkpoint in MiB")
	fileMiB := flags.Int("file-mib", 64, "checkpoint file size in MiB")
	syncKiB := flags.Int("sync-kib", 1024, "translog payload per generation in KiB (above 1 MiB inline limit: data objects)")
	par := flags.Int("parallelism", 16, "concurrent requests of both the recovery and the plain GET (and files of the disk write)")
	chunkKiB := flags.Int("chunk-kib", 0, "hydration reads a file larger than this in pieces of this size, concurrently (0: the default, 16 MiB; -1: one stream per file)")
	runs := flags.Int("runs", 2, "rounds of plain GET, disk write and recovery, interleaved; the ratios use their medians")
	profile := flags.String("cpuprofile", "", "write a CPU profile of the whole run (setup, GETs and recoveries) to this file; read the hydration with go tool pprof -focus 'seal.storeIO.download'")
	blockProfile := flags.String("blockprofile", "", "write a blocking profile of the whole run to this file")
	mutexProfile := flags.String("mutexprofile", "", "write a mutex contention profile of the whole run to this file")
	if err := parseArgs(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 0 || *ckptMiB < 0 || *tlogMiB < 0 || *fileMiB < 1 || *syncKiB < 1 || *par < 1 || *runs < 1 || *chunkKiB < -1 {
		return fmt.Errorf("%w: sizes must be positive and no arguments are taken", errUsage)
	}
	if *rawURL != "" {
		*stores = *rawURL
	}
	cfg := recoverybench.HydrateConfig{CheckpointMiB: *ckptMiB, TranslogMiB: *tlogMiB, FileMiB: *fileMiB, SyncKiB: *syncKiB, Parallelism: *par,
		ChunkSize: int64(*chunkKiB) << 10, Runs: *runs}
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
	if *blockProfile != "" {
		runtime.SetBlockProfileRate(1)
		defer writeProfile("block", *blockProfile, stderr)
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(1)
		defer writeProfile("mutex", *mutexProfile, stderr)
	}
	for i, store := range strings.Split(*stores, ",") {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		c := cfg
		switch store {
		case "fs":
		case "minio":
			dir, err := os.MkdirTemp("", "shardfence-bench-minio-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			srv, proc, err := testservers.StartMinIOShared(dir)
			if err != nil {
				return fmt.Errorf("bench recovery: start MinIO: %w", err)
			}
			defer proc.Stop()
			if c.Store, err = blobstore.Open(ctx, srv.MinioURL("bench")); err != nil {
				return err
			}
			defer c.Store.Close()
			c.Where = "minio (a local server on the same machine, one drive)"
			c.StoreCPU = proc.CPU
		default:
			s, err := blobstore.Open(ctx, store)
			if err != nil {
				return err
			}
			defer s.Close()
			c.Store, c.Where = s, blobstore.Redact(store)
		}
		if err := recoverybench.RunHydrate(ctx, c, stdout, stderr); err != nil {
			return err
		}
	}
	return nil
}

// writeProfile writes the named runtime profile (block, mutex) to file.
func writeProfile(name, file string, stderr io.Writer) {
	f, err := os.Create(file)
	if err == nil {
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s profile: %v\n", name, err)
	}
}
