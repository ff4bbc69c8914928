package main

import (
	"context"
	"errors"
	"flag"
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardfence/shardfence/internal/h2serve"
	"github.com/shardfence/shardfence/internal/reqlimit"
	"github.com/shardfence/shardfence/master"
)

const masterSummary = "run the master: leases, placement, eviction, remount; with --store its state goes through the fenced store (standby, promote)"

// masterStoreEnv passes the store URL without putting credentials on the
// command line.
const masterStoreEnv = envPrefix + "MASTER_STORE"

// masterFlags are the flags of `shardfence master` (the server itself).
type masterFlags struct {
	listen               string
	sec                  serverSecurity
	ttl                  livenessFlags
	offboarding          string
	cfg                  master.Config
	evictEvery           *time.Duration
	store, cluster       string
	standby              bool
	node, advertise      string
	election             time.Duration
	dataDir              string
	snapEvery            time.Duration
	snapFormat           string
	retainSnaps          int
	retainGens           int64
	maxLag, fenceCheck   time.Duration
	allowFencingFailures bool
	logs                 logFlags
	lim                  reqlimit.Limits
	idleTimeout          time.Duration
	pprof                bool
}

func masterFlagSet(stdout io.Writer) (*flag.FlagSet, *masterFlags) {
	fs := newFlags("master", stdout)
	fs.Usage = masterUsage(fs)
	f := &masterFlags{}
	cfg := &f.cfg
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7500", "address to serve the API, /metrics, /healthz and /readyz on")
	fs.String("config", "", "YAML file of flag values (keys are flag names; client_active_ttl_sec, client_suspicion_ttl_sec and client_live_ttl_sec are read too); flags win over it")
	f.sec.addFlags(fs, "master")
	f.ttl.add(fs)
	fs.StringVar(&f.offboarding, "offboarding", "async", "how the offboarding of offline clients runs: async (a background executor with batching and retries) or sync (inside the liveness monitor)")
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
	f.evictEvery = fs.Duration("eviction-interval", 100*time.Millisecond, "how often to check the high watermark (1ms..1m)")
	fs.StringVar(&f.store, "store", "", "store URL the master's operation log and snapshots live under (or $"+masterStoreEnv+"); empty keeps the state in memory only")
	fs.StringVar(&f.cluster, "cluster", "", "cluster name: the log is the shard master-NAME under --store (required with --store)")
	fs.BoolVar(&f.standby, "standby", false, "start as a hot standby: tail the log read-only until promoted, or elected when the primary shows no sign of life for --election-timeout (without it, a master claims a new log at once and otherwise starts as a standby too)")
	fs.StringVar(&f.node, "node", "", "name of this master, recorded in fence keys and leader entries (default: the host name)")
	fs.StringVar(&f.advertise, "advertise", "", "URL this master serves its API on, as sidecars, the CLI and the other masters reach it; every other master redirects there while this one is primary (default: http(s)://the --listen address when it is not a wildcard)")
	fs.DurationVar(&f.election, "election-timeout", 3*time.Second, "a standby that sees no sign of the primary's life (a new log generation or term) for this long, plus a random share of up to a fifth of it, claims the log by itself; the primary renews every third of it and answers nothing once it could not for nine tenths of it (0: no elections, only master promote; use the same value on every master of the cluster)")
	fs.StringVar(&f.dataDir, "data-dir", "", "scratch directory for snapshot files (default: the system's temporary directory)")
	fs.DurationVar(&f.snapEvery, "snapshot-interval", 10*time.Minute, "take a complete snapshot this often while primary (0: only on request; else 100ms..168h)")
	fs.StringVar(&f.snapFormat, "snapshot-format", "v2", "complete snapshot format to write: v2 (steady deadlines + clock pair) or v1 (wall-clock ms, for compatibility)")
	fs.BoolVar(&cfg.SnapshotRestoreCleanup, "snapshot-cleanup-expired", false, "on restore from a complete snapshot, drop objects neither hard pinned nor leased nor soft pinned")
	fs.IntVar(&f.retainSnaps, "retain-snapshots", 2, "complete snapshots GC keeps")
	fs.Int64Var(&f.retainGens, "retain-gens", 1000, "log generations GC keeps below the newest snapshot (a standby lagging further reloads from the snapshot)")
	fs.DurationVar(&f.maxLag, "standby-max-lag", 10*time.Second, "lag past which a standby reports not ready (100ms..1h)")
	fs.DurationVar(&f.fenceCheck, "fence-check-interval", time.Second, "how often an idle primary checks the store for a newer master (10ms..1m)")
	fs.BoolVar(&f.allowFencingFailures, "allow-fencing-failures", false, "start on a --store whose conformance certificate records a failed fencing check (the operation log there can lose acknowledged changes, or two primaries acknowledge)")
	f.logs.add(fs)
	fs.IntVar(&f.lim.MaxRequestBytes, "max-request-bytes", master.DefaultMaxRequestBytes, "largest request message, on the wire and decompressed")
	fs.Int64Var(&f.lim.MaxConcurrentRequestBytes, "max-concurrent-request-bytes", 64<<20, "request bytes all calls may hold at once (at least --max-request-bytes)")
	fs.DurationVar(&f.lim.BodyReadTimeout, "body-read-timeout", 30*time.Second, "a request body must arrive within this long of the call's start (100ms..10m)")
	fs.IntVar(&f.lim.MaxStreams, "max-streams", master.DefaultMaxStreams, fmt.Sprintf("open calls of each streaming procedure (WatchShards: routing feeds; WatchAssignments: a node's assignments) at once; one more is refused MASTER_BUSY (1..%d)", reqlimit.MaxMaxStreams))
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 2*time.Minute, "close a client connection idle this long (1s..1h)")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ (behind the token, like /metrics)")
	return fs, f
}

// durationBound is one duration flag's allowed range.
type durationBound struct {
	flag   string
	v      time.Duration
	lo, hi time.Duration
	zero   string // what 0 means, if it is allowed
}

// checkDurations refuses the first duration outside its range.
func checkDurations(bounds []durationBound) error {
	for _, d := range bounds {
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
	return nil
}

// check validates what the command line decided, before a file, the
// store or the network is touched; it fills --store from the environment
// and returns the snapshot format.
func (f *masterFlags) check(getenv func(string) string) (master.SnapshotFormat, error) {
	cfg := &f.cfg
	if err := checkDurations([]durationBound{
		{"--lease-ttl", cfg.DefaultLeaseTTL, master.MinLeaseTTL, master.MaxLeaseTTL, ""},
		{"--recovery-lease-ttl", cfg.RecoveryLeaseTTL, master.MinLeaseTTL, master.MaxLeaseTTL, "--lease-ttl"},
		{"--soft-pin-ttl", cfg.SoftPinTTL, time.Second, master.MaxSoftPinTTL, ""},
		{"--liveness-interval", f.ttl.interval, master.MinMonitorInterval, master.MaxMonitorInterval, "a tenth of the shorter client TTL"},
		{"--snapshot-interval", f.snapEvery, 100 * time.Millisecond, 7 * 24 * time.Hour, "only on request"},
		{"--standby-max-lag", f.maxLag, 100 * time.Millisecond, time.Hour, ""},
		{"--fence-check-interval", f.fenceCheck, 10 * time.Millisecond, time.Minute, ""},
		{"--eviction-interval", *f.evictEvery, time.Millisecond, time.Minute, ""},
	}); err != nil {
		return 0, err
	}
	if err := f.lim.Validate(); err != nil || f.lim.MaxStreams == 0 {
		if err == nil {
			err = errors.New("max streams 0: give at least 1")
		}
		return 0, fmt.Errorf("%w: --max-request-bytes, --max-concurrent-request-bytes, --body-read-timeout, --max-streams: %v", errUsage, err)
	}
	if f.idleTimeout < time.Second || f.idleTimeout > time.Hour {
		return 0, fmt.Errorf("%w: --idle-timeout %v is outside 1s..1h", errUsage, f.idleTimeout)
	}
	if f.election != 0 && (f.election < 100*time.Millisecond || f.election > 10*time.Minute) {
		return 0, fmt.Errorf("%w: --election-timeout %v is outside 100ms..10m (0 turns elections off)", errUsage, f.election)
	}
	if f.store == "" {
		f.store = getenv(masterStoreEnv)
	}
	format, err := master.ParseSnapshotFormat(f.snapFormat)
	if err != nil {
		return 0, fmt.Errorf("%w: --snapshot-format: %v", errUsage, err)
	}
	switch {
	case f.store == "" && (f.standby || f.cluster != ""):
		return 0, fmt.Errorf("%w: --standby and --cluster need --store", errUsage)
	case f.store != "" && f.cluster == "":
		return 0, fmt.Errorf("%w: --store needs --cluster (the log's shard is master-CLUSTER)", errUsage)
	case f.retainSnaps < 1 || f.retainGens < 0:
		return 0, fmt.Errorf("%w: --retain-snapshots must be at least 1 and --retain-gens not negative", errUsage)
	}
	return format, nil
}

// logger is the master's log; with --store it names the node as the log
// records it (ha.Options.Node: the host name by default).
func (f *masterFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	logNode := f.node
	if logNode == "" && f.store != "" {
		logNode, _ = os.Hostname()
	}
	return f.logs.logger(stderr, "master", logNode)
}

// resolveLiveness applies the client TTL rules and --offboarding to the
// master's configuration.
func (f *masterFlags) resolveLiveness(fs *flag.FlagSet, log *slog.Logger) error {
	warnings, err := f.ttl.resolve(fs, &f.cfg.Liveness)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	switch f.offboarding {
	case "async":
	case "sync":
		f.cfg.Offboarding.Sync = true
	default:
		return fmt.Errorf("%w: --offboarding %q (async or sync)", errUsage, f.offboarding)
	}
	return nil
}

func runMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isMasterSubcommand(args[0]) {
		return runMasterAdmin(ctx, args[0], args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] != "" && !strings.HasPrefix(args[0], "-") {
		return unknownMasterSubcommand(args[0])
	}
	fs, f := masterFlagSet(stdout)
	if err := loadConfigAliased(fs, args, func(string) string { return "" }, seedConfigAliases); err != nil {
		return err
	}
	format, err := f.check(os.Getenv)
	if err != nil {
		return err
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	if err := f.resolveLiveness(fs, log); err != nil {
		return err
	}
	token, tlsCfg, public, err := f.sec.resolve(f.listen)
	if err != nil {
		return err
	}

	reg := newRegistry()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mountPprof(mux, f.pprof)
	ln, adv, err := f.listenAt(tlsCfg != nil, log)
	if err != nil {
		return err
	}
	defer ln.Close()
	mn, err := f.mount(ctx, mux, reg, master.Options{Metrics: master.NewMetrics(reg), Logger: log}, adv, format)
	if err != nil {
		return err
	}
	defer mn.close()
	// serving is the master eviction runs on: only a primary evicts (a
	// standby's state is the log's, and eviction would be a change).
	serving := mn.serving
	stopped := make(chan struct{})
	if public && tlsCfg == nil {
		log.Warn("serving off loopback without TLS: the bearer token and the API cross the network in clear text", "listen", f.listen)
	}
	srv := h2serve.New(h2serve.Options{Handler: mn.handler(mux, f.lim, token, stopped), TLS: tlsCfg, IdleTimeout: f.idleTimeout, Log: log})

	log.Info("master serving", "addr", ln.Addr().String(), "advertise", adv, "cluster", f.cluster, "standby", f.standby, "election_timeout", f.election,
		"lease_ttl", f.cfg.DefaultLeaseTTL, "high_watermark", f.cfg.HighWatermark, "tls", tlsCfg != nil, "auth", token != "",
		"client_active_ttl", f.cfg.Liveness.ActiveTTL, "client_suspicion_ttl", f.cfg.Liveness.SuspicionTTL)
	fmt.Fprintf(stdout, "master listening on %s\n", ln.Addr())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	runDone := startMasterRun(ctx, mn.run, mn.liveness, errc)
	evictCtx, stopEvict := context.WithCancel(ctx)
	evictDone := make(chan struct{})
	go func() {
		defer close(evictDone)
		master.RunEviction(evictCtx, *f.evictEvery, serving, log)
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
		if err != nil {
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

// listenAt binds --listen and works out the URL the master advertises.
func (f *masterFlags) listenAt(tls bool, log *slog.Logger) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, "", fmt.Errorf("master: listen on %s: %w (is another master running there? pick another --listen)", f.listen, err)
	}
	adv, err := advertiseURL(f.advertise, f.listen, ln, tls)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	if adv == "" && f.store != "" {
		log.Warn("no --advertise and a wildcard --listen: while this master is primary, the others cannot tell sidecars and the CLI where it serves (they still find it by trying every --master address)", "listen", f.listen)
	}
	return ln, adv, nil
}

// startMasterRun runs the in-memory master's liveness monitor, or an HA
// node's Run (its error goes to errc), until ctx ends; the channel closes
// when it has returned.
func startMasterRun(ctx context.Context, run func(context.Context) error, liveness func(context.Context), errc chan<- error) <-chan struct{} {
	runDone := make(chan struct{})
	switch {
	case liveness != nil:
		go func() {
			defer close(runDone)
			liveness(ctx)
		}()
	case run != nil:
		go func() {
			defer close(runDone)
			if err := run(ctx); err != nil {
				errc <- fmt.Errorf("master: %w", err)
			}
		}()
	default:
		close(runDone)
	}
	return runDone
}

// newRegistry is a process's metrics registry, with the Go runtime's
// and the process's own collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// mountPprof serves Go's profiler under /debug/pprof/ when on.
func mountPprof(mux *http.ServeMux, on bool) {
	if !on {
		return
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
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
