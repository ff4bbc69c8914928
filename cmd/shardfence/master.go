package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/internal/grpcprobe"
	"github.com/shardfence/shardfence/internal/httpauth"
	"github.com/shardfence/shardfence/internal/reqlimit"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/ha"
	"github.com/shardfence/shardfence/seal"
)

const masterSummary = "run the master: leases, placement, eviction, remount; with --store its state goes through the fenced store (standby, promote)"

// masterStoreEnv passes the store URL without putting credentials on the
// command line.
const masterStoreEnv = envPrefix + "MASTER_STORE"

func runMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isMasterSubcommand(args[0]) {
		return runMasterAdmin(ctx, args[0], args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] != "" && !strings.HasPrefix(args[0], "-") {
		return unknownMasterSubcommand(args[0])
	}
	fs := newFlags("master", stdout)
	fs.Usage = masterUsage(fs)
	listen := fs.String("listen", "127.0.0.1:7500", "address to serve the API, /metrics, /healthz and /readyz on")
	fs.String("config", "", "YAML file of flag values (keys are flag names; client_active_ttl_sec, client_suspicion_ttl_sec and client_live_ttl_sec are read too); flags win over it")
	var sec serverSecurity
	sec.addFlags(fs, "master")
	var ttl livenessFlags
	ttl.add(fs)
	offboarding := fs.String("offboarding", "async", "how the offboarding of offline clients runs: async (a background executor with batching and retries) or sync (inside the liveness monitor)")
	var cfg master.Config
	fs.DurationVar(&cfg.DefaultLeaseTTL, "lease-ttl", 10*time.Second, "read lease TTL (default_kv_lease_ttl; 10ms..24h)")
	fs.DurationVar(&cfg.RecoveryLeaseTTL, "recovery-lease-ttl", 0, "lease a remount grants its objects (recovery_kv_lease_ttl); 0 means --lease-ttl, else 10ms..24h")
	fs.DurationVar(&cfg.SoftPinTTL, "soft-pin-ttl", 30*time.Minute, "soft-pin interval a lease grant renews (default_kv_soft_pin_ttl; 1s..720h)")
	fs.Float64Var(&cfg.HighWatermark, "high-watermark", 0.90, "used/capacity ratio above which eviction runs")
	fs.Float64Var(&cfg.EvictionRatio, "eviction-ratio", 0.05, "how far below the high watermark one eviction pass frees, as a fraction of capacity")
	fs.BoolVar(&cfg.AllowEvictSoftPinned, "allow-evict-soft-pinned", false, "let memory pressure evict soft-pinned objects (allow_evict_soft_pinned_objects)")
	fs.IntVar(&cfg.Shards, "shards", 1024, "metadata shards, each with its own lock")
	fs.Func("tenant-quota", "cap a tenant's memory bytes, as TENANT=BYTES with BYTES > 0 (repeatable)", func(v string) error {
		name, n, ok := strings.Cut(v, "=")
		bytes, err := strconv.ParseUint(n, 10, 64)
		if !ok || err != nil || bytes == 0 || name == "" {
			return fmt.Errorf("want TENANT=BYTES with a tenant name and BYTES > 0, got %q", clipArg(v))
		}
		if cfg.TenantQuotas == nil {
			cfg.TenantQuotas = map[string]uint64{}
		}
		cfg.TenantQuotas[name] = bytes
		return nil
	})
	evictEvery := fs.Duration("eviction-interval", 100*time.Millisecond, "how often to check the high watermark (1ms..1m)")
	store := fs.String("store", "", "store URL the master's operation log and snapshots live under (or $"+masterStoreEnv+"); empty keeps the state in memory only")
	cluster := fs.String("cluster", "", "cluster name: the log is the shard master-NAME under --store (required with --store)")
	standby := fs.Bool("standby", false, "start as a hot standby: tail the log read-only until promoted, or elected when the primary shows no sign of life for --election-timeout (without it, a master claims a new log at once and otherwise starts as a standby too)")
	node := fs.String("node", "", "name of this master, recorded in fence keys and leader entries (default: the host name)")
	advertise := fs.String("advertise", "", "URL this master serves its API on, as sidecars, the CLI and the other masters reach it; every other master redirects there while this one is primary (default: http(s)://the --listen address when it is not a wildcard)")
	election := fs.Duration("election-timeout", 3*time.Second, "a standby that sees no sign of the primary's life (a new log generation or term) for this long, plus a random share of up to a fifth of it, claims the log by itself; the primary renews every third of it and answers nothing once it could not for nine tenths of it (0: no elections, only master promote; use the same value on every master of the cluster)")
	dataDir := fs.String("data-dir", "", "scratch directory for snapshot files (default: the system's temporary directory)")
	snapEvery := fs.Duration("snapshot-interval", 10*time.Minute, "take a complete snapshot this often while primary (0: only on request; else 100ms..168h)")
	snapFormat := fs.String("snapshot-format", "v2", "complete snapshot format to write: v2 (steady deadlines + clock pair) or v1 (wall-clock ms, for compatibility)")
	fs.BoolVar(&cfg.SnapshotRestoreCleanup, "snapshot-cleanup-expired", false, "on restore from a complete snapshot, drop objects neither hard pinned nor leased nor soft pinned")
	retainSnaps := fs.Int("retain-snapshots", 2, "complete snapshots GC keeps")
	retainGens := fs.Int64("retain-gens", 1000, "log generations GC keeps below the newest snapshot (a standby lagging further reloads from the snapshot)")
	maxLag := fs.Duration("standby-max-lag", 10*time.Second, "lag past which a standby reports not ready (100ms..1h)")
	fenceCheck := fs.Duration("fence-check-interval", time.Second, "how often an idle primary checks the store for a newer master (10ms..1m)")
	allowFencingFailures := fs.Bool("allow-fencing-failures", false, "start on a --store whose conformance certificate records a failed fencing check (the operation log there can lose acknowledged changes, or two primaries acknowledge)")
	var logs logFlags
	logs.add(fs)
	lim := reqlimit.Limits{}
	fs.IntVar(&lim.MaxRequestBytes, "max-request-bytes", master.DefaultMaxRequestBytes, "largest request message, on the wire and decompressed")
	fs.Int64Var(&lim.MaxConcurrentRequestBytes, "max-concurrent-request-bytes", 64<<20, "request bytes all calls may hold at once (at least --max-request-bytes)")
	fs.DurationVar(&lim.BodyReadTimeout, "body-read-timeout", 30*time.Second, "a request body must arrive within this long of the call's start (100ms..10m)")
	fs.IntVar(&lim.MaxStreams, "max-streams", master.DefaultMaxStreams, fmt.Sprintf("open calls of each streaming procedure (WatchShards: routing feeds; WatchAssignments: a node's assignments) at once; one more is refused MASTER_BUSY (1..%d)", reqlimit.MaxMaxStreams))
	idleTimeout := fs.Duration("idle-timeout", 2*time.Minute, "close a client connection idle this long (1s..1h)")
	pprofOn := fs.Bool("pprof", false, "serve Go's profiler at /debug/pprof/ (behind the token, like /metrics)")
	if err := loadConfigAliased(fs, args, func(string) string { return "" }, seedConfigAliases); err != nil {
		return err
	}
	for _, d := range []struct {
		flag   string
		v      time.Duration
		lo, hi time.Duration
		zero   string // what 0 means, if it is allowed
	}{
		{"--lease-ttl", cfg.DefaultLeaseTTL, master.MinLeaseTTL, master.MaxLeaseTTL, ""},
		{"--recovery-lease-ttl", cfg.RecoveryLeaseTTL, master.MinLeaseTTL, master.MaxLeaseTTL, "--lease-ttl"},
		{"--soft-pin-ttl", cfg.SoftPinTTL, time.Second, master.MaxSoftPinTTL, ""},
		{"--liveness-interval", ttl.interval, master.MinMonitorInterval, master.MaxMonitorInterval, "a tenth of the shorter client TTL"},
		{"--snapshot-interval", *snapEvery, 100 * time.Millisecond, 7 * 24 * time.Hour, "only on request"},
		{"--standby-max-lag", *maxLag, 100 * time.Millisecond, time.Hour, ""},
		{"--fence-check-interval", *fenceCheck, 10 * time.Millisecond, time.Minute, ""},
		{"--eviction-interval", *evictEvery, time.Millisecond, time.Minute, ""},
	} {
		if d.v == 0 && d.zero != "" {
			continue
		}
		if d.v < d.lo || d.v > d.hi {
			zero := ""
			if d.zero != "" {
				zero = " (0: " + d.zero + ")"
			}
			return fmt.Errorf("%w: %s %v is outside %v..%v%s", errUsage, d.flag, d.v, d.lo, d.hi, zero)
		}
	}
	if err := lim.Validate(); err != nil || lim.MaxStreams == 0 {
		if err == nil {
			err = errors.New("max streams 0: give at least 1")
		}
		return fmt.Errorf("%w: --max-request-bytes, --max-concurrent-request-bytes, --body-read-timeout, --max-streams: %v", errUsage, err)
	}
	if *idleTimeout < time.Second || *idleTimeout > time.Hour {
		return fmt.Errorf("%w: --idle-timeout %v is outside 1s..1h", errUsage, *idleTimeout)
	}
	if *election != 0 && (*election < 100*time.Millisecond || *election > 10*time.Minute) {
		return fmt.Errorf("%w: --election-timeout %v is outside 100ms..10m (0 turns elections off)", errUsage, *election)
	}
	if *store == "" {
		*store = os.Getenv(masterStoreEnv)
	}
	format, err := master.ParseSnapshotFormat(*snapFormat)
	if err != nil {
		return fmt.Errorf("%w: --snapshot-format: %v", errUsage, err)
	}
	switch {
	case *store == "" && (*standby || *cluster != ""):
		return fmt.Errorf("%w: --standby and --cluster need --store", errUsage)
	case *store != "" && *cluster == "":
		return fmt.Errorf("%w: --store needs --cluster (the log's shard is master-CLUSTER)", errUsage)
	case *retainSnaps < 1 || *retainGens < 0:
		return fmt.Errorf("%w: --retain-snapshots must be at least 1 and --retain-gens not negative", errUsage)
	}
	logNode := *node
	if logNode == "" && *store != "" {
		logNode, _ = os.Hostname() // the name the master records (ha.Options.Node)
	}
	log, err := logs.logger(stderr, "master", logNode)
	if err != nil {
		return err
	}
	warnings, err := ttl.resolve(fs, &cfg.Liveness)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	switch *offboarding {
	case "async":
	case "sync":
		cfg.Offboarding.Sync = true
	default:
		return fmt.Errorf("%w: --offboarding %q (async or sync)", errUsage, *offboarding)
	}
	token, tlsCfg, public, err := sec.resolve(*listen)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mopts := master.Options{Metrics: master.NewMetrics(reg), Logger: log}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if *pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("master: listen on %s: %w (is another master running there? pick another --listen)", *listen, err)
	}
	defer ln.Close()
	adv, err := advertiseURL(*advertise, *listen, ln, tlsCfg != nil)
	if err != nil {
		return err
	}
	if adv == "" && *store != "" {
		log.Warn("no --advertise and a wildcard --listen: while this master is primary, the others cannot tell sidecars and the CLI where it serves (they still find it by trying every --master address)", "listen", *listen)
	}

	// serving is the master eviction runs on: only a primary evicts (a
	// standby's state is the log's, and eviction would be a change).
	var serving func() (*master.Master, error)
	var run func(ctx context.Context) error
	var liveness func(ctx context.Context) // the in-memory master's monitor (an HA node runs its own)
	var ready func() error                 // /readyz's verdict
	// Every handler bounds one request message, a decompressed gzip body
	// included.
	readMax := connect.WithReadMaxBytes(lim.MaxRequestBytes)
	services := []string{masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName}
	if *store == "" {
		m, err := master.New(cfg, mopts)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		path, h := master.NewHandler(m, readMax)
		mux.Handle(path, h)
		// A table a restart loses would tell every sidecar it holds
		// nothing: automatic failover needs the durable master.
		path, h = master.NewFleetHandlerFunc(func() (*master.Master, error) {
			return nil, fmt.Errorf("%w: automatic failover needs a master with --store and --cluster: its shard assignment table must survive the master", master.ErrInvalidArgument)
		}, readMax)
		mux.Handle(path, h)
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready in-memory\n")) })
		serving = func() (*master.Master, error) { return m, nil }
		ready = func() error { return nil }
		liveness = m.RunLiveness
		reg.MustRegister(newMasterStateCollector(nil))
		log.Warn("master state is in memory only: a restart loses every object (run with --store and --cluster to keep it)")
	} else {
		if _, err := master.New(cfg, mopts); err != nil { // validate before touching the store
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		root, err := blobstore.Open(ctx, *store)
		if err != nil {
			return fmt.Errorf("master: open store %s: %w", blobstore.Redact(*store), err)
		}
		defer root.Close()
		// What shardfence conformance recorded for this store, as serve
		// reads it: the log is fenced by the same protocol.
		certState, err := masterCertUser.checkCertificate(ctx, root, *allowFencingFailures, log)
		if err != nil {
			return err
		}
		registerCertificateStateAs(reg, MasterStoreCertificateMetric, "master", certState)
		if err := blobstore.ProbePreconditions(ctx, root); err != nil {
			return fmt.Errorf("master: %w", err)
		}
		// The log's store requests and bytes, by operation, on /metrics
		// (shardfence_blobstore_*{store="master"}): what the log costs.
		metStore := metered.New(root, "master")
		reg.MustRegister(metStore)
		n, err := ha.New(ha.Options{
			Store: metStore.Container, Cluster: *cluster, Standby: *standby, Node: *node, Advertise: adv, ElectionTimeout: *election,
			Config: cfg, MasterOptions: mopts,
			Dir: *dataDir, SnapshotFormat: format, SnapshotInterval: *snapEvery,
			Retain: seal.GCPolicy{RetainCheckpoints: *retainSnaps, RetainGens: *retainGens}, MaxLag: *maxLag,
			FenceCheckInterval: *fenceCheck, Metrics: ha.NewMetrics(reg), Log: log,
		})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		n.Mount(mux, readMax)
		reg.MustRegister(newMasterStateCollector(n))
		serving, run, ready = n.Serving, n.Run, n.Ready
		services = append(services, masterv1connect.MasterHAServiceName)
	}

	stopped := make(chan struct{})
	grpcprobe.Mount(mux, master.HealthChecker(func() error { _, err := serving(); return err }, ready, stopped),
		func(h http.Handler) http.Handler { return h }, services...)
	// The guard holds every call's body bytes in one gate and cuts slow
	// bodies; the token check before it keeps a caller without the token
	// from taking any of them.
	var handler http.Handler = master.RequestGuard(lim).Wrap(mux)
	if token != "" {
		handler = httpauth.RequireBearer(token, "missing or wrong bearer token: send the master's token as Authorization: Bearer TOKEN (the shardfence master commands read it from --auth-token-file or SHARDFENCE_MASTER_TOKEN_FILE, a sidecar from --master-token-file)",
			handler, "/healthz", "/readyz", grpcprobe.CheckPath, grpcprobe.WatchPath)
	}
	if public && tlsCfg == nil {
		log.Warn("serving off loopback without TLS: the bearer token and the API cross the network in clear text", "listen", *listen)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies have their own per-call deadline (--body-read-timeout),
		// lifted once read, so the assignment and routing streams are
		// not cut.
		IdleTimeout: *idleTimeout,
		TLSConfig:   tlsCfg,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// gRPC clients speak HTTP/2 (h2c without TLS); Connect and JSON
	// clients use HTTP/1.1 or HTTP/2.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true)

	log.Info("master serving", "addr", ln.Addr().String(), "advertise", adv, "cluster", *cluster, "standby", *standby, "election_timeout", *election,
		"lease_ttl", cfg.DefaultLeaseTTL, "high_watermark", cfg.HighWatermark, "tls", tlsCfg != nil, "auth", token != "",
		"client_active_ttl", cfg.Liveness.ActiveTTL, "client_suspicion_ttl", cfg.Liveness.SuspicionTTL)
	fmt.Fprintf(stdout, "master listening on %s\n", ln.Addr())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() {
		if tlsCfg != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	runDone := make(chan struct{})
	if liveness != nil {
		go func() {
			defer close(runDone)
			liveness(ctx)
		}()
	} else if run != nil {
		go func() {
			defer close(runDone)
			if err := run(ctx); err != nil {
				errc <- fmt.Errorf("master: %w", err)
			}
		}()
	} else {
		close(runDone)
	}
	evictCtx, stopEvict := context.WithCancel(ctx)
	evictDone := make(chan struct{})
	go func() {
		defer close(evictDone)
		master.RunEviction(evictCtx, *evictEvery, serving, log)
	}()
	stop := func() error {
		stopEvict()
		<-evictDone
		close(stopped)
		shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelShut()
		err := srv.Shutdown(shutCtx)
		cancel()
		<-runDone
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("master: shutdown: %w", err)
		}
		return nil
	}
	for {
		select {
		case err := <-errc:
			_ = stop()
			return err
		case <-ctx.Done():
			return stop()
		}
	}
}

// advertiseURL is the URL others reach a server at: --advertise as given
// (checked), else http(s):// plus the address the listener got, unless
// --listen named a wildcard host ("" then: nobody can be told where it is).
func advertiseURL(flag, listen string, ln net.Listener, tls bool) (string, error) {
	if flag != "" {
		u, err := url.Parse(flag)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return "", fmt.Errorf("%w: --advertise %q: want http(s)://HOST:PORT, without credentials, path or query", errUsage, clipArg(flag))
		}
		return strings.TrimRight(flag, "/"), nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", nil
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", nil
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if _, port, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		return scheme + "://" + net.JoinHostPort(host, port), nil
	}
	return scheme + "://" + ln.Addr().String(), nil
}
