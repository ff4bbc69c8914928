// Package e2ebench measures appends through a real sidecar process
// (`shardfence serve`) against appends to the in-process translog writer,
// same store, same run (`shardfence bench e2e`): the unary Append, the
// AppendStream RPC (one stream per caller) and the client package (one
// client shared by the callers, coalescing them onto one stream), each at
// several numbers of concurrent callers, over TCP and a unix socket, with
// the CPU time of the bench process (the client) and of the sidecar.
package e2ebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/sidecarapi"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/sidecar"
)

// Sidecar is a `shardfence serve` process the bench started.
type Sidecar struct {
	Addr string // as `serve` printed it: HOST:PORT or unix:///path
	PID  int
	Stop func()
}

// Config is one bench run.
type Config struct {
	// Store is where every path writes, under a random
	// shardfence-bench-e2e/ prefix removed afterwards; StoreURL is the same
	// store for the sidecar processes (not mem://); Where names it.
	Store    *blobstore.Container
	StoreURL string
	Where    string
	// Callers are the numbers of concurrent callers each path runs with;
	// each appends one op of OpSize bytes per call in a closed loop for
	// Duration.
	Callers  []int
	OpSize   int
	Duration time.Duration
	// Transports: "tcp", "unix" or both.
	Transports []string
	// Serve starts `shardfence serve` with env added and args.
	Serve func(ctx context.Context, env []string, args ...string) (Sidecar, error)
	// Linger is the client package's WithLinger.
	Linger time.Duration
	// ProfileDir, when set, gets CPU profiles of the client package's run
	// at the most callers over the first transport: client.pprof (the
	// bench process), server.pprof (the sidecar) and server.allocs.pprof
	// (what the sidecar allocated during the row).
	ProfileDir string
}

// result is one row.
type result struct {
	path, transport string
	callers         int
	ops             int
	elapsed         time.Duration
	p50, p99        time.Duration
	errors          int
	firstErr        error
	clientCPU       time.Duration
	serverCPU       time.Duration // -1: not measured
	// syncs and syncedOps are the writer's syncs during the row and the
	// ops they carried (group commit size: syncedOps/syncs); syncs -1: not
	// known.
	syncs, syncedOps int64
}

// cpuRatio is the CPU per acknowledged op of r (client and sidecar) over
// the in-process writer's at the same callers, "-" when unknown.
func cpuRatio(r, base result) string {
	if r.ops == 0 || base.ops == 0 || base.clientCPU <= 0 {
		return "-"
	}
	cpu := r.clientCPU
	if r.serverCPU > 0 {
		cpu += r.serverCPU
	}
	return fmt.Sprintf("%.2f", (cpu.Seconds()/float64(r.ops))/(base.clientCPU.Seconds()/float64(base.ops)))
}

// opsPerSync is the row's mean group commit, "-" when unknown.
func (r result) opsPerSync() string {
	if r.syncs <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(r.syncedOps)/float64(r.syncs))
}

func (r result) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// appendFunc appends one op; a caller's own (a stream per caller).
type appendFunc func(ctx context.Context, op []byte) error

// loop runs callers closed loops of one append each for d and collects the
// ack latencies; newCaller makes caller c's append and its clean-up.
func loop(ctx context.Context, callers int, d time.Duration, opSize int, newCaller func(c int) (appendFunc, func(), error)) (result, error) {
	fns := make([]appendFunc, callers)
	for c := range callers {
		fn, done, err := newCaller(c)
		if err != nil {
			return result{}, err
		}
		defer done()
		fns[c] = fn
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lat := make([][]time.Duration, callers)
	errs := make([]int, callers)
	firstErrs := make([]error, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			op := make([]byte, opSize)
			for i := 0; ctx.Err() == nil; i++ {
				copy(op, fmt.Sprintf("%d-%d-", c, i))
				t0 := time.Now()
				if err := fns[c](ctx, op); err != nil {
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
	r := result{callers: callers, elapsed: time.Since(start)}
	var all []time.Duration
	for c := range callers {
		all = append(all, lat[c]...)
		r.errors += errs[c]
		if r.firstErr == nil {
			r.firstErr = firstErrs[c]
		}
	}
	r.ops = len(all)
	if len(all) > 0 {
		slices.Sort(all)
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r, nil
}

// selfCPU is the bench process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is a process's CPU time from /proc (Linux), -1 if unknown.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name may hold spaces: fields count from after ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	// USER_HZ is 100 on Linux.
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// withPrefix is rawURL with prefix appended to its path (the store's key
// prefix for file://, s3://, minio://, gs:// and azblob:// alike).
func withPrefix(rawURL, prefix string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	if u.Scheme == "mem" {
		return "", errors.New("bench e2e: a mem:// store cannot be shared with the sidecar process; use file:// or an object store")
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + prefix
	return u.String(), nil
}

// api is the transport of one sidecar process: its address and HTTP/2
// clients for the unary and stream paths.
type api struct {
	transport string
	proc      Sidecar
	addr      string // for client.New
	svc       sidecarv1connect.SidecarServiceClient
	tr        *http.Transport
}

func newAPI(transport string, proc Sidecar) *api {
	a := &api{transport: transport, proc: proc, addr: proc.Addr}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	base := "http://" + proc.Addr
	if path, ok := strings.CutPrefix(proc.Addr, "unix://"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		base = "http://sidecar"
	}
	a.tr = tr
	a.svc = sidecarv1connect.NewSidecarServiceClient(&http.Client{Transport: tr}, base)
	return a
}

// Run measures every path and writes the table to out; progress goes to
// log.
func Run(ctx context.Context, cfg Config, out, log io.Writer) error {
	store, procURL, cleanup, err := benchStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	apis, stop, err := startSidecars(ctx, cfg, procURL)
	defer stop()
	if err != nil {
		return err
	}
	rows, inproc, err := measure(ctx, cfg, store, apis, log)
	if err != nil {
		return err
	}
	printTable(out, cfg, rows, inproc)
	return printTargets(out, rows, inproc, slices.Max(cfg.Callers))
}

// benchStore is where the run writes: a random shardfence-bench-e2e/
// prefix of the store, for this process and (procURL) for the sidecars;
// cleanup deletes what was written there.
func benchStore(ctx context.Context, cfg Config) (store *blobstore.Container, procURL string, cleanup func(), err error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "shardfence-bench-e2e/" + hex.EncodeToString(rnd[:])
	store, err = blobstore.Sub(cfg.Store, prefix)
	if err != nil {
		return nil, "", nil, err
	}
	cleanup = func() {
		items, err := blobstore.ListAll(context.WithoutCancel(ctx), store, "")
		if err == nil {
			for _, it := range items {
				_ = store.Delete(context.WithoutCancel(ctx), it.Key)
			}
		}
	}
	procURL, err = withPrefix(cfg.StoreURL, prefix)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return store, procURL, cleanup, nil
}

// startSidecars starts one sidecar process per transport over procURL;
// stop stops those started (also after an error).
func startSidecars(ctx context.Context, cfg Config, procURL string) (apis []*api, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	sockDir, err := os.MkdirTemp("", "shardfence-bench-e2e-")
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(sockDir) })
	for _, tp := range cfg.Transports {
		p, err := cfg.Serve(ctx, []string{"SHARDFENCE_STORE=" + procURL}, serveArgs(tp, sockDir, cfg.ProfileDir != "")...)
		if err != nil {
			return nil, stop, fmt.Errorf("bench e2e: start the sidecar (%s): %w", tp, err)
		}
		stops = append(stops, p.Stop)
		apis = append(apis, newAPI(tp, p))
	}
	return apis, stop, nil
}

// serveArgs are the `shardfence serve` arguments for transport tp (a unix
// socket in sockDir, or a free TCP port).
func serveArgs(tp, sockDir string, pprof bool) []string {
	listen := "127.0.0.1:0"
	if tp == "unix" {
		listen = "unix://" + filepath.Join(sockDir, "sidecar.sock")
	}
	args := []string{"serve", "--listen", listen, "--log-level", "warn"}
	if pprof {
		args = append(args, "--pprof")
	}
	return args
}

// apiPaths are the paths through the sidecar process, in table order.
var apiPaths = []string{"unary API", "stream API", "client package"}

// measure runs every row: at each number of callers the in-process
// writer, then every path over every transport. inproc is the in-process
// row by callers.
func measure(ctx context.Context, cfg Config, store *blobstore.Container, apis []*api, log io.Writer) (rows []result, inproc map[int]result, err error) {
	inproc = map[int]result{}
	for _, n := range cfg.Callers {
		fmt.Fprintf(log, "%d callers: in-process translog...\n", n)
		r, err := runInProcess(ctx, store, n, cfg)
		if err != nil {
			return nil, nil, err
		}
		inproc[n] = r
		rows = append(rows, r)
		for i, a := range apis {
			profile := cfg.ProfileDir != "" && i == 0 && n == slices.Max(cfg.Callers)
			for _, path := range apiPaths {
				fmt.Fprintf(log, "%d callers: %s over %s...\n", n, path, a.transport)
				r, err := runAPI(ctx, a, path, n, cfg, profile && path == "client package")
				if err != nil {
					return nil, nil, err
				}
				rows = append(rows, r)
			}
		}
	}
	return rows, inproc, ctx.Err()
}

// per1k is seconds of d per 1,000 ops, "-" when unknown.
func per1k(d time.Duration, ops int) string {
	if d < 0 || ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", d.Seconds()*1000/float64(ops))
}

// printTable writes the rows, and the first error of each row that had
// one.
func printTable(out io.Writer, cfg Config, rows []result, inproc map[int]result) {
	fmt.Fprintf(out, "store %s, %d-byte ops, one op per call, %v per row; the sidecar is a `shardfence serve` process (CPU: seconds per 1,000 acknowledged ops)\n\n", cfg.Where, cfg.OpSize, cfg.Duration)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\ttransport\tcallers\tops/s\tx in-process\tack p50\tack p99\tops/sync\tclient CPU\tsidecar CPU\tCPU x in-process\terrors\t")
	for _, r := range rows {
		tp, srv := r.transport, per1k(r.serverCPU, r.ops)
		if tp == "" {
			tp, srv = "-", "-"
		}
		x := r.opsPerSec() / inproc[r.callers].opsPerSec()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%v\t%v\t%s\t%s\t%s\t%s\t%d\t\n", r.path, tp, r.callers, r.opsPerSec(), x,
			r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.opsPerSync(), per1k(r.clientCPU, r.ops), srv,
			cpuRatio(r, inproc[r.callers]), r.errors)
	}
	tw.Flush()
	for _, r := range rows {
		if r.firstErr != nil {
			fmt.Fprintf(out, "%s (%s, %d callers): first error of %d: %v\n", r.path, r.transport, r.callers, r.errors, r.firstErr)
		}
	}
}

// printTargets writes the verdict of every row the target speaks of: the
// stream API and the client package at the most callers.
func printTargets(out io.Writer, rows []result, inproc map[int]result, top int) error {
	base := inproc[top]
	if base.ops == 0 {
		return errors.New("bench e2e: the in-process writer acknowledged no op")
	}
	fmt.Fprintf(out, "\ntarget at %d callers: stream API and client package >= 0.85x in-process ops/s, ack p50 within one store round trip (~ in-process p50 %v) of in-process\n", top, base.p50.Round(10*time.Microsecond))
	for _, r := range rows {
		if !targeted(r, top) {
			continue
		}
		x, met := target(r, base)
		verdict := "met"
		if !met {
			verdict = "MISSED"
		}
		fmt.Fprintf(out, "  %s over %s: %.2fx, p50 +%v (%s)\n", r.path, r.transport, x, (r.p50 - base.p50).Round(10*time.Microsecond), verdict)
	}
	return nil
}

// targeted reports whether the target speaks of row r: the stream API or
// the client package at top callers.
func targeted(r result, top int) bool {
	return r.callers == top && (r.path == "stream API" || r.path == "client package")
}

// target is r's throughput over the in-process base at the same callers,
// and whether it meets the target: at least 0.85x, and an ack p50 no more
// than one store round trip (~ the base's p50) above the base's.
func target(r, base result) (x float64, met bool) {
	x = r.opsPerSec() / base.opsPerSec()
	return x, x >= 0.85 && r.p50-base.p50 <= base.p50
}

// runInProcess is the baseline: the writer recovery opens, called
// directly by the callers.
func runInProcess(ctx context.Context, store *blobstore.Container, n int, cfg Config) (result, error) {
	name := fmt.Sprintf("inproc-%d", n)
	shardStore, err := blobstore.Sub(store, name)
	if err != nil {
		return result{}, err
	}
	sh, err := recovery.Open(ctx, shardStore, name, 1, "bench", recovery.Options{Writer: sidecar.DefaultSettings().WriterOptions()})
	if err != nil {
		return result{}, fmt.Errorf("bench e2e: open the in-process shard: %w", err)
	}
	defer func() { _ = sh.Writer.Close(context.WithoutCancel(ctx)) }()
	cpu0, st0 := selfCPU(), sh.Writer.Stats()
	r, err := loop(ctx, n, cfg.Duration, cfg.OpSize, func(int) (appendFunc, func(), error) {
		return func(ctx context.Context, op []byte) error {
			_, err := sh.Writer.Append(ctx, [][]byte{op})
			return err
		}, func() {}, nil
	})
	st1 := sh.Writer.Stats()
	r.path, r.clientCPU, r.serverCPU = "in-process translog", selfCPU()-cpu0, -1
	r.syncs, r.syncedOps = st1.Syncs-st0.Syncs, st1.Ops-st0.Ops
	return r, err
}

// runAPI runs one path through the sidecar process of a.
func runAPI(ctx context.Context, a *api, path string, n int, cfg Config, profile bool) (result, error) {
	shard := strings.ReplaceAll(fmt.Sprintf("%s-%s-%d", path, a.transport, n), " ", "-")
	if _, err := openShard(ctx, a.svc, shard); err != nil {
		return result{}, fmt.Errorf("bench e2e: open %s: %w", shard, err)
	}
	var newCaller func(int) (appendFunc, func(), error)
	switch path {
	case "unary API":
		newCaller = func(int) (appendFunc, func(), error) {
			return func(ctx context.Context, op []byte) error {
				_, err := a.svc.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: shard, Ops: [][]byte{op}}))
				return err
			}, func() {}, nil
		}
	case "stream API":
		newCaller = func(int) (appendFunc, func(), error) {
			sctx, cancel := context.WithCancel(ctx)
			st := a.svc.AppendStream(sctx)
			var id uint64
			return func(_ context.Context, op []byte) error {
					id++
					req := &sidecarv1.AppendStreamRequest{RequestId: id, Ops: [][]byte{op}}
					if id == 1 {
						req.Shard = shard
					}
					if err := st.Send(req); err != nil {
						_, rerr := st.Receive()
						return fmt.Errorf("send: %w (%v)", err, rerr)
					}
					res, err := st.Receive()
					if err != nil {
						return err
					}
					if res.GetAck() == nil {
						return fmt.Errorf("refused: %s", res.GetRefused().GetMessage())
					}
					return nil
				}, func() {
					_ = st.CloseRequest()
					cancel()
				}, nil
		}
	case "client package":
		c, err := client.New(a.addr, client.WithLinger(cfg.Linger))
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		sh := c.Shard(shard)
		newCaller = func(int) (appendFunc, func(), error) {
			return func(ctx context.Context, op []byte) error {
				_, err := sh.Append(ctx, op)
				return err
			}, func() {}, nil
		}
	}
	stopProfile := func() {}
	if profile {
		var err error
		if stopProfile, err = startProfiles(ctx, a, cfg); err != nil {
			return result{}, err
		}
	}
	st0, serr0 := shardStatus(ctx, a.svc, shard)
	cpu0, srv0 := selfCPU(), procCPU(a.proc.PID)
	r, err := loop(ctx, n, cfg.Duration, cfg.OpSize, newCaller)
	r.clientCPU, r.serverCPU = selfCPU()-cpu0, -1
	if srv1 := procCPU(a.proc.PID); srv0 >= 0 && srv1 >= 0 {
		r.serverCPU = srv1 - srv0
	}
	stopProfile()
	r.syncs = -1
	if st1, serr1 := shardStatus(ctx, a.svc, shard); serr0 == nil && serr1 == nil {
		r.syncs, r.syncedOps = st1.GetSyncs()-st0.GetSyncs(), st1.GetOps()-st0.GetOps()
	}
	r.path, r.transport = path, a.transport
	if _, cerr := a.svc.Close(context.WithoutCancel(ctx), connect.NewRequest(&sidecarv1.CloseRequest{Shard: shard})); cerr != nil && err == nil {
		err = fmt.Errorf("bench e2e: close %s: %w", shard, cerr)
	}
	return r, err
}

// startProfiles profiles the bench process and the sidecar (its
// /debug/pprof, `serve --pprof`) for the row's duration.
func startProfiles(ctx context.Context, a *api, cfg Config) (func(), error) {
	if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(cfg.ProfileDir, "client.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	base := "http://" + a.addr
	if strings.HasPrefix(a.addr, "unix://") {
		base = "http://sidecar"
	}
	secs := max(1, int(cfg.Duration.Seconds()))
	tr := a.tr.Clone()
	tr.Protocols = nil // pprof over HTTP/1.1
	// The sidecar's CPU profile and the allocations it made meanwhile
	// (a delta profile: allocs with seconds).
	fetch := func(path, file string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", base, path, secs), nil)
		if err != nil {
			return err
		}
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, res.Status)
		}
		out, err := os.Create(filepath.Join(cfg.ProfileDir, file))
		if err != nil {
			return err
		}
		_, err = io.Copy(out, res.Body)
		return errors.Join(err, out.Close())
	}
	srvDone := make(chan error, 2)
	go func() { srvDone <- fetch("profile", "server.pprof") }()
	go func() { srvDone <- fetch("allocs", "server.allocs.pprof") }()
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		for range 2 {
			if err := <-srvDone; err != nil {
				fmt.Fprintf(os.Stderr, "bench e2e: the sidecar's profile: %v\n", err)
			}
		}
	}, nil
}

// shardStatus is the shard's status on the sidecar (its writer's syncs
// and ops).
func shardStatus(ctx context.Context, svc sidecarv1connect.SidecarServiceClient, shard string) (*sidecarv1.ShardStatus, error) {
	res, err := svc.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: shard}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetStatus(), nil
}

// openShard opens shard at term 1 and waits for the stream to end.
func openShard(ctx context.Context, svc sidecarv1connect.SidecarServiceClient, shard string) (*sidecarv1.Opened, error) {
	opened, _, err := sidecarapi.OpenShard(ctx, svc, shard, 1, "bench")
	return opened, err
}
