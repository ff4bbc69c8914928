package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/h2serve"
	masterLib "github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/sidecar/agent"
	"github.com/shardfence/shardfence/translog"
)

const serveSummary = "run the sidecar: open shards, fenced appends, reads (ConnectRPC: gRPC and JSON)"

// envPrefix names the environment variables that set serve's flags:
// --auth-token-file is SHARDFENCE_AUTH_TOKEN_FILE.
const envPrefix = "SHARDFENCE_"

type serveFlags struct {
	store, listen, config, node string
	logFlags
	serverSecurity
	allowUnfenced                bool
	allowFencingFailures         bool
	pprof                        bool
	shutdownTimeout, idleTimeout time.Duration
	stallAfter                   time.Duration
	hydrateDir                   string
	cache                        sidecar.CacheOptions
	limits                       sidecar.Limits
	masters, advertise           string
	appAdvertise                 string
	masterConn                   masterConn
	defaults                     sidecar.Settings
	mode, ackOrder               string
	checkpoint                   sidecar.CheckpointPolicy
	gcAfterCheckpoint            bool
}

func serveFlagSet(stdout io.Writer) (*flag.FlagSet, *serveFlags) {
	fs := newFlags("serve", stdout)
	f := &serveFlags{}
	d := sidecar.DefaultSettings()
	fs.StringVar(&f.store, "store", "", "store URL all shards live under, e.g. file://./data, s3://bucket/prefix (required)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7400", "address to serve on: HOST:PORT or unix:///path/to.sock")
	fs.StringVar(&f.config, "config", "", "YAML file of flag values (keys are flag names); flags and SHARDFENCE_* variables win over it")
	fs.StringVar(&f.node, "node", "", "name of this node, recorded in fence keys for operators")
	f.logFlags.add(fs)
	f.serverSecurity.addFlags(fs, "sidecar")
	fs.StringVar(&f.masters, "master", "", "register with the master at this URL (comma-separated: the master and its standbys) and carry out its shard assignments (automatic failover); needs --node")
	fs.StringVar(&f.advertise, "advertise", "", "URL of this sidecar's API as the master and primaries reach it (default: http(s)://the --listen address when it is not a wildcard)")
	fs.StringVar(&f.appAdvertise, "app-advertise", "", "with --master: URL of the application (the shard primary) next to this sidecar, as its clients reach it; the master's routing feed publishes it with this node's shards (client.Route.AppAddr)")
	fs.StringVar(&f.masterConn.tokenFile, "master-token-file", "", "file holding the master's bearer token")
	fs.StringVar(&f.masterConn.caCert, "master-ca-cert", "", "CA bundle (PEM) to verify an HTTPS master with")
	fs.StringVar(&f.masterConn.clientCert, "master-client-cert", "", "client certificate (PEM) for a master that requires mutual TLS")
	fs.StringVar(&f.masterConn.clientKey, "master-client-key", "", "client certificate's key (PEM)")
	fs.BoolVar(&f.allowUnfenced, "allow-unfenced", false, "allow shards opened with fencing disabled: no fence key, so a deposed writer keeps acknowledging until its successor's seal poisons its next generation; every op it acknowledged is still in the successor's restore point. Such shards take no checkpoint, GC or handoff. It also lets serve start on a store that ignores conditional writes, where only unfenced shards open and the poison can be overwritten: there acknowledged writes can be lost")
	fs.BoolVar(&f.allowFencingFailures, "allow-fencing-failures", false, "serve a store whose conformance certificate records a failed fencing check (a fenced shard there can lose acknowledged writes)")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ (behind the token, like /metrics)")
	fs.Int64Var(&f.limits.StreamWindowBytes, "stream-window-bytes", 8<<20, "request bytes one AppendStream may hold unanswered before the sidecar stops reading it (64 KiB..1 GiB)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight syncs before abandoning them (1s..1h)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 2*time.Minute, "close a client connection idle this long (1s..1h)")
	fs.DurationVar(&f.limits.BodyReadTimeout, "body-read-timeout", 30*time.Second, "a request body must arrive within this long (100ms..10m)")
	fs.StringVar(&f.cache.Dir, "cache-dir", "", "warm opens: where the sidecar keeps its block cache and the checkpoints it hydrates in the background, one folder removed at shutdown (default: the system's temporary directory)")
	fs.Int64Var(&f.cache.Bytes, "cache-bytes", sidecar.DefaultCacheBytes, "warm opens: the block cache's size, least recently used blocks evicted first (1 MiB..1 PiB, at least two blocks)")
	fs.Int64Var(&f.cache.BlockBytes, "cache-block-bytes", sidecar.DefaultCacheBlockBytes, "warm opens: the unit of an on-demand fetch, of caching and of checksums (a power of two, 4 KiB..64 MiB)")
	fs.IntVar(&f.cache.HydrateParallelism, "warm-hydrate-parallelism", 4, "warm opens: files a shard's background hydration copies at once (1..64; -1: none, shards stay partial)")
	fs.IntVar(&f.cache.FetchParallelism, "warm-fetch-parallelism", 16, "warm opens: on-demand block fetches in flight on the sidecar (1..256)")
	fs.StringVar(&f.hydrateDir, "hydrate-dir", "", "where Open streams a restored checkpoint to disk before sending it to the primary, one folder per open, removed after (default: the system's temporary directory)")
	fs.DurationVar(&f.stallAfter, "stall-after", sidecar.DefaultStallAfter, "a shard whose syncs retry store errors this long, or whose sync request goes unanswered this long, is stalled: /readyz answers 503 (1s..10m)")
	fs.IntVar(&f.limits.MaxOpBytes, "max-op-bytes", 1<<20, "largest op an Append may carry")
	fs.IntVar(&f.limits.MaxOpsPerAppend, "max-ops-per-append", 10000, "most ops one Append may carry")
	fs.IntVar(&f.limits.MaxRequestBytes, "max-request-bytes", 32<<20, "largest request message")
	fs.Int64Var(&f.limits.MaxConcurrentRequestBytes, "max-concurrent-request-bytes", 128<<20, "request bytes all calls may hold at once (at least --max-request-bytes)")
	fs.StringVar(&f.mode, "fencing-mode", "per_sync", "default fencing mode of a shard: per_sync, lease, create_only or observe")
	fs.StringVar(&f.ackOrder, "ack-order", "concurrent", "default ack order of a shard: concurrent or sequenced")
	fs.IntVar(&f.defaults.InlineLimit, "inline-limit", d.InlineLimit, "default: payloads up to this many bytes go inside the md object")
	fs.Int64Var(&f.defaults.MaxSyncBytes, "max-sync-bytes", d.MaxSyncBytes, "default: payload cap of one sync")
	fs.Int64Var(&f.defaults.MaxInFlightBytes, "max-in-flight-bytes", d.MaxInFlightBytes, "default: bytes appended but not yet acknowledged before appends wait")
	fs.IntVar(&f.defaults.MaxPipeline, "max-pipeline", d.MaxPipeline, "default: md creates in flight per shard")
	fs.DurationVar(&f.defaults.MaxGatherDelay, "max-gather-delay", d.MaxGatherDelay, "default: longest wait to fill a sync (up to 1s; negative disables)")
	fs.DurationVar(&f.defaults.LeaseInterval, "lease-interval", d.LeaseInterval, "default lease of lease mode, failover waits this long (10ms..10m)")
	fs.DurationVar(&f.defaults.FreshnessInterval, "freshness-interval", d.FreshnessInterval, "default: how recent a CAS lets a checkpoint or GC skip listing the fence keys (10ms..10m)")
	fs.Int64Var(&f.defaults.RetentionGens, "retention-gens", d.RetentionGens, "default: generations GC keeps below the latest checkpoint")
	fs.Int64Var(&f.checkpoint.EveryBytes, "checkpoint-every-bytes", sidecar.DefaultCheckpointEveryBytes, "ask a shard's primary for a checkpoint (a Watch event) once the translog after its newest checkpoint holds this many bytes (0: never by size)")
	fs.DurationVar(&f.checkpoint.Every, "checkpoint-every", sidecar.DefaultCheckpointEvery, "ask a shard's primary for a checkpoint once its newest is this old and ops were written since (0: never by age)")
	fs.Int64Var(&f.checkpoint.WarnBytes, "checkpoint-warn-bytes", 0, "/readyz warns (still ready) while a shard's replay backlog holds more than this (0: 4 x --checkpoint-every-bytes; -1: never)")
	fs.BoolVar(&f.gcAfterCheckpoint, "gc-after-checkpoint", true, "run GC with the shard's retention after each checkpoint its primary publishes here")
	return fs, f
}

// loadConfig applies the YAML file, then SHARDFENCE_* variables, then the
// flags given on the command line, so flags win and the file loses.
func loadConfig(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	return loadConfigAliased(fs, args, getenv, nil)
}

// configAlias maps a config file key that is not a flag name (the seed's
// client_active_ttl_sec, say) to the flag it sets and the value.
type configAlias func(v any) (flagName, value string)

// loadConfigAliased is loadConfig with extra config file keys.
func loadConfigAliased(fs *flag.FlagSet, args []string, getenv func(string) string, aliases map[string]configAlias) error {
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	// The file and the environment fill only what the command line left
	// alone, so flags win without being set twice (a repeatable flag
	// would count a value twice).
	set := func(name, value, from string) error {
		if _, ok := given[name]; ok {
			return nil
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%w: %s: %s: %v", errUsage, from, name, err)
		}
		return nil
	}
	path := given["config"]
	if path == "" {
		path = getenv(envPrefix + "CONFIG")
	}
	if path != "" {
		body, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%w: config file: %v", errUsage, err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(body, &doc); err != nil {
			return fmt.Errorf("%w: config file %s: %v", errUsage, path, err)
		}
		for k, v := range doc {
			if a := aliases[k]; a != nil {
				name, value := a(v)
				if err := set(name, value, "config file "+path+" key "+k); err != nil {
					return err
				}
				continue
			}
			if k == "config" || fs.Lookup(k) == nil {
				return fmt.Errorf("%w: config file %s: unknown key %q (keys are the command's flag names)", errUsage, path, k)
			}
			if err := set(k, fmt.Sprint(v), "config file "+path); err != nil {
				return err
			}
		}
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil && f.Name != "config" {
			envErr = set(f.Name, v, "environment "+name)
		}
	})
	return envErr
}

func parseMode(s string) (translog.FencingMode, error) {
	switch s {
	case "per_sync", "per-sync":
		return translog.PerSync, nil
	case "lease":
		return translog.Lease, nil
	case "create_only", "create-only":
		return translog.CreateOnly, nil
	case "observe":
		return translog.Observe, nil
	}
	return 0, fmt.Errorf("%w: fencing mode %q (per_sync, lease, create_only or observe)", errUsage, s)
}

// parseModeProto is parseMode as the API's enum, which numbers the modes
// as the translog does.
func parseModeProto(s string) (sidecarv1.FencingMode, error) {
	m, err := parseMode(s)
	return sidecarv1.FencingMode(m), err
}

// parseAckOrderProto is parseAckOrder as the API's enum, which numbers the
// orders as the translog does.
func parseAckOrderProto(s string) (sidecarv1.AckOrder, error) {
	o, err := parseAckOrder(s)
	return sidecarv1.AckOrder(o), err
}

func parseAckOrder(s string) (translog.AckOrder, error) {
	switch s {
	case "concurrent":
		return translog.Concurrent, nil
	case "sequenced":
		return translog.Sequenced, nil
	}
	return 0, fmt.Errorf("%w: ack order %q (concurrent or sequenced)", errUsage, s)
}

// publicListen reports whether --listen is reachable from other machines,
// without binding it: serve refuses an unauthenticated public listener
// before it touches the store or the network.
func publicListen(addr string) (bool, error) {
	if strings.HasPrefix(addr, "unix://") {
		return false, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%w: --listen %q: %v (use HOST:PORT or unix:///path)", errUsage, addr, err)
	}
	return !isLoopback(host), nil
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listenOn opens the listener and says whether it is reachable from other
// machines.
func listenOn(addr string) (net.Listener, bool, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if path == "" {
			return nil, false, fmt.Errorf("%w: --listen unix:// needs a path", errUsage)
		}
		// A socket file left by a crashed sidecar would make Listen fail;
		// remove it only if nothing answers on it.
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
				return nil, false, fmt.Errorf("listen on %s: another process serves this socket", addr)
			}
			_ = os.Remove(path)
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, false, fmt.Errorf("listen on %s: %w", addr, err)
		}
		// Only this user may talk to the sidecar through the socket.
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, false, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return ln, false, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, fmt.Errorf("%w: --listen %q: %v (use HOST:PORT or unix:///path)", errUsage, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("listen on %s: %w (is another sidecar running there? pick another --listen)", addr, err)
	}
	return ln, !isLoopback(host), nil
}

// maxTokenBytes bounds a token file: a token goes in an HTTP header,
// and a file that never ends (a device, a wrong path) must not fill the
// process's memory.
const maxTokenBytes = 4096

// readToken reads a bearer token: at most maxTokenBytes, surrounding
// whitespace trimmed, at least 16 characters, each a visible ASCII
// character (what an Authorization header carries as it is: no NUL,
// control character, space or non-ASCII byte, which a client could not
// send or would send as something else).
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: --auth-token-file: %v", errUsage, err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("%w: --auth-token-file %s: %v", errUsage, path, err)
	}
	if len(body) > maxTokenBytes {
		return "", fmt.Errorf("%w: --auth-token-file %s holds more than %d bytes; a token goes in an HTTP header: use a random token of 16 to %d visible ASCII characters", errUsage, path, maxTokenBytes, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(body))
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("%w: --auth-token-file %s: byte %d of the token is 0x%02X, which cannot go in an Authorization header as it is; use visible ASCII characters only (no spaces, control characters or non-ASCII)", errUsage, path, i, c)
		}
	}
	if len(tok) < 16 {
		return "", fmt.Errorf("%w: --auth-token-file %s holds %d characters; use a random token of at least 16", errUsage, path, len(tok))
	}
	return tok, nil
}

// serverSecurity is the listener security the sidecar and the master
// share: a bearer token, TLS, optional mutual TLS, and the explicit
// opt-out for a public listener without a token.
type serverSecurity struct {
	authTokenFile, tlsCert, tlsKey, tlsCA string
	insecureListen                        bool
}

func (s *serverSecurity) addFlags(fs *flag.FlagSet, what string) {
	fs.StringVar(&s.authTokenFile, "auth-token-file", "", "file holding the bearer token every API and /metrics call must carry (required off loopback)")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key serves HTTPS")
	fs.StringVar(&s.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fs.StringVar(&s.tlsCA, "tls-client-ca", "", "CA bundle (PEM) client certificates must chain to (mutual TLS)")
	fs.BoolVar(&s.insecureListen, "insecure-listen", false, "allow a non-loopback --listen without --auth-token-file (the "+what+" is then open to anyone who reaches it)")
}

// resolve reads the token and TLS files and refuses a public listener
// without a token, before anything is opened or bound.
func (s *serverSecurity) resolve(listen string) (token string, tlsCfg *tls.Config, public bool, err error) {
	if tlsCfg, err = tlsConfig(s); err != nil {
		return "", nil, false, err
	}
	if s.authTokenFile != "" {
		if token, err = readToken(s.authTokenFile); err != nil {
			return "", nil, false, err
		}
	}
	if public, err = publicListen(listen); err != nil {
		return "", nil, false, err
	}
	if public && token == "" && !s.insecureListen {
		return "", nil, false, fmt.Errorf("%w: --listen %s is reachable from other machines: give --auth-token-file (and TLS flags), or --insecure-listen to serve it unauthenticated", errUsage, listen)
	}
	return token, tlsCfg, public, nil
}

func tlsConfig(f *serverSecurity) (*tls.Config, error) {
	if f.tlsCert == "" && f.tlsKey == "" {
		if f.tlsCA != "" {
			return nil, fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key", errUsage)
		}
		return nil, nil
	}
	if f.tlsCert == "" || f.tlsKey == "" {
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS key pair: %v", errUsage, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if f.tlsCA != "" {
		pool, err := loadCAs("--tls-client-ca", f.tlsCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// loadCAs reads the PEM CA bundle a flag names.
func loadCAs(flagName, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errUsage, flagName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s %s holds no PEM certificate", errUsage, flagName, path)
	}
	return pool, nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, f := serveFlagSet(stdout)
	if err := loadConfig(fs, args, os.Getenv); err != nil {
		return err
	}
	if err := f.checkDefaults(); err != nil {
		return err
	}
	// The agent names the node on its lines itself.
	baseLog, err := f.logFlags.logger(stderr, "sidecar", "")
	if err != nil {
		return err
	}
	log := baseLog
	if f.node != "" {
		log = log.With(logKeyNode, f.node)
	}
	// Everything the command line decides is checked before the store is
	// opened and the address bound.
	token, tlsCfg, public, err := f.serverSecurity.resolve(f.listen)
	if err != nil {
		return err
	}
	opts, err := f.sidecarOptions(log)
	if err != nil {
		return err
	}

	store, err := blobstore.Open(ctx, f.store)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer store.Close()
	reg := newRegistry()
	opts.Registerer = reg
	certState, err := checkCertificate(ctx, store, f.allowFencingFailures, log)
	if err != nil {
		return err
	}
	registerCertificateState(reg, certState)
	srv, err := sidecar.New(ctx, store, opts)
	if err != nil {
		return err
	}

	ln, _, err := listenOn(f.listen)
	if err != nil {
		return err
	}
	if public && tlsCfg == nil {
		log.Warn("serving off loopback without TLS: the bearer token and ops cross the network in clear text", "listen", f.listen)
	}
	hs := h2serve.New(h2serve.Options{
		Handler:     srv.Handler(sidecar.HandlerOptions{AuthToken: token, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Pprof: f.pprof}),
		TLS:         tlsCfg,
		IdleTimeout: f.idleTimeout,
		Log:         log,
		BufferReads: true,
	})
	log.Info("sidecar serving", "listen", ln.Addr().String(), "store", blobstore.Redact(f.store), "tls", tlsCfg != nil,
		"auth", token != "", "fencing_mode", f.defaults.Mode.String(), "ack_order", f.defaults.AckOrder.String())
	fmt.Fprintf(stdout, "sidecar listening on %s\n", displayAddr(f.listen, ln))
	errc := hs.Start(ln)
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agentDone, err := f.startAgent(agentCtx, opts.Masters, ln, tlsCfg != nil, srv, baseLog)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	select {
	case err := <-errc:
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("sidecar: serve: %w", err)
	case <-ctx.Done():
	}
	stopAgent()
	<-agentDone
	return f.drain(srv, hs, log)
}

// checkDefaults checks --store and the shards' default fencing mode and
// ack order.
func (f *serveFlags) checkDefaults() error {
	if f.store == "" {
		return fmt.Errorf("%w: --store is required (e.g. --store file://./data)", errUsage)
	}
	var err error
	if f.defaults.Mode, err = parseMode(f.mode); err != nil {
		return err
	}
	if f.defaults.AckOrder, err = parseAckOrder(f.ackOrder); err != nil {
		return err
	}
	return nil
}

// sidecarOptions checks the rest of the command line and turns it into
// the sidecar's options.
func (f *serveFlags) sidecarOptions(log *slog.Logger) (sidecar.Options, error) {
	for _, d := range []struct {
		flag  string
		v, lo time.Duration
	}{{"--shutdown-timeout", f.shutdownTimeout, time.Second}, {"--idle-timeout", f.idleTimeout, time.Second}} {
		if d.v < d.lo || d.v > time.Hour {
			return sidecar.Options{}, fmt.Errorf("%w: %s %v is outside %v..1h", errUsage, d.flag, d.v, d.lo)
		}
	}
	masters, err := f.masterBases()
	if err != nil {
		return sidecar.Options{}, err
	}
	checkpoint, err := checkpointPolicy(f.checkpoint, f.gcAfterCheckpoint)
	if err != nil {
		return sidecar.Options{}, err
	}
	opts := sidecar.Options{
		Node: f.node, Defaults: f.defaults, Limits: f.limits, AllowUnfenced: f.allowUnfenced, Logger: log, StallAfter: f.stallAfter, HydrateDir: f.hydrateDir,
		Cache: f.cache, Checkpoint: checkpoint, Masters: masters,
	}
	if err := opts.Validate(); err != nil {
		return sidecar.Options{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return opts, nil
}

// masterBases checks --master and what it needs (--node, an address the
// master can publish) and returns the masters' base URLs; none without
// --master.
func (f *serveFlags) masterBases() ([]string, error) {
	if f.masters == "" {
		return nil, nil
	}
	if f.node == "" {
		return nil, fmt.Errorf("%w: --master needs --node (the node's name at the master)", errUsage)
	}
	if err := masterLib.ValidateNodeName(f.node); err != nil {
		return nil, fmt.Errorf("%w: --node: %v", errUsage, err)
	}
	var masters []string
	for _, m := range strings.Split(f.masters, ",") {
		base, err := masterBase(m)
		if err != nil {
			return nil, err
		}
		masters = append(masters, base)
	}
	if strings.HasPrefix(f.listen, "unix://") && f.advertise == "" {
		return nil, fmt.Errorf("%w: --master with a unix socket --listen needs --advertise (the URL the master and primaries reach this sidecar at)", errUsage)
	}
	if f.appAdvertise != "" {
		if _, err := advertiseURL(f.appAdvertise, "", nil, false); err != nil {
			return nil, fmt.Errorf("%w (--app-advertise)", err)
		}
	}
	if f.advertise == "" {
		if host, _, err := net.SplitHostPort(f.listen); err == nil {
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				return nil, fmt.Errorf("%w: --master with a wildcard --listen %q needs --advertise (the URL the master publishes to clients for this sidecar's shards)", errUsage, f.listen)
			}
		}
	}
	return masters, nil
}

// checkpointPolicy turns the checkpoint flags (0: never) into the
// sidecar's policy (-1: never).
func checkpointPolicy(p sidecar.CheckpointPolicy, gcAfter bool) (sidecar.CheckpointPolicy, error) {
	switch {
	case p.EveryBytes < 0 || p.Every < 0:
		return p, fmt.Errorf("%w: --checkpoint-every-bytes and --checkpoint-every are 0 (never) or positive", errUsage)
	case p.EveryBytes == 0:
		p.EveryBytes = -1
	}
	if p.Every == 0 {
		p.Every = -1
	}
	p.NoGC = !gcAfter
	return p, nil
}

// startAgent runs the master's agent (serve --master) until ctx ends; the
// channel closes when it has. Without masters it is closed at once.
func (f *serveFlags) startAgent(ctx context.Context, masters []string, ln net.Listener, tls bool, srv *sidecar.Server, log *slog.Logger) (<-chan struct{}, error) {
	done := make(chan struct{})
	if len(masters) == 0 {
		close(done)
		return done, nil
	}
	ag, err := newAgent(f, masters, ln, tls, srv, log)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(done)
		_ = ag.Run(ctx)
	}()
	return done, nil
}

// drain shuts the sidecar down within --shutdown-timeout: the writers
// first, so every pending Append gets its answer, then the HTTP server
// delivers those answers and exits.
func (f *serveFlags) drain(srv *sidecar.Server, hs *h2serve.Server, log *slog.Logger) error {
	log.Info("shutting down: draining appends")
	shutCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	derr := srv.Shutdown(shutCtx)
	herr := hs.Shutdown(shutCtx)
	if err := errors.Join(derr, herr); err != nil {
		return fmt.Errorf("sidecar: shutdown: %w", err)
	}
	log.Info("sidecar stopped")
	return nil
}

// newAgent makes the sidecar a node of the master (serve --master).
func newAgent(f *serveFlags, masters []string, ln net.Listener, tls bool, srv *sidecar.Server, log *slog.Logger) (*agent.Agent, error) {
	hc, copts, err := f.masterConn.dial()
	if err != nil {
		return nil, err
	}
	addr, err := advertiseURL(f.advertise, f.listen, ln, tls)
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Options{
		Server: srv, Node: f.node, Addr: addr, AppAddr: f.appAdvertise, Store: blobstore.Redact(f.store), Masters: masters,
		HTTPClient: hc, ClientOptions: copts, Logger: log,
	})
}

func displayAddr(listen string, ln net.Listener) string {
	if strings.HasPrefix(listen, "unix://") {
		return listen
	}
	return ln.Addr().String()
}

// certUser is the process that checks its store's certificate: the
// sidecar (serve) or the master, whose operation log the store fences.
type certUser struct {
	component string // in the refusal: "sidecar" or "master"
	command   string // what refuses a failing store: "serve" or "the master"
	allowFlag string // the flag that starts anyway
}

var (
	serveCertUser  = certUser{component: "sidecar", command: "serve", allowFlag: "--allow-fencing-failures to serve anyway"}
	masterCertUser = certUser{component: "master", command: "the master", allowFlag: "--allow-fencing-failures to start anyway"}
)

// checkCertificate reads what shardfence conformance recorded in the store
// (one GET, so a healthy store starts as fast as before): a store whose
// certificate records a failed fencing check is refused, naming the check,
// unless allow; a missing, unreadable, foreign or partial certificate is a
// warning, since a store is certified by running the suite, not by serve
// or the master.
func checkCertificate(ctx context.Context, store *blobstore.Container, allow bool, log *slog.Logger) (state string, err error) {
	return serveCertUser.checkCertificate(ctx, store, allow, log)
}

func (u certUser) checkCertificate(ctx context.Context, store *blobstore.Container, allow bool, log *slog.Logger) (state string, err error) {
	cert, err := conformance.ReadCertificate(ctx, store)
	switch {
	case errors.Is(err, conformance.ErrNoCertificate):
		log.Warn("store not certified for fencing: run `shardfence conformance --store URL` once; it records the outcome in the store, and "+u.command+" refuses a store that fails a fencing check", "store", store.String())
		return certMissing, nil
	case err != nil:
		// Store trouble shows again in the precondition probe next.
		log.Warn("conformance certificate not read; run `shardfence conformance --store URL` again", "store", store.String(), "error", err.Error())
		return certUnreadable, nil
	case cert.Store != store.String():
		log.Warn("conformance certificate was recorded for another store or driver; ignoring it: run `shardfence conformance --store URL` on this one", "store", store.String(), "certified", cert.Store)
		return certForeign, nil
	}
	state = certCertified
	if rerr := cert.Refusal(); rerr != nil {
		if !allow {
			return "", fmt.Errorf("%s start-up: refusing %w (fix the store or its driver and run `shardfence conformance --store URL` again, or pass %s)", u.component, rerr, u.allowFlag)
		}
		log.Warn("serving a store that failed fencing checks (--allow-fencing-failures)", "store", store.String(), "error", rerr.Error())
		state = certFailed
	}
	v := cert.Judge()
	if len(v.Unverified) > 0 {
		if state == certCertified {
			state = certUnverified
		}
		log.Warn("conformance certificate does not show every fencing check of this build passed; run `shardfence conformance --store URL` again", "store", store.String(), "unverified", strings.Join(v.Unverified, ","), "issued", cert.Issued)
	}
	if len(v.BlobFailed) > 0 {
		names := make([]string, len(v.BlobFailed))
		for i, ch := range v.BlobFailed {
			names[i] = ch.Name
		}
		log.Warn("store failed blob contract checks the fencing protocol does not rely on (see OPERATIONS.md, known store limitations)", "store", store.String(), "checks", strings.Join(names, ","))
	}
	if len(v.Failed) == 0 && len(v.Unverified) == 0 {
		log.Info("store certified for fencing", "store", store.String(), "issued", cert.Issued, "fencing_suite", conformance.FencingVersion)
	}
	return state, nil
}
