package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// Automatic failover across real processes on MinIO: a master and
// sidecars registered with it (serve --master), clients appending through
// each shard's owner.

// testFleet starts MinIO, a master with the TTLs given and n sidecars.
func testFleet(t *testing.T, prefix string, active, suspicion time.Duration, n int) *procFleet {
	t.Helper()
	if testing.Short() {
		t.Skip("starts MinIO, a master and sidecar processes")
	}
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	f := newProcFleet(thisBinary(), srv.MinioURL(prefix+"-shards"), srv.MinioURL(prefix+"-master"))
	t.Cleanup(func() {
		f.stop()
		if t.Failed() {
			t.Logf("master log:\n%s", tail(f.master.Log(), 60))
			f.mu.Lock()
			for name, p := range f.sidecars {
				t.Logf("sidecar %s log:\n%s", name, tail(p.Log(), 40))
			}
			f.mu.Unlock()
		}
	})
	if err := f.startMaster("--client-active-ttl", active.String(), "--client-suspicion-ttl", suspicion.String(), "--liveness-interval", "50ms"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := f.startSidecar(fmt.Sprint("n", i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := f.waitNodes(ctx, n); err != nil {
		t.Fatal(err)
	}
	return f
}

// writers starts one writer per shard.
func startWriters(t *testing.T, f *procFleet, shards ...string) (map[string]*shardWriter, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	ws := map[string]*shardWriter{}
	for _, s := range shards {
		w := &shardWriter{f: f, shard: s, http: f.http}
		ws[s] = w
		wg.Go(func() { w.run(ctx) })
	}
	return ws, func() { cancel(); wg.Wait() }
}

func waitAcked(t *testing.T, w *shardWriter, n int, by string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	err := pollUntil(ctx, fmt.Sprintf("%d acks of %s by %s", n, w.shard, by), func() (bool, error) {
		c := 0
		for _, a := range w.ackedOps() {
			if by == "" || a.node == by {
				c++
			}
		}
		return c >= n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAutoFailoverMultiProcess: master and three sidecars on MinIO; the
// sidecar holding two shards is SIGKILLed under load. Both shards reopen
// on live sidecars without any command, every acknowledged op is in the
// new owner's lineage, and the killed node, started again, gets none of
// them back.
func TestAutoFailoverMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	f := testFleet(t, "fo", time.Second, time.Second, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	placement := map[string]string{"s1": "n1", "s2": "n1", "s3": "n2", "s4": "n3"}
	for s, n := range placement {
		if err := f.assign(ctx, s, n, false); err != nil {
			t.Fatal(err)
		}
	}
	for s := range placement {
		if _, err := f.openOn(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
	}
	ws, stop := startWriters(t, f, "s1", "s2", "s3", "s4")
	for s, n := range placement {
		waitAcked(t, ws[s], 30, n)
	}
	f.sidecar("n1").kill()
	killedAt := time.Now()
	for _, s := range []string{"s1", "s2"} {
		row, err := f.openOn(ctx, s, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if row.GetAssignment().GetTerm() != 2 {
			t.Fatalf("%s reopened at term %d, want 2", s, row.GetAssignment().GetTerm())
		}
		waitAcked(t, ws[s], 20, row.GetAssignment().GetNode())
		if a, ok := ws[s].firstAckAfter(killedAt, "n1"); ok {
			t.Logf("%s: first ack on %s %v after the kill", s, a.node, a.at.Sub(killedAt).Round(time.Millisecond))
		}
	}
	stop()
	total := 0
	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		n, err := f.verify(ctx, ws[s])
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	t.Logf("%d acknowledged ops, all in their shards' lineages", total)

	// n1 comes back: a new incarnation, none of its shards.
	if _, err := f.startSidecar("n1"); err != nil {
		t.Fatal(err)
	}
	if err := f.waitNodes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several monitor passes with n1 active
	rows, err := f.shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for s, row := range rows {
		if row.GetAssignment().GetNode() == "n1" {
			t.Fatalf("%s was given back to the returning node: %v", s, row.GetAssignment())
		}
	}
}

// TestSidecarPauseMultiProcess: a sidecar stopped (SIGSTOP) for less than
// the active TTL keeps its shard; stopped past the Offline point, its
// shard moves, and once resumed it is fenced in the store and closes the
// shard when the master tells it.
func TestSidecarPauseMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	f := testFleet(t, "pause", 3*time.Second, 2*time.Second, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := f.assign(ctx, "p1", "n1", false); err != nil {
		t.Fatal(err)
	}
	row, err := f.openOn(ctx, "p1", "")
	if err != nil {
		t.Fatal(err)
	}
	ws, stop := startWriters(t, f, "p1")
	defer stop()
	waitAcked(t, ws["p1"], 20, "n1")

	// A short pause: nothing moves.
	n1 := f.sidecar("n1")
	if err := n1.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := n1.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	before := len(ws["p1"].ackedOps())
	waitAcked(t, ws["p1"], before+20, "n1")
	rows, err := f.shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := rows["p1"].GetAssignment(); a.GetNode() != "n1" || a.GetTerm() != row.GetAssignment().GetTerm() {
		t.Fatalf("after a pause shorter than the active TTL: %v", a)
	}

	// A long pause: the shard moves to n2 at term 2.
	if err := n1.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	moved, err := f.openOn(ctx, "p1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c := sidecarv1connect.NewSidecarServiceClient(f.http, "http://"+n1.addr)
	_, aerr := c.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "p1", Ops: [][]byte{[]byte("zombie")}}))
	if aerr == nil {
		t.Fatal("the resumed sidecar acknowledged an append after its shard moved")
	}
	// Usually fenced; the shard may be closing or closed already, and a
	// request the pause cut off may have failed the writer first. What
	// matters is that nothing is acknowledged, and verify below checks
	// every acknowledgement against the new owner's lineage.
	t.Logf("append on the resumed sidecar: %s (%v)", sidecarproc.ReasonOf(aerr), aerr)
	err = pollUntil(ctx, "the resumed sidecar to close p1", func() (bool, error) {
		_, err := c.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: "p1"}))
		return sidecarproc.ReasonOf(err) == "not_open", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitAcked(t, ws["p1"], 20, moved.GetAssignment().GetNode())
	stop()
	if _, err := f.verify(ctx, ws["p1"]); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(n1.Log(), "closed a shard the master moved elsewhere") {
		t.Fatal("the resumed sidecar did not log that it closed the shard it lost")
	}
}

// TestMasterPauseMultiProcess: a master stopped (SIGSTOP) for longer than
// both TTLs, then resumed, does not judge its clients on the time it did
// not observe: the sidecars keep pinging, and none goes offline or loses a
// shard.
func TestMasterPauseMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	f := testFleet(t, "mpause", time.Second, time.Second, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for s, n := range map[string]string{"m1": "n1", "m2": "n2"} {
		if err := f.assign(ctx, s, n, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"m1", "m2"} {
		if _, err := f.openOn(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.master.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if err := f.master.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Watch for a while: no node leaves active, no shard moves.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		nodes, err := f.nodes(ctx)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, n := range nodes {
			if n.GetState() == "offline" {
				t.Fatalf("node %s went offline after the master's pause: %v", n.GetName(), n)
			}
		}
		rows, err := f.shards(ctx)
		if err == nil {
			for s, r := range rows {
				if r.GetAssignment().GetTerm() != 1 {
					t.Fatalf("shard %s moved after the master's pause: %v", s, r.GetAssignment())
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(f.master.Log(), "liveness monitor did not observe") {
		t.Fatal("the master did not notice its own stall")
	}
}

// The fleet's admin commands: assign, nodes, shards, drain (a
// source-performed handoff, same term), undrain, unassign.
func TestMasterFleetCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master and sidecar processes")
	}
	url := "file://" + t.TempDir()
	f := newProcFleet(thisBinary(), url, url)
	t.Cleanup(f.stop)
	if err := f.startMaster(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := f.startSidecar(n); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := f.waitNodes(ctx, 2); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		var out, errOut syncBuffer
		if err := runMaster(ctx, append(args, "--addr", f.base), &out, &errOut); err != nil {
			t.Fatalf("master %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String()
	}
	if out := run("assign", "--shard", "c1", "--node", "n1", "--auto-restore", "--takeover", "suspected"); !strings.Contains(out, "assigned c1 to node n1 at term 1") {
		t.Fatalf("assign: %q", out)
	}
	if out := run("assign", "--shard", "c2", "--unfenced"); !strings.Contains(out, "assigned c2") {
		t.Fatalf("assign unfenced: %q", out)
	}
	if _, err := f.openOn(ctx, "c1", ""); err != nil {
		t.Fatal(err)
	}
	nodes := run("nodes")
	for _, want := range []string{"NODE", "n1", "n2", "active"} {
		if !strings.Contains(nodes, want) {
			t.Fatalf("nodes table lacks %q:\n%s", want, nodes)
		}
	}
	shards := run("shards")
	for _, want := range []string{"SHARD", "c1", "open", "at suspected", "off (unfenced)"} {
		if !strings.Contains(shards, want) {
			t.Fatalf("shards table lacks %q:\n%s", want, shards)
		}
	}
	if out := run("drain", "--node", "n1", "--wait", "60s"); !strings.Contains(out, "node n1 holds no shard") {
		t.Fatalf("drain: %q\n%s", out, run("shards"))
	}
	row, err := f.openOn(ctx, "c1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if row.GetAssignment().GetTerm() != 1 || row.GetAssignment().GetNode() != "n2" {
		t.Fatalf("after the drain: %v (a handoff keeps the term)", row.GetAssignment())
	}
	run("undrain", "--node", "n1")
	if out := run("unassign", "--shard", "c1"); !strings.Contains(out, "unassigned c1") {
		t.Fatalf("unassign: %q", out)
	}
	var js syncBuffer
	if err := runMaster(ctx, []string{"shards", "--json", "--addr", f.base}, &js, &js); err != nil || strings.Contains(js.String(), "\"c1\"") {
		t.Fatalf("shards --json after unassign: %v\n%s", err, js.String())
	}
}

// A warm takeover does not wait for the checkpoint: the new owner of a
// shard serves its first read (a barrier, the log after the checkpoint, the
// checkpoint's first block) having fetched the same few blocks whether the
// checkpoint holds 8 MiB or 256 MiB, while a cold takeover holds all of it
// first. The sidecars run with background hydration off, so what the new
// owner holds and fetched at the first read is what the takeover needed,
// not what a background copy got to by then on this machine. How long each
// takes is measured by `shardfence bench failover` (docs/BENCHMARKS.md);
// here the times are only logged.
func TestWarmTakeoverIsSizeIndependentMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master and sidecar processes")
	}
	url := "file://" + t.TempDir()
	f := newProcFleet(thisBinary(), url, url)
	f.sidecarArgs = []string{"--warm-hydrate-parallelism", "-1"}
	t.Cleanup(f.stop)
	if err := f.startMaster("--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--liveness-interval", "50ms"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := f.startSidecar(n); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if err := f.waitNodes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	run := func(name string, mib int, warm bool) *sidecarv1.ShardStatus {
		t.Helper()
		if err := f.waitNodes(ctx, 3); err != nil {
			t.Fatal(err)
		}
		r, err := takeoverOfSize(ctx, f, name, mib, warm)
		if err != nil {
			t.Fatal(err)
		}
		st := r.after
		t.Logf("%d MiB checkpoint, warm %v: takeover to the first read %v (detection %v); then locality %q, %d of %d bytes local, %d blocks fetched",
			mib, warm, r.takeover.Round(time.Millisecond), r.detection.Round(time.Millisecond),
			st.GetLocality(), st.GetCheckpointBytesLocal(), st.GetCheckpointBytesTotal(), st.GetFetches())
		return st
	}
	for _, c := range []struct {
		name string
		mib  int
	}{{"small", 8}, {"large", 256}} {
		st := run(c.name, c.mib, true)
		if st.GetLocality() != "partial" || st.GetCheckpointBytesLocal() != 0 {
			t.Fatalf("warm takeover of %d MiB: the new owner was %q with %d bytes local at its first read, want partial with none", c.mib, st.GetLocality(), st.GetCheckpointBytesLocal())
		}
		if total := st.GetCheckpointBytesTotal(); total < int64(c.mib)<<20 {
			t.Fatalf("warm takeover of %d MiB: the checkpoint served holds %d bytes", c.mib, total)
		}
		// The first block, and at most a retried fetch or two of it.
		if n := st.GetFetches(); n < 1 || n > 3 {
			t.Fatalf("warm takeover of %d MiB: the first read fetched %d blocks from the store, want 1 to 3", c.mib, n)
		}
	}
	if st := run("cold", 256, false); st.GetLocality() != "" || st.GetFetches() != 0 {
		t.Fatalf("cold takeover of 256 MiB: locality %q, %d blocks fetched on demand; a cold open restores the checkpoint whole", st.GetLocality(), st.GetFetches())
	}
}
