package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardfence/shardfence/internal/harness/e2ebench"
)

const benchE2ESummary = "appends through a sidecar process (unary, stream, client package; TCP and unix socket) vs the in-process translog, same store, same run"

func runBenchE2E(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := selfCmd()
	if err != nil {
		return err
	}
	return benchE2E(ctx, c, args, stdout, stderr)
}

// benchE2E runs the bench with c as the sidecar's command.
func benchE2E(ctx context.Context, c fleetCmd, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench e2e", stdout)
	storeURL := fs.String("store", "", "store URL (default: a fresh file:// store in a temporary folder; not mem://); keys go under a random shardfence-bench-e2e/ prefix, removed afterwards")
	callers := fs.String("callers", "1,16,64", "numbers of concurrent callers, each appending one op per call in a closed loop")
	opSize := fs.Int("op-size", 1024, "bytes per op")
	transports := fs.String("transports", "tcp,unix", "how the callers reach the sidecar process: tcp, unix or both")
	duration := fs.Duration("duration", 3*time.Second, "run time per row")
	linger := fs.Duration("linger", 0, "the client package's linger (WithLinger)")
	profile := fs.String("profile", "", "write CPU profiles (client.pprof, server.pprof) of the client package's row at the most callers to this folder")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	ns, ok := parseCounts(*callers, 1, 0)
	if !ok {
		return fmt.Errorf("%w: --callers %q: positive numbers, comma-separated", errUsage, *callers)
	}
	var tps []string
	for _, s := range strings.Split(*transports, ",") {
		if s != "tcp" && s != "unix" {
			return fmt.Errorf("%w: --transports %q: tcp, unix or both", errUsage, *transports)
		}
		tps = append(tps, s)
	}
	if *opSize < 1 || *duration <= 0 {
		return fmt.Errorf("%w: --op-size and --duration must be positive", errUsage)
	}
	if strings.HasPrefix(*storeURL, "mem://") {
		return fmt.Errorf("%w: --store mem:// cannot be shared with the sidecar process; use file:// or an object store", errUsage)
	}
	url, cleanup, err := storeOrTemp(*storeURL, "shardfence-bench-e2e-")
	if err != nil {
		return err
	}
	defer cleanup()
	store, where, closeStore, err := openStoreOrTemp(ctx, url, "")
	if err != nil {
		return err
	}
	defer closeStore()
	serve := func(ctx context.Context, env []string, args ...string) (e2ebench.Sidecar, error) {
		p, err := startFleetProc(c, "sidecar", "sidecar listening on ", env, args...)
		if err != nil {
			return e2ebench.Sidecar{}, err
		}
		return e2ebench.Sidecar{Addr: p.addr, PID: p.PID(), Stop: p.kill}, nil
	}
	return e2ebench.Run(ctx, e2ebench.Config{Store: store, StoreURL: url, Where: where, Callers: ns, OpSize: *opSize,
		Duration: *duration, Transports: tps, Serve: serve, ProfileDir: *profile, Linger: *linger}, stdout, stderr)
}
