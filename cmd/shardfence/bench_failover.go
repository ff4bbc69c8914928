package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/blobstore"
)

const benchFailoverSummary = "automatic failover RTO: SIGKILL a sidecar (or the primary master) under load, time detection and takeover to the first ack on the new owner"

// failoverRun is one measured failover.
type failoverRun struct {
	active, suspicion time.Duration
	// detection: SIGKILL to the takeover visible in the master's table
	// (durable: recorded in the log, the new owner told).
	detection time.Duration
	// open: takeover to the new owner's open writer (claim, seal, restore,
	// reported to the master).
	open time.Duration
	// takeover: takeover to the first append acknowledged on the new owner.
	takeover time.Duration
	// rto: SIGKILL to that first acknowledgement.
	rto   time.Duration
	acked int
}

// benchFailoverConfig is what the bench failover flags ask for.
type benchFailoverConfig struct {
	store string
	pairs [][2]time.Duration // ACTIVE/SUSPICION client TTLs
	runs  int
	ets   []time.Duration // master election timeouts
	mibs  []int           // checkpoint sizes
}

func parseBenchFailover(args []string, stdout io.Writer) (*benchFailoverConfig, error) {
	fs := newFlags("bench failover", stdout)
	cfg := &benchFailoverConfig{}
	fs.StringVar(&cfg.store, "store", "", "store URL the master and sidecars use (default: a file:// store in a temporary directory)")
	ttls := fs.String("ttls", "1s/1s,1s/2s,2s/2s,10s/20s", "comma-separated ACTIVE/SUSPICION client TTL pairs to measure")
	fs.IntVar(&cfg.runs, "runs", 3, "failovers per TTL pair (the table shows the median)")
	elections := fs.String("master-election-timeouts", "1s,3s", "comma-separated --election-timeout values for the master rows (SIGKILL of the primary master, a primary and two standbys); empty skips them")
	sizes := fs.String("checkpoint-mib", "", "comma-separated checkpoint sizes in MiB for rows of shards with a checkpoint, taken over warm and cold (e.g. 10,2048); empty skips them")
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	for _, v := range listItems(*sizes) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: --checkpoint-mib %q: want sizes in MiB", errUsage, v)
		}
		cfg.mibs = append(cfg.mibs, n)
	}
	for _, e := range listItems(*elections) {
		d, err := time.ParseDuration(strings.TrimSpace(e))
		if err != nil || d < 100*time.Millisecond {
			return nil, fmt.Errorf("%w: --master-election-timeouts %q: want durations of at least 100ms", errUsage, e)
		}
		cfg.ets = append(cfg.ets, d)
	}
	if fs.NArg() > 0 || cfg.runs < 1 {
		return nil, fmt.Errorf("%w: bench failover takes flags only, --runs at least 1", errUsage)
	}
	for _, p := range strings.Split(*ttls, ",") {
		a, s, ok := strings.Cut(strings.TrimSpace(p), "/")
		da, err1 := time.ParseDuration(a)
		ds, err2 := time.ParseDuration(s)
		if !ok || err1 != nil || err2 != nil || da <= 0 || ds <= 0 {
			return nil, fmt.Errorf("%w: --ttls %q: want ACTIVE/SUSPICION pairs like 1s/2s", errUsage, p)
		}
		cfg.pairs = append(cfg.pairs, [2]time.Duration{da, ds})
	}
	return cfg, nil
}

func runBenchFailover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchFailover(args, stdout)
	if err != nil {
		return err
	}
	url, cleanup, err := storeOrTemp(cfg.store, "shardfence-bench-failover-")
	if err != nil {
		return err
	}
	defer cleanup()
	c, err := selfCmd()
	if err != nil {
		return err
	}
	var results []failoverRun
	for _, p := range cfg.pairs {
		var rs []failoverRun
		for i := range cfg.runs {
			r, err := failoverOnce(ctx, c, url, p[0], p[1])
			if err != nil {
				return fmt.Errorf("failover with TTLs %v/%v, run %d: %w", p[0], p[1], i+1, err)
			}
			fmt.Fprintf(stderr, "ttls %v/%v run %d: detection %v, takeover %v (open %v), RTO %v\n", p[0], p[1], i+1,
				r.detection.Round(time.Millisecond), r.takeover.Round(time.Millisecond), r.open.Round(time.Millisecond), r.rto.Round(time.Millisecond))
			rs = append(rs, r)
		}
		results = append(results, medianRun(rs))
	}
	printFailoverTable(stdout, url, cfg.runs, results)
	if len(cfg.mibs) > 0 {
		if err := benchSizedTakeovers(ctx, c, url, cfg.mibs, cfg.runs, stdout, stderr); err != nil {
			return err
		}
	}
	if len(cfg.ets) == 0 {
		return nil
	}
	var mrs []masterFailoverRun
	for _, et := range cfg.ets {
		var rs []masterFailoverRun
		for i := range cfg.runs {
			r, err := masterFailoverOnce(ctx, c, url, et)
			if err != nil {
				return fmt.Errorf("master failover with --election-timeout %v, run %d: %w", et, i+1, err)
			}
			fmt.Fprintf(stderr, "election timeout %v run %d: detection %v, promotion %v, first assign %v after the kill, %d shards moved\n", et, i+1,
				r.detection.Round(time.Millisecond), r.promotion.Round(time.Millisecond), r.rto.Round(time.Millisecond), r.moved)
			rs = append(rs, r)
		}
		mrs = append(mrs, medianMasterRun(rs))
	}
	printMasterFailoverTable(stdout, mrs)
	return nil
}

// printFailoverTable prints the sidecar failover rows and the takeover
// target's verdict.
func printFailoverTable(stdout io.Writer, url string, runs int, results []failoverRun) {
	fmt.Fprintf(stdout, "store %s, median of %d failovers per row\n\n", blobstore.Redact(url), runs)
	fmt.Fprintln(stdout, "| active TTL | suspicion TTL | detection | takeover: open | takeover: first ack | RTO |")
	fmt.Fprintln(stdout, "| ---: | ---: | ---: | ---: | ---: | ---: |")
	worst := time.Duration(0)
	for _, r := range results {
		fmt.Fprintf(stdout, "| %v | %v | %s | %s | %s | %s |\n", r.active, r.suspicion, ms(r.detection), ms(r.open), ms(r.takeover), ms(r.rto))
		worst = max(worst, r.takeover)
	}
	verdict := "met"
	if worst >= time.Second {
		verdict = "MISSED"
	}
	fmt.Fprintf(stdout, "\ntarget takeover (assignment to first ack on the new owner) < 1 s: worst median %s (%s)\n", ms(worst), verdict)
}

// printMasterFailoverTable prints the master failover rows.
func printMasterFailoverTable(stdout io.Writer, mrs []masterFailoverRun) {
	fmt.Fprintln(stdout, "\nMaster failover: SIGKILL of the primary master (a primary and two standbys, three sidecars with 1 s + 1 s client TTLs, one auto-restore shard each under append load)")
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| election timeout | detection | promotion | RTO (kill to first acknowledged assign) | target | shards moved |")
	fmt.Fprintln(stdout, "| ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range mrs {
		v := "met"
		if r.rto > r.et+time.Second {
			v = "MISSED"
		}
		fmt.Fprintf(stdout, "| %v | %s | %s | %s | <= %v (%s) | %d |\n", r.et, ms(r.detection), ms(r.promotion), ms(r.rto), r.et+time.Second, v, r.moved)
	}
	fmt.Fprintln(stdout, "\ndetection: the kill to a standby claiming the log (it saw no new generation for the timeout plus its random share); promotion: the claim to serving (seal, replay of what it had not tailed); shards moved: sidecar shards reassigned by the master failover (target 0)")
}

// masterFailoverRun is one measured failover of the primary master.
type masterFailoverRun struct {
	et        time.Duration
	detection time.Duration // SIGKILL to a standby's claim (role opening)
	promotion time.Duration // the claim to serving (role primary)
	rto       time.Duration // SIGKILL to the first acknowledged assign
	moved     int           // sidecar shards whose term or node changed
}

func medianMasterRun(rs []masterFailoverRun) masterFailoverRun {
	out := rs[0]
	out.detection = medianOf(rs, func(r masterFailoverRun) time.Duration { return r.detection })
	out.promotion = medianOf(rs, func(r masterFailoverRun) time.Duration { return r.promotion })
	out.rto = medianOf(rs, func(r masterFailoverRun) time.Duration { return r.rto })
	for _, r := range rs {
		out.moved = max(out.moved, r.moved)
	}
	return out
}

// masterFailoverOnce runs a primary master and two standbys with election
// timeout et, three sidecars each holding one auto-restore shard under
// append load, and a client assigning shards in a loop; it SIGKILLs the
// primary master and times the way back.
func masterFailoverOnce(ctx context.Context, c fleetCmd, url string, et time.Duration) (masterFailoverRun, error) {
	r := masterFailoverRun{et: et}
	f, id := newBenchFleet(c, url)
	defer f.stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	flags := []string{"--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--election-timeout", et.String(), "--log-level", "warn"}
	writers, err := startHAFleet(ctx, f, []string{"m1", "m2", "m3"}, []string{"n1", "n2", "n3"}, flags,
		func(i int, _ string) string { return fmt.Sprintf("bench-%s-%d", id, i) }, nil)
	if err != nil {
		return r, err
	}
	before, err := f.shards(ctx)
	if err != nil {
		return r, err
	}
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(wctx) })
	}
	defer func() { stopWriters(); wg.Wait() }()
	// The client: one assign after another, each to the primary the
	// masters name; the first one acknowledged after the kill ends the RTO.
	probe := &assignProbe{}
	wg.Go(func() { probe.run(wctx, f, id) })
	if err := pollUntil(ctx, "acks on every shard", func() (bool, error) {
		for _, w := range writers {
			if len(w.ackedOps()) < 20 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return r, err
	}
	standbys := map[string]masterv1connect.MasterHAServiceClient{}
	for _, m := range []string{"m2", "m3"} {
		standbys[m] = masterv1connect.NewMasterHAServiceClient(f.http, "http://"+f.masterProc(m).addr)
	}
	f.masterProc("m1").kill()
	killed := time.Now()
	claimed, serving, err := waitStandbyElected(ctx, standbys)
	if err != nil {
		return r, err
	}
	var first time.Time
	if err := pollUntil(ctx, "an assign acknowledged by the new primary", func() (bool, error) {
		var ok bool
		first, ok = probe.firstAfter(killed)
		return ok, nil
	}); err != nil {
		return r, err
	}
	// Two whole client TTLs with the new primary: did a shard move?
	_ = sleepCtx(ctx, 4*time.Second)
	after, err := f.shards(ctx)
	if err != nil {
		return r, err
	}
	r.moved = movedShards(before, after, "bench-")
	stopWriters()
	wg.Wait()
	if _, err := verifyWriters(ctx, f, writers); err != nil {
		return r, err
	}
	r.detection, r.promotion, r.rto = claimed.Sub(killed), serving.Sub(claimed), first.Sub(killed)
	return r, nil
}

// assignProbe assigns probe shards one after another, each to the primary
// the masters name, and records when each was acknowledged.
type assignProbe struct {
	mu   sync.Mutex
	acks []time.Time
}

func (p *assignProbe) run(ctx context.Context, f *procFleet, id string) {
	for i := 0; ctx.Err() == nil; i++ {
		// Each probe shard leaves the table again once acknowledged,
		// so the sidecars open and close it and nothing piles up.
		probe := fmt.Sprintf("probe-%s-%d", id, i)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fc, err := f.fleetClient(cctx)
		if err == nil {
			_, err = fc.AssignShard(cctx, connect.NewRequest(&masterv1.AssignShardRequest{Shard: probe}))
		}
		if err == nil {
			p.mu.Lock()
			p.acks = append(p.acks, time.Now())
			p.mu.Unlock()
			_, _ = fc.UnassignShard(cctx, connect.NewRequest(&masterv1.UnassignShardRequest{Shard: probe}))
		}
		cancel()
		_ = sleepCtx(ctx, 50*time.Millisecond)
	}
}

// firstAfter is the first acknowledgement after t.
func (p *assignProbe) firstAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.acks {
		if a.After(t) {
			return a, true
		}
	}
	return time.Time{}, false
}

// waitStandbyElected polls the standbys until one serves as primary: claimed is
// when one was first seen claiming the log (opening), serving when one
// served.
func waitStandbyElected(ctx context.Context, standbys map[string]masterv1connect.MasterHAServiceClient) (claimed, serving time.Time, err error) {
	err = pollUntil(ctx, "a standby to be elected", func() (bool, error) {
		for _, hc := range standbys {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			res, err := hc.Status(cctx, connect.NewRequest(&masterv1.StatusRequest{}))
			cancel()
			if err != nil {
				continue
			}
			switch res.Msg.GetRole() {
			case masterv1.MasterRole_MASTER_ROLE_OPENING:
				if claimed.IsZero() {
					claimed = time.Now()
				}
			case masterv1.MasterRole_MASTER_ROLE_PRIMARY:
				if claimed.IsZero() {
					claimed = time.Now()
				}
				serving = time.Now()
				return true, nil
			}
		}
		return false, nil
	})
	return claimed, serving, err
}

// movedShards counts the shards named with prefix whose term or node
// differs between two reads of the table.
func movedShards(before, after map[string]*masterv1.ShardInfo, prefix string) int {
	moved := 0
	for name, row := range before {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		a, b := row.GetAssignment(), after[name].GetAssignment()
		if a.GetTerm() != b.GetTerm() || a.GetNode() != b.GetNode() {
			moved++
		}
	}
	return moved
}

// newBenchFleet is an empty fleet on url for one run of a bench, with a
// cluster of its own: bench-ID, ID random, so the runs of a bench (and of
// several benches on one store) do not meet.
func newBenchFleet(c fleetCmd, url string) (*procFleet, string) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	f := newProcFleet(c, url, url)
	f.cluster = "bench-" + id
	return f, id
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// medianOf is the median of one figure of several runs.
func medianOf[R any](rs []R, get func(R) time.Duration) time.Duration {
	v := make([]time.Duration, len(rs))
	for i, r := range rs {
		v[i] = get(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func medianRun(rs []failoverRun) failoverRun {
	out := rs[0]
	out.detection = medianOf(rs, func(r failoverRun) time.Duration { return r.detection })
	out.open = medianOf(rs, func(r failoverRun) time.Duration { return r.open })
	out.takeover = medianOf(rs, func(r failoverRun) time.Duration { return r.takeover })
	out.rto = medianOf(rs, func(r failoverRun) time.Duration { return r.rto })
	return out
}

// failoverOnce runs a master and three sidecars, a writer on one shard of
// node n1, kills n1 and times the way back.
func failoverOnce(ctx context.Context, c fleetCmd, url string, active, suspicion time.Duration) (failoverRun, error) {
	r := failoverRun{active: active, suspicion: suspicion}
	f, id := newBenchFleet(c, url)
	defer f.stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := f.startMaster("--client-active-ttl", active.String(), "--client-suspicion-ttl", suspicion.String()); err != nil {
		return r, err
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := f.startSidecar(n, "--log-level", "warn"); err != nil {
			return r, err
		}
	}
	if err := f.waitNodes(ctx, 3); err != nil {
		return r, err
	}
	shard := "bench-" + id
	if err := f.assign(ctx, shard, "n1", false); err != nil {
		return r, err
	}
	if _, err := f.openOn(ctx, shard, ""); err != nil {
		return r, err
	}
	w := &shardWriter{f: f, shard: shard, http: f.http}
	wctx, stopWriter := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.run(wctx) }()
	defer func() { stopWriter(); <-done }()
	if err := pollUntil(ctx, "acks on n1", func() (bool, error) { return len(w.ackedOps()) >= 50, nil }); err != nil {
		return r, err
	}
	f.sidecar("n1").kill()
	killed := time.Now()
	var assigned time.Time
	err := pollUntil(ctx, "the takeover", func() (bool, error) {
		rows, err := f.shards(ctx)
		if err != nil {
			return false, nil
		}
		row := rows[shard]
		if row.GetAssignment().GetTerm() >= 2 && row.GetDurable() {
			assigned = time.Now()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return r, err
	}
	if _, err := f.openOn(ctx, shard, "n1"); err != nil {
		return r, err
	}
	opened := time.Now()
	var first ackedOp
	if err := pollUntil(ctx, "the first ack on the new owner", func() (bool, error) {
		var ok bool
		first, ok = w.firstAckAfter(killed, "n1")
		return ok, nil
	}); err != nil {
		return r, err
	}
	stopWriter()
	<-done
	if _, err := f.verify(ctx, w); err != nil {
		return r, err
	}
	r.detection = assigned.Sub(killed)
	r.open = opened.Sub(assigned)
	r.takeover = first.at.Sub(assigned)
	r.rto = first.at.Sub(killed)
	r.acked = len(w.ackedOps())
	return r, nil
}

// benchSizedTakeovers prints the rows of shards with a checkpoint of each
// size, taken over warm and cold (median of runs).
func benchSizedTakeovers(ctx context.Context, c fleetCmd, url string, mibs []int, runs int, stdout, stderr io.Writer) error {
	f, id := newBenchFleet(c, url)
	defer f.stop()
	if err := f.startMaster("--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--liveness-interval", "50ms"); err != nil {
		return err
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := f.startSidecar(n, "--log-level", "warn"); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "\nTakeover of a shard with a checkpoint (its owner SIGKILLed; 1 s + 1 s client TTLs): the takeover, durable in the master's log, to the first read served by the new owner (a barrier, the last op, and, warm, the first 64 KiB of the checkpoint read on demand)")
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| checkpoint | open | takeover to first read | detection |")
	fmt.Fprintln(stdout, "| ---: | --- | ---: | ---: |")
	for _, mib := range mibs {
		for _, warm := range []bool{true, false} {
			var takes, dets []time.Duration
			for i := range runs {
				if err := f.waitNodes(ctx, 3); err != nil {
					return err
				}
				r, err := takeoverOfSize(ctx, f, fmt.Sprintf("ckpt-%s-%d-%v-%d", id, mib, warm, i), mib, warm)
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "%d MiB, warm %v, run %d: takeover to first read %v (detection %v)\n", mib, warm, i+1, r.takeover.Round(time.Millisecond), r.detection.Round(time.Millisecond))
				takes, dets = append(takes, r.takeover), append(dets, r.detection)
			}
			slices.Sort(takes)
			slices.Sort(dets)
			mode := "cold"
			if warm {
				mode = "warm"
			}
			fmt.Fprintf(stdout, "| %d MiB | %s | %s | %s |\n", mib, mode, ms(takes[len(takes)/2]), ms(dets[len(dets)/2]))
		}
	}
	return nil
}
