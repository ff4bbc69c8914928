package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/sidecar"
)

const benchE2ESummary = "appends through the sidecar API vs the in-process translog, same store, same run"

// e2eResult is one path's numbers.
type e2eResult struct {
	path     string
	ops      int
	elapsed  time.Duration
	p50, p99 time.Duration
	errors   int
	firstErr error
}

func (r e2eResult) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// e2eLoop runs clients closed loops of append for d and collects the ack
// latencies.
func e2eLoop(ctx context.Context, path string, clients int, d time.Duration, opSize, batch int, appendOne func(ctx context.Context, ops [][]byte) error) e2eResult {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lat := make([][]time.Duration, clients)
	errs := make([]int, clients)
	firstErrs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			ops := make([][]byte, batch)
			for j := range ops {
				ops[j] = make([]byte, opSize)
			}
			for i := 0; ctx.Err() == nil; i++ {
				for j, op := range ops {
					copy(op, fmt.Sprintf("%d-%d-%d-", c, i, j))
				}
				t0 := time.Now()
				if err := appendOne(ctx, ops); err != nil {
					if ctx.Err() == nil {
						errs[c]++
						if firstErrs[c] == nil {
							firstErrs[c] = err
						}
					}
					continue
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	r := e2eResult{path: path, elapsed: time.Since(start)}
	var all []time.Duration
	for c := range clients {
		all = append(all, lat[c]...)
		r.errors += errs[c]
		if r.firstErr == nil {
			r.firstErr = firstErrs[c]
		}
	}
	r.ops = len(all) * batch
	if len(all) > 0 {
		slices.Sort(all)
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r
}

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
	url, cleanup, err := storeOrTemp(*storeURL, "shardfence-bench-e2e-")
	if err != nil {
		return err
	}
	defer cleanup()
	root, err := blobstore.Open(ctx, url)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer root.Close()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "shardfence-bench-e2e/" + hex.EncodeToString(rnd[:])
	store, err := blobstore.Sub(root, prefix)
	if err != nil {
		return err
	}
	defer func() {
		items, err := blobstore.ListAll(context.WithoutCancel(ctx), store, "")
		if err == nil {
			for _, it := range items {
				_ = store.Delete(context.WithoutCancel(ctx), it.Key)
			}
		}
	}()

	// In process: the writer recovery opens, called directly.
	fmt.Fprintf(stderr, "in-process translog for %v...\n", *duration)
	shardStore, err := blobstore.Sub(store, "inproc")
	if err != nil {
		return err
	}
	sh, err := recovery.Open(ctx, shardStore, "inproc", 1, "bench", recovery.Options{Writer: sidecar.DefaultSettings().WriterOptions()})
	if err != nil {
		return fmt.Errorf("bench e2e: open the in-process shard: %w", err)
	}
	inproc := e2eLoop(ctx, "in-process translog", *clients, *duration, *opSize, *batch, func(ctx context.Context, ops [][]byte) error {
		_, err := sh.Writer.Append(ctx, ops)
		return err
	})
	if err := sh.Writer.Close(context.WithoutCancel(ctx)); err != nil {
		return err
	}

	// Through the API: a sidecar on loopback, ConnectRPC over h2c or
	// HTTP/1.1 keep-alive connections.
	fmt.Fprintf(stderr, "sidecar API for %v...\n", *duration)
	srv, err := sidecar.New(ctx, store, sidecar.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(sidecar.HandlerOptions{}), ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = *clients
	proto := "HTTP/1.1"
	if *h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		proto = "h2c"
	}
	client := sidecarv1connect.NewSidecarServiceClient(&http.Client{Transport: tr}, "http://"+ln.Addr().String())
	if _, _, err := demoOpen(ctx, client, "api", 1, "bench"); err != nil {
		return fmt.Errorf("bench e2e: open the API shard: %w", err)
	}
	api := e2eLoop(ctx, "sidecar API (Connect, "+proto+")", *clients, *duration, *opSize, *batch, func(ctx context.Context, ops [][]byte) error {
		_, err := client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "api", Ops: ops}))
		return err
	})
	if err := srv.Shutdown(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	fmt.Fprintf(stdout, "store %s, %d clients, %d-byte ops, %d per append, %v per path\n\n", blobstore.Redact(url), *clients, *opSize, *batch, *duration)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tops/s\tack p50\tack p99\terrors\t")
	// Latencies are per Append call; errors count failed calls.
	for _, r := range []e2eResult{inproc, api} {
		fmt.Fprintf(tw, "%s\t%.0f\t%v\t%v\t%d\t\n", r.path, r.opsPerSec(), r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.errors)
	}
	tw.Flush()
	for _, r := range []e2eResult{inproc, api} {
		if r.firstErr != nil {
			fmt.Fprintf(stdout, "%s: first error of %d: %v\n", r.path, r.errors, r.firstErr)
		}
	}
	if inproc.ops == 0 || api.ops == 0 {
		return errors.New("bench e2e: a path acknowledged no op")
	}
	x := api.opsPerSec() / inproc.opsPerSec()
	verdict := "met"
	if x < 0.85 {
		verdict = "MISSED"
	}
	fmt.Fprintf(stdout, "\ntarget API throughput >= 0.85x in-process: %.2fx (%s)\n", x, verdict)
	return nil
}
