package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

const benchFailoverSummary = "automatic failover RTO: SIGKILL a sidecar under load, time detection and takeover to the first ack on the new owner"

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

func runBenchFailover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench failover", stderr)
	store := fs.String("store", "", "store URL the master and sidecars use (default: a file:// store in a temporary directory)")
	ttls := fs.String("ttls", "1s/1s,1s/2s,2s/2s,10s/20s", "comma-separated ACTIVE/SUSPICION client TTL pairs to measure")
	runs := fs.Int("runs", 3, "failovers per TTL pair (the table shows the median)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *runs < 1 {
		return fmt.Errorf("%w: bench failover takes flags only, --runs at least 1", errUsage)
	}
	var pairs [][2]time.Duration
	for _, p := range strings.Split(*ttls, ",") {
		a, s, ok := strings.Cut(strings.TrimSpace(p), "/")
		da, err1 := time.ParseDuration(a)
		ds, err2 := time.ParseDuration(s)
		if !ok || err1 != nil || err2 != nil || da <= 0 || ds <= 0 {
			return fmt.Errorf("%w: --ttls %q: want ACTIVE/SUSPICION pairs like 1s/2s", errUsage, p)
		}
		pairs = append(pairs, [2]time.Duration{da, ds})
	}
	url, cleanup, err := storeOrTemp(*store, "shardfence-bench-failover-")
	if err != nil {
		return err
	}
	defer cleanup()
	c, err := selfCmd()
	if err != nil {
		return err
	}
	var results []failoverRun
	for _, p := range pairs {
		var rs []failoverRun
		for i := range *runs {
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
	fmt.Fprintf(stdout, "store %s, median of %d failovers per row\n\n", blobstore.Redact(url), *runs)
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
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func medianRun(rs []failoverRun) failoverRun {
	pick := func(get func(failoverRun) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	out := rs[0]
	out.detection = pick(func(r failoverRun) time.Duration { return r.detection })
	out.open = pick(func(r failoverRun) time.Duration { return r.open })
	out.takeover = pick(func(r failoverRun) time.Duration { return r.takeover })
	out.rto = pick(func(r failoverRun) time.Duration { return r.rto })
	return out
}

// failoverOnce runs a master and three sidecars, a writer on one shard of
// node n1, kills n1 and times the way back.
func failoverOnce(ctx context.Context, c fleetCmd, url string, active, suspicion time.Duration) (failoverRun, error) {
	r := failoverRun{active: active, suspicion: suspicion}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	f := newProcFleet(c, url, url)
	f.cluster = "bench-" + id
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
