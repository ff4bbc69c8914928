package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardfence/shardfence/master"
)

const masterSummary = "run the master: leases, placement, eviction, remount (ConnectRPC: gRPC and JSON)"

func runMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("master", stderr)
	listen := fs.String("listen", "127.0.0.1:7500", "address to serve the API and /metrics on")
	var cfg master.Config
	fs.DurationVar(&cfg.DefaultLeaseTTL, "lease-ttl", 10*time.Second, "read lease TTL (default_kv_lease_ttl)")
	fs.DurationVar(&cfg.RecoveryLeaseTTL, "recovery-lease-ttl", 0, "lease a remount grants its objects (recovery_kv_lease_ttl); 0 means --lease-ttl")
	fs.DurationVar(&cfg.SoftPinTTL, "soft-pin-ttl", 30*time.Minute, "soft-pin interval a lease grant renews (default_kv_soft_pin_ttl)")
	fs.Float64Var(&cfg.HighWatermark, "high-watermark", 0.90, "used/capacity ratio above which eviction runs")
	fs.Float64Var(&cfg.EvictionRatio, "eviction-ratio", 0.05, "how far below the high watermark one eviction pass frees, as a fraction of capacity")
	fs.BoolVar(&cfg.AllowEvictSoftPinned, "allow-evict-soft-pinned", false, "let memory pressure evict soft-pinned objects (allow_evict_soft_pinned_objects)")
	fs.IntVar(&cfg.Shards, "shards", 1024, "metadata shards, each with its own lock")
	fs.Func("tenant-quota", "cap a tenant's memory bytes, as TENANT=BYTES (repeatable)", func(v string) error {
		name, n, ok := strings.Cut(v, "=")
		bytes, err := strconv.ParseUint(n, 10, 64)
		if !ok || err != nil || bytes == 0 {
			return fmt.Errorf("want TENANT=BYTES with BYTES > 0, got %q", v)
		}
		if cfg.TenantQuotas == nil {
			cfg.TenantQuotas = map[string]uint64{}
		}
		cfg.TenantQuotas[name] = bytes
		return nil
	})
	evictEvery := fs.Duration("eviction-interval", 100*time.Millisecond, "how often to check the high watermark")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *evictEvery <= 0 {
		return fmt.Errorf("%w: --eviction-interval must be positive", errUsage)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := master.New(cfg, master.Options{Metrics: master.NewMetrics(reg)})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	mux := http.NewServeMux()
	path, h := master.NewHandler(m)
	mux.Handle(path, h)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("master: listen on %s: %w (is another master running there? pick another --listen)", *listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// gRPC clients speak HTTP/2 without TLS on a local network; Connect and
	// JSON clients use HTTP/1.1 or HTTP/2.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)

	log := slog.New(slog.NewTextHandler(stderr, nil))
	log.Info("master serving", "addr", ln.Addr().String(), "lease_ttl", m.Config().DefaultLeaseTTL,
		"recovery_lease_ttl", m.Config().RecoveryTTL(), "high_watermark", m.Config().HighWatermark)
	fmt.Fprintf(stdout, "master listening on %s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	tick := time.NewTicker(*evictEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if r := m.Evict(); r.Objects > 0 {
				log.Info("evicted", "objects", r.Objects, "bytes", r.Freed)
			}
		case err := <-errc:
			return fmt.Errorf("master: serve: %w", err)
		case <-ctx.Done():
			shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("master: shutdown: %w", err)
			}
			return nil
		}
	}
}
