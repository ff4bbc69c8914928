package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/clock"
)

// benchClock paces the bench's waits.
var benchClock = clock.System()

// run is one bench run: the processes and simulated nodes it started, and
// what it measured so far. Its phases run in order, each reading what the
// ones before it left.
type run struct {
	cfg  Config
	res  *Result
	say  func(format string, args ...any)
	hc   *http.Client
	pfc  masterv1connect.MasterFleetServiceClient // the primary's fleet API
	prim Proc
	stby Proc

	// The simulated nodes.
	nodes     []*simNode
	cancels   []context.CancelFunc
	stopNodes context.CancelFunc
	nodesWG   sync.WaitGroup
	pings     atomic.Int64
	stats     stats

	table map[string]*masterv1.ShardInfo // every shard open, before the node is lost
}

// Run runs the bench and prints its table to w.
func Run(ctx context.Context, cfg Config, w io.Writer) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := newRun(cfg)
	defer r.close()
	phases := []func(context.Context) error{r.startMasters, r.startNodes, r.assignShards, r.measureSteady, r.loseNode, r.promote}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			return nil, err
		}
	}
	r.stopNodes()
	printTable(w, cfg, r.res)
	return r.res, nil
}

// withDefaults checks cfg and fills in the defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Nodes < 2 || cfg.Shards < 1 || cfg.LostShards < 1 || cfg.LostShards > cfg.Shards {
		return cfg, errors.New("fleetbench: need at least 2 nodes, 1 shard, and 1..shards lost shards")
	}
	if cfg.Registrations < 1 {
		cfg.Registrations = 32
	}
	if cfg.Assigns < 1 {
		cfg.Assigns = 16
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	return cfg, nil
}

func newRun(cfg Config) *run {
	r := &run{cfg: cfg, res: &Result{Nodes: cfg.Nodes, Shards: cfg.Shards}, hc: &http.Client{Timeout: 30 * time.Second}, stopNodes: func() {}}
	r.say = func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	return r
}

// close stops the nodes, then the masters.
func (r *run) close() {
	r.stopNodes()
	r.nodesWG.Wait()
	if r.stby.Kill != nil {
		r.stby.Kill()
	}
	if r.prim.Kill != nil {
		r.prim.Kill()
	}
}

// startMasters starts the primary, waits until it serves, then the
// standby.
func (r *run) startMasters(ctx context.Context) error {
	primary, err := r.cfg.StartMaster(ctx, "m1", false)
	if err != nil {
		return err
	}
	r.prim = primary
	r.pfc = masterv1connect.NewMasterFleetServiceClient(r.hc, primary.Base)
	if err := poll(ctx, 30*time.Second, 20*time.Millisecond, "the primary to serve", func() bool {
		_, err := r.pfc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
		return err == nil
	}); err != nil {
		return err
	}
	standby, err := r.cfg.StartMaster(ctx, "m2", true)
	if err != nil {
		return err
	}
	r.stby = standby
	r.say("masters serving: primary %s, standby %s", primary.Base, standby.Base)
	return nil
}

// startNodes registers the nodes a few at a time, as a fleet that starts,
// and waits until the primary lists every one active.
func (r *run) startNodes(ctx context.Context) error {
	nctx, stop := context.WithCancel(ctx)
	r.stopNodes = stop
	masters := []string{r.prim.Base, r.stby.Base}
	r.nodes = make([]*simNode, r.cfg.Nodes)
	r.cancels = make([]context.CancelFunc, r.cfg.Nodes)
	start := time.Now()
	sem := make(chan struct{}, r.cfg.Registrations)
	for i := range r.nodes {
		n := newSimNode(fmt.Sprintf("sim-%05d", i), r.cfg.Store, masters, &r.pings, &r.stats)
		r.nodes[i] = n
		c, cancel := context.WithCancel(nctx)
		r.cancels[i] = cancel
		registered := make(chan struct{})
		sem <- struct{}{}
		r.nodesWG.Go(func() { n.run(c, registered) })
		select {
		case <-registered:
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		<-sem
	}
	if err := poll(ctx, 2*time.Minute, 200*time.Millisecond, "every node to be active", func() bool {
		return activeNodes(ctx, r.pfc) == r.cfg.Nodes
	}); err != nil {
		return err
	}
	r.res.Register = time.Since(start)
	r.say("%d nodes active in %v", r.cfg.Nodes, r.res.Register.Round(time.Millisecond))
	return nil
}

// assignShards assigns the shards, the lost node's first, by name, then
// the rest where the master places them, Assigns at once; and waits until
// every one is reported open.
func (r *run) assignShards(ctx context.Context) error {
	lost := r.nodes[0]
	r.res.LostNode, r.res.LostShards = lost.name, r.cfg.LostShards
	start := time.Now()
	var next atomic.Int64
	var assignErr error
	var errOnce sync.Once
	var aw sync.WaitGroup
	for range r.cfg.Assigns {
		aw.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= r.cfg.Shards || ctx.Err() != nil {
					return
				}
				req := assignRequest(i, r.cfg.LostShards, lost.name)
				if err := assign(ctx, r.pfc, req, &r.res.AssignRetries); err != nil {
					errOnce.Do(func() { assignErr = fmt.Errorf("assign %s: %w", req.Shard, err) })
					return
				}
			}
		})
	}
	aw.Wait()
	if assignErr != nil {
		return assignErr
	}
	r.res.Assign = time.Since(start)
	r.say("%d shards assigned in %v (%d answers unavailable, asked again)", r.cfg.Shards, r.res.Assign.Round(time.Millisecond), r.res.AssignRetries.Load())
	if err := poll(ctx, 5*time.Minute, 200*time.Millisecond, "every shard to be reported open", func() bool {
		r.table, _ = listShards(ctx, r.pfc)
		return countOpen(r.table) == r.cfg.Shards
	}); err != nil {
		return fmt.Errorf("%w (%d of %d open)", err, countOpen(r.table), r.cfg.Shards)
	}
	r.res.Opened = time.Since(start)
	r.say("every shard open %v after the first assign", r.res.Opened.Round(time.Millisecond))
	return nil
}

// sample is what one look at both masters and the nodes saw.
type sample struct {
	primary, standby          map[string]*dto.MetricFamily
	pings, pingErrs, sessions int64
	at                        time.Time
}

func (r *run) sample(ctx context.Context) (sample, error) {
	p, err := scrape(ctx, r.hc, r.prim.Base)
	if err != nil {
		return sample{}, err
	}
	s, err := scrape(ctx, r.hc, r.stby.Base)
	if err != nil {
		return sample{}, err
	}
	return sample{primary: p, standby: s, pings: r.pings.Load(), pingErrs: r.stats.pingErrs.Load(), sessions: r.stats.sessions.Load(), at: time.Now()}, nil
}

// measureSteady lets the fleet settle, then measures the steady window
// (pings only), with the primary's CPU profile over it if asked.
func (r *run) measureSteady(ctx context.Context) error {
	if err := clock.Sleep(ctx, benchClock, min(r.cfg.Steady, 5*time.Second)); err != nil {
		return err
	}
	r.say("measuring steady state for %v", r.cfg.Steady)
	profile := r.profile(ctx, r.prim.Base, r.cfg.Steady, "master.pprof")
	s0, err := r.sample(ctx)
	if err != nil {
		return err
	}
	if err := clock.Sleep(ctx, benchClock, r.cfg.Steady); err != nil {
		return err
	}
	s1, err := r.sample(ctx)
	if err != nil {
		return err
	}
	if err := <-profile; err != nil {
		return fmt.Errorf("CPU profile of the primary (does it run with --pprof?): %w", err)
	}
	steadyFigures(r.res, s0, s1, r.cfg.Price)
	r.stats.mu.Lock()
	r.say("steady: %.0f pings/s answered (%d failed, last error %q; %d registrations), primary CPU %.3f s/s, RSS %.0f MiB",
		r.res.PingsPerSec, r.res.PingErrors, r.stats.lastErr, r.res.Registrations, r.res.CPU, r.res.RSS/(1<<20))
	r.stats.mu.Unlock()
	return nil
}

// profile fetches base's CPU profile over d into ProfileDir/file when the
// run asks for profiles; the channel gets the outcome (nil at once
// without ProfileDir).
func (r *run) profile(ctx context.Context, base string, d time.Duration, file string) <-chan error {
	done := make(chan error, 1)
	if r.cfg.ProfileDir == "" {
		done <- nil
		return done
	}
	go func() {
		b, err := fetchProfile(ctx, base, d)
		if err == nil {
			err = os.WriteFile(filepath.Join(r.cfg.ProfileDir, file), b, 0o644)
		}
		done <- err
	}()
	return done
}

// promote kills the primary once its table is read, and measures the
// standby taking over: elected, serving the whole table, and every live
// node back with every shard open.
func (r *run) promote(ctx context.Context) error {
	if err := clock.Sleep(ctx, benchClock, time.Second); err != nil {
		return err
	}
	// (Asked again on an error: at full scale the primary sometimes
	// answered a call right after a long one canceled.)
	var before map[string]*masterv1.ShardInfo
	var err error
	if err := poll(ctx, 30*time.Second, 200*time.Millisecond, "the primary to list its shards", func() bool {
		before, err = listShards(ctx, r.pfc)
		return err == nil
	}); err != nil {
		return err
	}
	sfc := masterv1connect.NewMasterFleetServiceClient(&http.Client{Timeout: 5 * time.Second}, r.stby.Base)
	killed := time.Now()
	r.prim.Kill()
	electedc := r.watchElection(ctx, killed)
	r.say("primary killed; waiting for the standby to serve %d shards", len(before))
	var after map[string]*masterv1.ShardInfo
	if err := poll(ctx, 2*time.Minute, 20*time.Millisecond, "the promoted standby to serve the whole table", func() bool {
		rows, err := listShards(ctx, sfc)
		if err != nil || len(rows) < len(before) {
			return false
		}
		ns, err := sfc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
		if err != nil {
			return false
		}
		after, r.res.PromotedNodes = rows, len(ns.Msg.GetNodes())
		return r.res.PromotedNodes >= r.cfg.Nodes-1
	}); err != nil {
		return err
	}
	r.res.Promote = time.Since(killed)
	r.res.Elected = <-electedc
	// The new primary while the fleet comes back to it.
	profile := r.profile(ctx, r.stby.Base, 10*time.Second, "promoted.pprof")
	r.res.PromotedRows = len(after)
	r.res.SameOwners = sameOwners(before, after)
	r.say("the standby serves the whole table %v after the kill", r.res.Promote.Round(time.Millisecond))
	if err := poll(ctx, 5*time.Minute, 500*time.Millisecond, "every live node to register with the new primary and every shard to be open", func() bool {
		if activeNodes(ctx, sfc) < r.cfg.Nodes-1 {
			return false
		}
		rows, err := listShards(ctx, sfc)
		if err != nil || countOpen(rows) != r.cfg.Shards {
			return false
		}
		r.res.MovedAfter = movedShards(before, rows)
		return true
	}); err != nil {
		return err
	}
	r.res.Refleet = time.Since(killed)
	if err := <-profile; err != nil {
		return fmt.Errorf("CPU profile of the promoted master: %w", err)
	}
	r.say("every live node back and every shard open %v after the kill", r.res.Refleet.Round(time.Millisecond))
	return nil
}

// watchElection asks the standby until it says it is primary and sends
// the time since killed (-1 if it never does within two minutes).
func (r *run) watchElection(ctx context.Context, killed time.Time) <-chan time.Duration {
	finder := client.NewMasters(&http.Client{Timeout: 5 * time.Second}, []string{r.stby.Base})
	electedc := make(chan time.Duration, 1)
	go func() {
		for ctx.Err() == nil && time.Since(killed) < 2*time.Minute {
			if a := finder.Ask(ctx, time.Second); len(a) == 1 && a[0].Err == nil && a[0].Role == masterv1.MasterRole_MASTER_ROLE_PRIMARY {
				electedc <- time.Since(killed)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		electedc <- -1
	}()
	return electedc
}
