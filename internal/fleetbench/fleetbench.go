// Package fleetbench measures how large a fleet one master carries: a
// primary master and a hot standby, each its own process over a real
// store, and many sidecar nodes simulated in this process that speak the
// master's API as sidecar/agent does (RegisterNode, Ping at the interval
// the master names, WatchAssignments, ReportShard) but open nothing: a
// node reports every shard it is assigned open at once.
//
// It assigns auto-restore shards through AssignShard as `shardfence master
// assign --auto-restore` does, then measures the primary's CPU and memory
// at steady state (pings only), the store requests and bytes both masters
// send per hour, the time to move the shards of one node that stops
// pinging, and the time for the standby, once the primary is killed, to
// serve the whole table.
package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/cost"
)

// Proc is a master process the bench started.
type Proc struct {
	// Base is its API URL (http://HOST:PORT); it serves /metrics and, for
	// the profile, /debug/pprof there.
	Base string
	// Kill SIGKILLs it and waits for it to exit.
	Kill func()
}

// Config is one run.
type Config struct {
	// Nodes and Shards size the fleet; LostShards of the shards are
	// assigned to the node that is then lost (the rest go where the
	// master places them, the least loaded node).
	Nodes, Shards, LostShards int
	// Store is the store URL (redacted) the nodes register: the shards'
	// store. Where names the masters' store in the table.
	Store, Where string
	// StartMaster starts master name of the cluster, a standby or not.
	StartMaster func(ctx context.Context, name string, standby bool) (Proc, error)
	// ElectionTimeout is the masters' --election-timeout, subtracted from
	// the promotion figure.
	ElectionTimeout time.Duration
	// Steady is the measuring window at steady state.
	Steady time.Duration
	// Registrations and Assigns are how many run at once.
	Registrations, Assigns int
	// ProfileDir, when set, receives master.pprof: the primary's CPU
	// profile over the steady window (the master needs --pprof).
	ProfileDir string
	// Price prices the store requests.
	Price cost.Price
	// Progress gets a line per phase.
	Progress io.Writer
}

// Result is what a run measured, and what it checked.
type Result struct {
	Nodes, Shards int
	Register      time.Duration // every node registered and active
	Assign        time.Duration // every shard assigned, durably
	Opened        time.Duration // from the first assign to every shard reported open
	AssignRetries atomic.Int64  // assigns the primary answered unavailable (asked again)
	// Steady state, over the window.
	Window                 time.Duration
	PingsPerSec            float64
	PingErrors             int64   // pings that failed in the window
	Registrations          int64   // nodes that registered (again) in the window
	CPU, StandbyCPU        float64 // CPU seconds per wall second
	RSS, StandbyRSS        float64 // bytes
	Heap                   float64 // the primary's Go heap in use, bytes
	Goroutines             float64
	PutPerHour, GetPerHour float64 // both masters' store requests
	WritesPerHour          float64 // of the PUT-class, the writes (the rest are LISTs)
	BytesPerHour           float64 // body bytes written by both
	LogGensPerHour         float64 // the primary's log generations
	USDPerHour             float64
	// The lost node.
	LostNode     string
	LostShards   int
	ActiveTTL    time.Duration
	SuspicionTT  time.Duration
	Move         time.Duration // its last answered ping to all its shards open elsewhere
	MoveTaken    time.Duration // its last answered ping to all its shards recorded on other nodes
	MoveStalls   int           // liveness monitor stalls meanwhile (each extends every window by the time unobserved)
	FeedRestarts int           // times the routing feed of its shards ended and was followed again
	MovedOpen    int           // of its shards, open on another node at the end
	// Promotion.
	Promote       time.Duration // kill of the primary to the standby serving the whole table
	Elected       time.Duration // kill of the primary to the standby saying it is primary
	PromotedRows  int           // shards in the promoted master's first complete answer
	PromotedNodes int
	SameOwners    int           // of those, with the node, term and allocation the primary had
	Refleet       time.Duration // kill to every live node registered with the new primary and every shard open
	MovedAfter    int           // shards whose owner or term changed from the old primary's table to then
}

// Run runs the bench and prints its table to w.
func Run(ctx context.Context, cfg Config, w io.Writer) (*Result, error) {
	if cfg.Nodes < 2 || cfg.Shards < 1 || cfg.LostShards < 1 || cfg.LostShards > cfg.Shards {
		return nil, errors.New("fleetbench: need at least 2 nodes, 1 shard, and 1..shards lost shards")
	}
	if cfg.Registrations < 1 {
		cfg.Registrations = 32
	}
	if cfg.Assigns < 1 {
		cfg.Assigns = 16
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	res := &Result{Nodes: cfg.Nodes, Shards: cfg.Shards}
	hc := &http.Client{Timeout: 30 * time.Second}

	primary, err := cfg.StartMaster(ctx, "m1", false)
	if err != nil {
		return nil, err
	}
	defer primary.Kill()
	pfc := masterv1connect.NewMasterFleetServiceClient(hc, primary.Base)
	if err := poll(ctx, 30*time.Second, 20*time.Millisecond, "the primary to serve", func() bool {
		_, err := pfc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
		return err == nil
	}); err != nil {
		return nil, err
	}
	standby, err := cfg.StartMaster(ctx, "m2", true)
	if err != nil {
		return nil, err
	}
	defer standby.Kill()
	masters := []string{primary.Base, standby.Base}
	say("masters serving: primary %s, standby %s", primary.Base, standby.Base)

	// The nodes: registered a few at a time, as a fleet that starts.
	var pings atomic.Int64
	var st stats
	nctx, stopNodes := context.WithCancel(ctx)
	defer stopNodes()
	nodes := make([]*simNode, cfg.Nodes)
	cancels := make([]context.CancelFunc, cfg.Nodes)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopNodes()
	start := time.Now()
	sem := make(chan struct{}, cfg.Registrations)
	for i := range nodes {
		n := newSimNode(fmt.Sprintf("sim-%05d", i), cfg.Store, masters, &pings, &st)
		nodes[i] = n
		c, cancel := context.WithCancel(nctx)
		cancels[i] = cancel
		registered := make(chan struct{})
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.run(c, registered)
		}()
		select {
		case <-registered:
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		<-sem
	}
	if err := poll(ctx, 2*time.Minute, 200*time.Millisecond, "every node to be active", func() bool {
		return activeNodes(ctx, pfc) == cfg.Nodes
	}); err != nil {
		return nil, err
	}
	res.Register = time.Since(start)
	say("%d nodes active in %v", cfg.Nodes, res.Register.Round(time.Millisecond))

	// The shards: the lost node's first, by name, then the rest where the
	// master places them.
	lost := nodes[0]
	res.LostNode, res.LostShards = lost.name, cfg.LostShards
	start = time.Now()
	var next atomic.Int64
	var assignErr error
	var errOnce sync.Once
	var aw sync.WaitGroup
	for range cfg.Assigns {
		aw.Add(1)
		go func() {
			defer aw.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Shards || ctx.Err() != nil {
					return
				}
				req := &masterv1.AssignShardRequest{Shard: shardName(i), AutoRestore: true, Takeover: masterv1.TakeoverPoint_TAKEOVER_POINT_OFFLINE}
				if i < cfg.LostShards {
					req.Node = lost.name
				}
				if err := assign(ctx, pfc, req, &res.AssignRetries); err != nil {
					errOnce.Do(func() { assignErr = fmt.Errorf("assign %s: %w", req.Shard, err) })
					return
				}
			}
		}()
	}
	aw.Wait()
	if assignErr != nil {
		return nil, assignErr
	}
	res.Assign = time.Since(start)
	say("%d shards assigned in %v (%d answers unavailable, asked again)", cfg.Shards, res.Assign.Round(time.Millisecond), res.AssignRetries.Load())
	var table map[string]*masterv1.ShardInfo
	if err := poll(ctx, 5*time.Minute, 200*time.Millisecond, "every shard to be reported open", func() bool {
		table, _ = listShards(ctx, pfc)
		return countOpen(table) == cfg.Shards
	}); err != nil {
		return nil, fmt.Errorf("%w (%d of %d open)", err, countOpen(table), cfg.Shards)
	}
	res.Opened = time.Since(start)
	say("every shard open %v after the first assign", res.Opened.Round(time.Millisecond))

	// Steady state: pings only.
	settle := min(cfg.Steady, 5*time.Second)
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	say("measuring steady state for %v", cfg.Steady)
	var profile []byte
	var profErr error
	profDone := make(chan struct{})
	if cfg.ProfileDir != "" {
		go func() {
			defer close(profDone)
			profile, profErr = fetchProfile(ctx, primary.Base, cfg.Steady)
		}()
	} else {
		close(profDone)
	}
	p0, err := scrape(ctx, hc, primary.Base)
	if err != nil {
		return nil, err
	}
	s0, err := scrape(ctx, hc, standby.Base)
	if err != nil {
		return nil, err
	}
	pings0, errs0, sess0, t0 := pings.Load(), st.pingErrs.Load(), st.sessions.Load(), time.Now()
	if err := sleep(ctx, cfg.Steady); err != nil {
		return nil, err
	}
	p1, err := scrape(ctx, hc, primary.Base)
	if err != nil {
		return nil, err
	}
	s1, err := scrape(ctx, hc, standby.Base)
	if err != nil {
		return nil, err
	}
	pings1, errs1, sess1, t1 := pings.Load(), st.pingErrs.Load(), st.sessions.Load(), time.Now()
	<-profDone
	if profErr != nil {
		return nil, fmt.Errorf("CPU profile of the primary (does it run with --pprof?): %w", profErr)
	}
	if profile != nil {
		if err := os.WriteFile(filepath.Join(cfg.ProfileDir, "master.pprof"), profile, 0o644); err != nil {
			return nil, err
		}
	}
	secs := t1.Sub(t0).Seconds()
	res.Window = t1.Sub(t0)
	res.PingsPerSec = float64(pings1-pings0) / secs
	res.PingErrors, res.Registrations = errs1-errs0, sess1-sess0
	res.CPU = delta(p0, p1, "process_cpu_seconds_total", nil) / secs
	res.StandbyCPU = delta(s0, s1, "process_cpu_seconds_total", nil) / secs
	res.RSS, res.StandbyRSS = gauge(p1, "process_resident_memory_bytes"), gauge(s1, "process_resident_memory_bytes")
	res.Heap, res.Goroutines = gauge(p1, "go_memstats_heap_inuse_bytes"), gauge(p1, "go_goroutines")
	putOps := map[string]bool{"Put": true, "CreateIfAbsent": true, "CompareAndSwap": true, "List": true}
	getOps := map[string]bool{"Get": true, "Stat": true, "GetRange": true}
	hour := 3600 / secs
	for _, m := range [][2]map[string]*dto.MetricFamily{{p0, p1}, {s0, s1}} {
		res.PutPerHour += hour * delta(m[0], m[1], metered.RequestsMetric, func(l map[string]string) bool { return putOps[l["op"]] })
		res.WritesPerHour += hour * delta(m[0], m[1], metered.RequestsMetric, func(l map[string]string) bool { return putOps[l["op"]] && l["op"] != "List" })
		res.GetPerHour += hour * delta(m[0], m[1], metered.RequestsMetric, func(l map[string]string) bool { return getOps[l["op"]] })
		res.BytesPerHour += hour * delta(m[0], m[1], metered.BytesMetric, func(l map[string]string) bool { return l["direction"] == "write" })
	}
	res.LogGensPerHour = hour * delta(p0, p1, "shardfence_master_oplog_appends_total", nil)
	res.USDPerHour = res.PutPerHour/1000*cfg.Price.PutPer1k + res.GetPerHour/1000*cfg.Price.GetPer1k
	st.mu.Lock()
	say("steady: %.0f pings/s answered (%d failed, last error %q; %d registrations), primary CPU %.3f s/s, RSS %.0f MiB",
		res.PingsPerSec, res.PingErrors, st.lastErr, res.Registrations, res.CPU, res.RSS/(1<<20))
	st.mu.Unlock()

	// The lost node: it stops pinging and watching (its process froze or
	// its host is gone); its shards move once the master takes it offline.
	mine := map[string]bool{}
	for name, s := range table {
		if s.GetAssignment().GetNode() == lost.name {
			mine[name] = true
		}
	}
	if len(mine) < cfg.LostShards {
		return nil, fmt.Errorf("node %s owns %d shards, not the %d assigned to it", lost.name, len(mine), cfg.LostShards)
	}
	// The master may have placed a few more there (the least loaded).
	res.LostShards = len(mine)
	// The routing feed of its shards tells when each moved and opened,
	// without listing the whole table again and again.
	names := make([]string, 0, len(mine))
	for name := range mine {
		names = append(names, name)
	}
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	// A stream outlives any client timeout: its own client has none.
	feedClient := masterv1connect.NewMasterFleetServiceClient(&http.Client{}, primary.Base)
	feed, err := feedClient.WatchShards(fctx, connect.NewRequest(&masterv1.WatchShardsRequest{Shards: names}))
	if err != nil {
		return nil, err
	}
	routes := map[string]*masterv1.ShardRoute{}
	if !feed.Receive() {
		return nil, fmt.Errorf("the routing feed of the lost node's shards: %v", feed.Err())
	}
	apply := func(m *masterv1.WatchShardsResponse) {
		if m.GetSnapshot() {
			clear(routes)
		}
		for _, r := range m.GetRoutes() {
			routes[r.GetShard()] = r
		}
	}
	apply(feed.Msg())
	before0, _ := scrape(ctx, hc, primary.Base)
	cancels[0]()
	// Where detection starts: the master's last signal from the node
	// (a ping the node gave up on may still have reached it).
	if err := sleep(ctx, 200*time.Millisecond); err != nil {
		return nil, err
	}
	// (When the master does not answer, the node's own last answered
	// ping: a later one may have reached the master, so the figure is an
	// upper bound then.)
	lastPing := lost.lastPingAt()
	if ns, err := pfc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{})); err == nil {
		for _, n := range ns.Msg.GetNodes() {
			if n.GetName() == lost.name {
				lastPing = time.Now().Add(-time.Duration(n.GetLastPingAgeMs()) * time.Millisecond)
			}
		}
	} else {
		say("the master did not list its nodes (%v): counting from the node's last answered ping", err)
	}
	say("node %s stopped (the master last heard from it %v ago), %d shards to move", lost.name, time.Since(lastPing).Round(time.Millisecond), len(mine))
	count := func() (taken, open int) {
		for name := range mine {
			if r := routes[name]; r != nil && !r.GetRemoved() && r.GetNode() != lost.name && r.GetNode() != "" {
				taken++
				if r.GetState() == "open" {
					open++
				}
			}
		}
		return taken, open
	}
	go func() {
		<-time.After(5 * time.Minute)
		stopFeed()
	}()
	for {
		taken, open := count()
		if taken == len(mine) && res.MoveTaken == 0 {
			res.MoveTaken = time.Since(lastPing)
		}
		res.MovedOpen = open
		if open == len(mine) {
			res.Move = time.Since(lastPing)
			break
		}
		for !feed.Receive() {
			// The feed ended (the master cut it, or the connection
			// broke): follow it again; its first message is a snapshot.
			ferr := feed.Err()
			_ = feed.Close()
			if fctx.Err() != nil {
				return nil, fmt.Errorf("the lost node's shards: %d of %d open elsewhere after 5 minutes (the feed: %v)", open, len(mine), ferr)
			}
			res.FeedRestarts++
			_ = sleep(fctx, 100*time.Millisecond)
			feed, err = feedClient.WatchShards(fctx, connect.NewRequest(&masterv1.WatchShardsRequest{Shards: names}))
			if err != nil {
				return nil, err
			}
		}
		apply(feed.Msg())
	}
	stopFeed()
	if after0, err := scrape(ctx, hc, primary.Base); err == nil && before0 != nil {
		res.MoveStalls = int(delta(before0, after0, "shardfence_master_liveness_monitor_stalls_total", nil))
	}
	say("the lost node's shards open elsewhere %v after its last ping (recorded elsewhere after %v; %d monitor stalls; the feed followed again %d times)",
		res.Move.Round(time.Millisecond), res.MoveTaken.Round(time.Millisecond), res.MoveStalls, res.FeedRestarts)
	res.ActiveTTL, res.SuspicionTT = lost.ttls()

	// Promotion: the table as the primary has it, then kill it and ask
	// the standby until it answers with the whole table.
	if err := sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	// (Asked again on an error: at full scale the primary sometimes
	// answered a call right after a long one canceled.)
	var before map[string]*masterv1.ShardInfo
	if err := poll(ctx, 30*time.Second, 200*time.Millisecond, "the primary to list its shards", func() bool {
		before, err = listShards(ctx, pfc)
		return err == nil
	}); err != nil {
		return nil, err
	}
	sfc := masterv1connect.NewMasterFleetServiceClient(&http.Client{Timeout: 5 * time.Second}, standby.Base)
	finder := client.NewMasters(&http.Client{Timeout: 5 * time.Second}, []string{standby.Base})
	killed := time.Now()
	primary.Kill()
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
	say("primary killed; waiting for the standby to serve %d shards", len(before))
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
		after, res.PromotedNodes = rows, len(ns.Msg.GetNodes())
		return res.PromotedNodes >= cfg.Nodes-1
	}); err != nil {
		return nil, err
	}
	res.Promote = time.Since(killed)
	res.Elected = <-electedc
	promotedProf := make(chan error, 1)
	if cfg.ProfileDir != "" {
		// The new primary while the fleet comes back to it.
		go func() {
			b, err := fetchProfile(ctx, standby.Base, 10*time.Second)
			if err == nil {
				err = os.WriteFile(filepath.Join(cfg.ProfileDir, "promoted.pprof"), b, 0o644)
			}
			promotedProf <- err
		}()
	} else {
		promotedProf <- nil
	}
	res.PromotedRows = len(after)
	for name, b := range before {
		a := after[name].GetAssignment()
		if a != nil && a.GetNode() == b.GetAssignment().GetNode() && a.GetTerm() == b.GetAssignment().GetTerm() && a.GetAllocation() == b.GetAssignment().GetAllocation() {
			res.SameOwners++
		}
	}
	say("the standby serves the whole table %v after the kill", res.Promote.Round(time.Millisecond))
	if err := poll(ctx, 5*time.Minute, 500*time.Millisecond, "every live node to register with the new primary and every shard to be open", func() bool {
		if activeNodes(ctx, sfc) < cfg.Nodes-1 {
			return false
		}
		rows, err := listShards(ctx, sfc)
		if err != nil || countOpen(rows) != cfg.Shards {
			return false
		}
		res.MovedAfter = 0
		for name, b := range before {
			if a := rows[name].GetAssignment(); a.GetNode() != b.GetAssignment().GetNode() || a.GetTerm() != b.GetAssignment().GetTerm() {
				res.MovedAfter++
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	res.Refleet = time.Since(killed)
	if err := <-promotedProf; err != nil {
		return nil, fmt.Errorf("CPU profile of the promoted master: %w", err)
	}
	say("every live node back and every shard open %v after the kill", res.Refleet.Round(time.Millisecond))
	stopNodes()
	printTable(w, cfg, res)
	return res, nil
}

// assign assigns as an operator's script would: a master that answers
// unavailable (its leadership lapsed while the store was slow, or its log
// failed) is asked again for up to a minute, and a shard found assigned
// by an earlier attempt whose answer was lost counts as assigned.
func assign(ctx context.Context, fc masterv1connect.MasterFleetServiceClient, req *masterv1.AssignShardRequest, retries *atomic.Int64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := fc.AssignShard(ctx, connect.NewRequest(req))
		switch {
		case err == nil:
			return nil
		case connect.CodeOf(err) == connect.CodeAlreadyExists && strings.Contains(err.Error(), "SHARD_ASSIGNED") || strings.Contains(err.Error(), "already assigned"):
			return nil
		case connect.CodeOf(err) == connect.CodeUnavailable && time.Now().Before(deadline):
			retries.Add(1)
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

func shardName(i int) string { return fmt.Sprintf("fleet-%06d", i) }

func printTable(w io.Writer, cfg Config, r *Result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
	mib := func(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
	fmt.Fprintf(w, "fleet: %d nodes, %d auto-restore shards, masters over %s (a primary and a standby, separate processes)\n\n", r.Nodes, r.Shards, cfg.Where)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "register all\tassign all\tall open\tpings/s\tfailed pings\tprimary CPU (s/s)\tCPU per ping\tprimary RSS\tprimary heap\tgoroutines\tstandby CPU (s/s)\tstandby RSS\t")
	perPing := math.NaN()
	if r.PingsPerSec > 0 {
		perPing = r.CPU / r.PingsPerSec * 1e6
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%d\t%.3f\t%.0f µs\t%s\t%s\t%.0f\t%.3f\t%s\t\n", ms(r.Register), ms(r.Assign), ms(r.Opened), r.PingsPerSec, r.PingErrors, r.CPU, perPing,
		mib(r.RSS), mib(r.Heap), r.Goroutines, r.StandbyCPU, mib(r.StandbyRSS))
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "store PUT-class/h\tof which writes\tGET-class/h\tbytes written/h\tlog generations/h\tUSD/h (%s)\tUSD/month\t\n", cfg.Price.Name())
	fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%.1f MB\t%.0f\t%.4f\t%.2f\t\n", r.PutPerHour, r.WritesPerHour, r.GetPerHour, r.BytesPerHour/1e6, r.LogGensPerHour, r.USDPerHour, r.USDPerHour*730)
	_ = tw.Flush()
	fmt.Fprintln(w)
	detect := r.ActiveTTL + r.SuspicionTT
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lost node's shards\tactive + suspicion TTL\tlast ping to all recorded elsewhere\tlast ping to all open elsewhere\tbeyond detection\tmonitor stalls\t")
	fmt.Fprintf(tw, "%d\t%v\t%s\t%s\t%s\t%d\t\n", r.LostShards, detect, ms(r.MoveTaken), ms(r.Move), ms(r.Move-detect), r.MoveStalls)
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "election timeout\tkill to primary\tkill to whole table served\tminus the timeout\tshards\tnodes\tsame owner and term\tkill to every node back, all open\tshards moved\t")
	fmt.Fprintf(tw, "%v\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t\n", cfg.ElectionTimeout, ms(r.Elected), ms(r.Promote), ms(r.Promote-cfg.ElectionTimeout), r.PromotedRows, r.PromotedNodes, r.SameOwners, ms(r.Refleet), r.MovedAfter)
	_ = tw.Flush()
	fmt.Fprintln(w)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	fmt.Fprintf(w, "target lost node: all open elsewhere within detection + 1 s (%v): %s (%s)\n", detect+time.Second, ms(r.Move), verdict(r.Move <= detect+time.Second))
	fmt.Fprintf(w, "target promotion: whole table served within the election timeout + 2 s (%v): %s (%s)\n", cfg.ElectionTimeout+2*time.Second, ms(r.Promote), verdict(r.Promote <= cfg.ElectionTimeout+2*time.Second))
}

func poll(ctx context.Context, limit, every time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("fleetbench: waited %v for %s", limit, what)
		}
		if err := sleep(ctx, every); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func listShards(ctx context.Context, fc masterv1connect.MasterFleetServiceClient) (map[string]*masterv1.ShardInfo, error) {
	res, err := fc.ListShards(ctx, connect.NewRequest(&masterv1.ListShardsRequest{}))
	if err != nil {
		return nil, err
	}
	out := make(map[string]*masterv1.ShardInfo, len(res.Msg.GetShards()))
	for _, s := range res.Msg.GetShards() {
		out[s.GetAssignment().GetShard()] = s
	}
	return out, nil
}

func countOpen(rows map[string]*masterv1.ShardInfo) int {
	n := 0
	for _, s := range rows {
		if s.GetState() == "open" {
			n++
		}
	}
	return n
}

func activeNodes(ctx context.Context, fc masterv1connect.MasterFleetServiceClient) int {
	res, err := fc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
	if err != nil {
		return -1
	}
	n := 0
	for _, nd := range res.Msg.GetNodes() {
		if nd.GetState() == "active" {
			n++
		}
	}
	return n
}

func scrape(ctx context.Context, hc *http.Client, base string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(res.Body)
}

func fetchProfile(ctx context.Context, base string, d time.Duration) ([]byte, error) {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return nil, err
	}
	res, err := (&http.Client{Timeout: d + time.Minute}).Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/debug/pprof/profile: %s", base, res.Status)
	}
	return io.ReadAll(res.Body)
}

// delta is a counter's increase between two scrapes, over the series keep
// accepts (nil: all).
func delta(a, b map[string]*dto.MetricFamily, name string, keep func(map[string]string) bool) float64 {
	sum := func(fams map[string]*dto.MetricFamily) float64 {
		var s float64
		f := fams[name]
		if f == nil {
			return 0
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if keep != nil && !keep(l) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				s += c.GetValue()
			} else {
				s += m.GetUntyped().GetValue()
			}
		}
		return s
	}
	return sum(b) - sum(a)
}

func gauge(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return math.NaN()
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}
