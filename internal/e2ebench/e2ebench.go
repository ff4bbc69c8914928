// Package e2ebench measures appends through the sidecar API (ConnectRPC
// over loopback) against appends to the in-process translog, same store,
// same run (`shardfence bench e2e`).
package e2ebench

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
	"github.com/shardfence/shardfence/internal/demo"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/sidecar"
)

// Config is one bench run.
type Config struct {
	// Store is where both paths write, under a random
	// shardfence-bench-e2e/ prefix removed afterwards; Where names it.
	Store *blobstore.Container
	Where string
	// Clients append in closed loops, Batch ops of OpSize bytes per
	// Append, for Duration per path.
	Clients, OpSize, Batch int
	Duration               time.Duration
	// H2C: API clients share one HTTP/2 connection (h2c), as gRPC clients
	// do; false: one HTTP/1.1 connection per client.
	H2C bool
}

// result is one path's numbers.
type result struct {
	path     string
	ops      int
	elapsed  time.Duration
	p50, p99 time.Duration
	errors   int
	firstErr error
}

func (r result) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// loop runs clients closed loops of append for d and collects the ack
// latencies.
func loop(ctx context.Context, path string, clients int, d time.Duration, opSize, batch int, appendOne func(ctx context.Context, ops [][]byte) error) result {
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
	r := result{path: path, elapsed: time.Since(start)}
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

// Run measures both paths and writes the table to out; progress goes to
// log.
func Run(ctx context.Context, cfg Config, out, log io.Writer) error {
	root := cfg.Store
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
	fmt.Fprintf(log, "in-process translog for %v...\n", cfg.Duration)
	shardStore, err := blobstore.Sub(store, "inproc")
	if err != nil {
		return err
	}
	sh, err := recovery.Open(ctx, shardStore, "inproc", 1, "bench", recovery.Options{Writer: sidecar.DefaultSettings().WriterOptions()})
	if err != nil {
		return fmt.Errorf("bench e2e: open the in-process shard: %w", err)
	}
	inproc := loop(ctx, "in-process translog", cfg.Clients, cfg.Duration, cfg.OpSize, cfg.Batch, func(ctx context.Context, ops [][]byte) error {
		_, err := sh.Writer.Append(ctx, ops)
		return err
	})
	if err := sh.Writer.Close(context.WithoutCancel(ctx)); err != nil {
		return err
	}

	// Through the API: a sidecar on loopback, ConnectRPC over h2c or
	// HTTP/1.1 keep-alive connections.
	fmt.Fprintf(log, "sidecar API for %v...\n", cfg.Duration)
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
	tr.MaxIdleConnsPerHost = cfg.Clients
	proto := "HTTP/1.1"
	if cfg.H2C {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		proto = "h2c"
	}
	client := sidecarv1connect.NewSidecarServiceClient(&http.Client{Transport: tr}, "http://"+ln.Addr().String())
	if _, _, err := demo.OpenShard(ctx, client, "api", 1, "bench"); err != nil {
		return fmt.Errorf("bench e2e: open the API shard: %w", err)
	}
	api := loop(ctx, "sidecar API (Connect, "+proto+")", cfg.Clients, cfg.Duration, cfg.OpSize, cfg.Batch, func(ctx context.Context, ops [][]byte) error {
		_, err := client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "api", Ops: ops}))
		return err
	})
	if err := srv.Shutdown(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	fmt.Fprintf(out, "store %s, %d clients, %d-byte ops, %d per append, %v per path\n\n", cfg.Where, cfg.Clients, cfg.OpSize, cfg.Batch, cfg.Duration)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tops/s\tack p50\tack p99\terrors\t")
	// Latencies are per Append call; errors count failed calls.
	for _, r := range []result{inproc, api} {
		fmt.Fprintf(tw, "%s\t%.0f\t%v\t%v\t%d\t\n", r.path, r.opsPerSec(), r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.errors)
	}
	tw.Flush()
	for _, r := range []result{inproc, api} {
		if r.firstErr != nil {
			fmt.Fprintf(out, "%s: first error of %d: %v\n", r.path, r.errors, r.firstErr)
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
	fmt.Fprintf(out, "\ntarget API throughput >= 0.85x in-process: %.2fx (%s)\n", x, verdict)
	return nil
}
