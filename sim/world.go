package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/ha"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/sidecar/agent"
)

// Timing is the cluster's configuration in a run: the shortest TTLs the
// master allows a node (1 s active + 1 s suspected), which leave the least
// room for a failover, and an election timeout of a second.
type Timing struct {
	ActiveTTL, SuspicionTTL, ElectionTimeout time.Duration
	// AppendEvery paces each shard's primary.
	AppendEvery time.Duration
}

// Proc is one incarnation of a process: a master (ha.Node) or a sidecar
// (sidecar.Server and its agent.Agent).
type Proc struct {
	Name string
	Inc  int // incarnation, from 1
	ctx  context.Context
	stop context.CancelFunc
	dead atomic.Bool
	done chan struct{} // closed when its Run returned

	node *ha.Node
	// srv is set once the sidecar started (sidecar.New reads the store,
	// which may hang while the process is paused or its store stalled).
	srv atomic.Pointer[sidecar.Server]
}

func (p *Proc) alive() bool { return !p.dead.Load() }

// World is one run: the processes, the network, the store and the faults
// in force.
type World struct {
	seed   uint64
	shape  Shape
	timing Timing
	dir    string
	start  time.Time
	net    *Network
	root   *blobstore.Container // the store every process shares
	log    *slog.Logger

	mu      sync.Mutex
	procs   map[string]*Proc // the current incarnation of each name
	old     []*Proc          // every incarnation started, for teardown
	paused  map[string]int
	cuts    map[[2]string]int // sorted pair; b "" is every link of a
	stalled map[string]int
	erring  map[string]int
	changed chan struct{} // closed and renewed at every change of the faults
	links   map[string]*rand.Rand
	trace   []string
	stats   Stats
}

func newWorld(seed uint64, s Shape, t Timing, root *blobstore.Container, dir string) *World {
	w := &World{seed: seed, shape: s, timing: t, dir: dir, start: time.Now(), root: root, log: Logger,
		procs: map[string]*Proc{}, paused: map[string]int{}, cuts: map[[2]string]int{}, stalled: map[string]int{}, erring: map[string]int{},
		changed: make(chan struct{}), links: map[string]*rand.Rand{}}
	w.net = newNetwork(w)
	return w
}

// Logger is the processes' log; tests set it to see one seed's logs.
var Logger = slog.New(slog.DiscardHandler)

// now is the run's time, from its start.
func (w *World) now() time.Duration { return time.Since(w.start) }

// Note adds a line to the trace.
func (w *World) Note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.trace = append(w.trace, fmt.Sprintf("t=%-9v ", w.now().Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

func (w *World) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func pair(a, b string) [2]string {
	if b != "" && b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// blockedLocked says whether a message from a to b waits now.
func (w *World) blockedLocked(a, b string) bool {
	return w.paused[a] > 0 || w.paused[b] > 0 || w.cuts[pair(a, b)] > 0 || w.cuts[[2]string{a, ""}] > 0 || w.cuts[[2]string{b, ""}] > 0
}

// waitLink waits while the link from p to host is paused or cut.
func (w *World) waitLink(ctx context.Context, p *Proc, to string) error {
	return w.waitWhile(ctx, p, errCut, func() bool { return w.blockedLocked(p.Name, to) })
}

// waitWhile waits while blockedLocked (called with w.mu held) says so,
// waking at each change of the world; it returns dead once p's
// incarnation is, and the cause once ctx ends.
func (w *World) waitWhile(ctx context.Context, p *Proc, dead error, blockedLocked func() bool) error {
	for {
		if !p.alive() {
			return dead
		}
		w.mu.Lock()
		blocked, ch := blockedLocked(), w.changed
		w.mu.Unlock()
		if !blocked {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.ctx.Done():
			return dead
		}
	}
}

// rngOf is the random source of one stream of decisions (a link, a
// process's store requests): seeded by the run's seed and the stream's
// name, so the decisions of one stream do not depend on how other
// streams' goroutines interleaved.
func (w *World) rngOf(name string) *rand.Rand {
	r := w.links[name]
	if r == nil {
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		r = rand.New(rand.NewPCG(w.seed, h.Sum64()))
		w.links[name] = r
	}
	return r
}

// linkDecision is one message's delay and whether it is dropped (only
// while faults are being injected: the quiet period drops nothing).
func (w *World) linkDecision(from, to string) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rngOf("net " + from + ">" + to)
	d := time.Duration(200+r.IntN(4800)) * time.Microsecond
	drop := r.IntN(1000) < 5 && w.inWindowLocked()
	if drop {
		w.stats.Dropped++
	}
	w.stats.Messages++
	return d, drop
}

func (w *World) inWindowLocked() bool {
	n := w.now()
	return n >= w.shape.Warmup && n < w.shape.Warmup+w.shape.Window
}

// storeOf is the store as process p reaches it: every request takes a
// little time, hangs while p is paused or its store stalled, and may fail
// while store errors are injected for p.
func (w *World) storeOf(p *Proc) *blobstore.Container {
	return w.root.With("sim", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		if err := w.waitStore(ctx, p); err != nil {
			return blobstore.Result{}, err
		}
		w.mu.Lock()
		r := w.rngOf("store " + p.Name)
		d := time.Duration(500+r.IntN(4500)) * time.Microsecond
		roll := r.IntN(100)
		erring := w.erring[p.Name] > 0
		w.stats.StoreRequests++
		w.mu.Unlock()
		if err := sleepCtx(ctx, d); err != nil {
			return blobstore.Result{}, err
		}
		if err := w.waitStore(ctx, p); err != nil {
			return blobstore.Result{}, err
		}
		switch {
		case erring && roll < 20:
			return blobstore.Result{}, blobstore.Unavailable(errors.New("sim: injected store error"))
		case erring && roll < 30 && call.Op.Mutates():
			res, err := next(ctx, call)
			if err == nil {
				if res.Reader != nil {
					_ = res.Reader.Close()
				}
				return blobstore.Result{}, blobstore.Ambiguous(errors.New("sim: injected lost response"))
			}
			return res, err
		}
		return next(ctx, call)
	})
}

// waitStore waits while p is paused or its store stalled; a dead
// incarnation's requests fail.
func (w *World) waitStore(ctx context.Context, p *Proc) error {
	return w.waitWhile(ctx, p, errCrashed, func() bool { return w.paused[p.Name] > 0 || w.stalled[p.Name] > 0 })
}

// errCrashed is what a dead incarnation's store requests fail with.
var errCrashed = blobstore.Unavailable(errors.New("sim: the process crashed"))

func (w *World) url(name string) string { return "http://" + name }

func (w *World) masterURLs() []string {
	var out []string
	for _, n := range w.shape.masterNames() {
		out = append(out, w.url(n))
	}
	return out
}

// newProc registers a new incarnation of name.
func (w *World) newProc(name string) *Proc {
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	defer w.mu.Unlock()
	inc := 1
	if old := w.procs[name]; old != nil {
		inc = old.Inc + 1
	}
	p := &Proc{Name: name, Inc: inc, ctx: ctx, stop: cancel, done: make(chan struct{})}
	w.procs[name] = p
	w.old = append(w.old, p)
	return p
}

func (w *World) proc(name string) *Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.procs[name]
}

// startMaster starts a master: an ha.Node over the store, served at its
// name (as cmd/shardfence's runMaster mounts it).
func (w *World) startMaster(name string, standby bool) error {
	p := w.newProc(name)
	store, err := blobstore.Sub(w.storeOf(p), "masters")
	if err != nil {
		return err
	}
	cfg := master.Config{Shards: 16, Liveness: master.LivenessConfig{ActiveTTL: w.timing.ActiveTTL, SuspicionTTL: w.timing.SuspicionTTL, MonitorInterval: 100 * time.Millisecond}}
	n, err := ha.New(ha.Options{Store: store, Cluster: "sim", Standby: standby, Node: name, Advertise: w.url(name),
		ElectionTimeout: w.timing.ElectionTimeout, ElectionSeed: w.seed*31 + uint64(len(w.old)), Config: cfg,
		MasterOptions: master.Options{Logger: w.log}, Dir: w.dir, Log: w.log})
	if err != nil {
		return err
	}
	p.node = n
	mux := http.NewServeMux()
	n.Mount(mux)
	w.net.serve(name, p, mux)
	go func() {
		defer close(p.done)
		_ = n.Run(p.ctx)
	}()
	return nil
}

// startSidecar starts a sidecar and its agent (as cmd/shardfence's serve
// --master wires them), served at its name. It starts in a goroutine of
// its own: sidecar.New probes the store, which may hang.
func (w *World) startSidecar(name string) error {
	p := w.newProc(name)
	store, err := blobstore.Sub(w.storeOf(p), "shards")
	if err != nil {
		return err
	}
	go func() {
		defer close(p.done)
		var srv *sidecar.Server
		for {
			// A start-up that fails is tried again, as a service
			// manager restarts the process.
			srv, err = sidecar.New(p.ctx, store, sidecar.Options{Node: name, HydrateDir: w.dir, Masters: w.masterURLs(), Logger: w.log})
			if err == nil {
				break
			}
			w.Note("%s did not start (tried again in 1s): %v", name, err)
			if sleepCtx(p.ctx, time.Second) != nil {
				return
			}
		}
		ag, err := agent.New(agent.Options{Server: srv, Node: name, Addr: w.url(name), Store: "sim://shards", Masters: w.masterURLs(),
			HTTPClient: w.net.Client(p), Logger: w.log})
		if err != nil {
			w.Note("%s's agent did not start: %v", name, err)
			return
		}
		p.srv.Store(srv)
		if p.ctx.Err() == nil {
			w.net.serve(name, p, srv.Handler(sidecar.HandlerOptions{}))
		}
		_ = ag.Run(p.ctx)
	}()
	return nil
}

// crash stops the current incarnation of name: it answers nothing more,
// its store requests fail, its calls end. Its memory is gone; the store
// keeps what it wrote.
func (w *World) crash(name string) {
	p := w.proc(name)
	if p == nil || !p.alive() {
		return
	}
	p.dead.Store(true)
	w.net.unserve(name)
	p.stop()
	w.net.cut(name, "")
	w.mu.Lock()
	w.notifyLocked()
	w.mu.Unlock()
}

func (w *World) restart(name string) error {
	if isMaster(name) {
		return w.startMaster(name, true)
	}
	return w.startSidecar(name)
}

func isMaster(name string) bool { return len(name) > 0 && name[0] == 'm' }

// teardown stops every incarnation and waits for them.
func (w *World) teardown() {
	w.mu.Lock()
	old := append([]*Proc(nil), w.old...)
	w.mu.Unlock()
	for _, p := range old {
		p.dead.Store(true)
		p.stop()
	}
	w.mu.Lock()
	w.notifyLocked()
	w.mu.Unlock()
	w.net.cut("", "")
	for _, p := range old {
		<-p.done
		if srv := p.srv.Load(); srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = srv.Shutdown(ctx)
			cancel()
		}
	}
}

// sortedProcs is the current incarnations, by name.
func (w *World) sortedProcs() []*Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*Proc, 0, len(w.procs))
	for _, p := range w.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
