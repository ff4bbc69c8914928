package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/harness/demo"
)

// runDemoMasterFailover shows a master failover with real processes: a
// primary master and two standbys, three sidecars that list all three, a
// shard on each under append load; the primary master is SIGKILLed, a
// standby is elected with no command, the sidecars follow it, no shard
// moves, and the killed master comes back as a standby by itself.
func runDemoMasterFailover(ctx context.Context, c fleetCmd, url string, phase time.Duration, stdout io.Writer) error {
	const election = time.Second
	ctx, f, tl, where, stopFleet, err := demoFleet(ctx, c, url, stdout)
	if err != nil {
		return err
	}
	defer stopFleet()
	flags := []string{"--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--liveness-interval", "50ms", "--election-timeout", election.String(), "--log-level", "warn"}
	tl.Say("store %s; starting master M1 and standbys M2, M3 (election timeout %v; client TTLs 1s + 1s)", where, election)
	writers, err := startHAFleet(ctx, f, []string{"M1", "M2", "M3"}, []string{"A", "B", "C"}, flags,
		func(_ int, node string) string { return "s-" + node },
		func() { tl.Say("sidecars A, B and C registered with M1 (each lists M1, M2 and M3)") })
	if err != nil {
		return err
	}
	tl.Say("M1 assigned shards s-A, s-B, s-C (auto_restore) to A, B, C at term 1; clients append to each")
	wctx, cancelWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(wctx) })
	}
	stopWriters := func() { cancelWriters(); wg.Wait() }
	defer stopWriters()
	if err := demo.Sleep(ctx, phase); err != nil {
		return err
	}
	before, err := f.shards(ctx)
	if err != nil {
		return err
	}
	f.masterProc("M1").kill()
	killed := time.Now()
	tl.Say("SIGKILL master M1")
	winner, err := demoElection(ctx, f, tl, killed)
	if err != nil {
		return err
	}
	if err := demo.Sleep(ctx, time.Second+phase); err != nil {
		return err
	}
	if err := demoNoShardMoved(ctx, f, before, writers); err != nil {
		return err
	}
	tl.Say("after two whole client TTLs under %s: every shard still open on its node at term 1 (a master failover moves no shard of a live node)", winner)
	stopWriters()
	total, err := verifyWriters(ctx, f, writers)
	if err != nil {
		return err
	}
	tl.Say("acknowledged %d appends across the failover; every one is in its shard's lineage: lost 0", total)
	if _, err := f.startMasterNamed("M1", flags...); err != nil {
		return err
	}
	if err := pollUntil(ctx, "M1 to follow", func() (bool, error) {
		st, err := masterStatusOf(ctx, f, "M1")
		return err == nil && st.GetRole() == masterv1.MasterRole_MASTER_ROLE_STANDBY && st.GetLeaderNode() == winner, nil
	}); err != nil {
		return err
	}
	tl.Say("M1 restarted: the log has a primary, so it is a standby of %s by itself", winner)
	tl.Say("ok: the master failed over by itself; no shard moved and every acknowledged op is readable")
	return nil
}

// startHAFleet starts masters[0] as the primary and the others as
// standbys (each with flags), a sidecar for each of nodes, and, once they
// registered (registered is called then), one auto-restore shard per
// node, named shard(i, node), open on it. It returns a writer per shard,
// not yet running.
func startHAFleet(ctx context.Context, f *procFleet, masters, nodes, flags []string, shard func(i int, node string) string, registered func()) ([]*shardWriter, error) {
	if _, err := f.startMasterNamed(masters[0], flags...); err != nil {
		return nil, err
	}
	for _, m := range masters[1:] {
		if _, err := f.startMasterNamed(m, append([]string{"--standby"}, flags...)...); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes {
		if _, err := f.startSidecar(n, "--log-level", "warn"); err != nil {
			return nil, err
		}
	}
	if err := f.waitNodes(ctx, len(nodes)); err != nil {
		return nil, err
	}
	if registered != nil {
		registered()
	}
	var writers []*shardWriter
	for i, n := range nodes {
		s := shard(i, n)
		if err := f.assign(ctx, s, n, false); err != nil {
			return nil, err
		}
		if _, err := f.openOn(ctx, s, ""); err != nil {
			return nil, err
		}
		writers = append(writers, &shardWriter{f: f, shard: s, http: f.http})
	}
	return writers, nil
}

// demoElection waits for a standby other than M1 to serve as primary and
// for every node to ping it, saying so on the timeline; it returns the
// new primary's name.
func demoElection(ctx context.Context, f *procFleet, tl *demo.Timeline, killed time.Time) (string, error) {
	var winner string
	if err := pollUntil(ctx, "a standby to be elected", func() (bool, error) {
		p, _, ok := f.finder.Find(ctx, time.Second)
		if ok && p.Confirmed && p.Leader.Node != "M1" {
			winner = p.Leader.Node
			return true, nil
		}
		return false, nil
	}); err != nil {
		return "", err
	}
	st, err := masterStatusOf(ctx, f, winner)
	if err != nil {
		return "", err
	}
	tl.Say("%s saw no new log generation for the election timeout, claimed the log at term %d (which fences M1) and serves, %v after the kill, with no command",
		winner, st.GetTerm(), time.Since(killed).Round(time.Millisecond))
	// The new primary gave every node a whole active TTL (1 s): past it,
	// a node still active has pinged it.
	if err := demo.Sleep(ctx, 1200*time.Millisecond); err != nil {
		return "", err
	}
	nodes, err := f.nodes(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.GetState() != "active" || n.GetLastPingAgeMs() < 0 || n.GetLastPingAgeMs() >= 1000 {
			return "", fmt.Errorf("node %s did not reach the new primary %s: %v", n.GetName(), winner, n)
		}
	}
	tl.Say("A, B and C found %s (every master names the primary) and ping it", winner)
	return winner, nil
}

// demoNoShardMoved fails when a writer's shard changed term or node since
// before, or is not open.
func demoNoShardMoved(ctx context.Context, f *procFleet, before map[string]*masterv1.ShardInfo, writers []*shardWriter) error {
	after, err := f.shards(ctx)
	if err != nil {
		return err
	}
	for _, w := range writers {
		s := w.shard
		a, b := before[s].GetAssignment(), after[s].GetAssignment()
		if a.GetTerm() != b.GetTerm() || a.GetNode() != b.GetNode() || after[s].GetState() != "open" {
			return fmt.Errorf("shard %s changed with the master failover: %v -> %v (%s)", s, a, b, after[s].GetState())
		}
	}
	return nil
}

// verifyWriters checks every writer's acknowledged ops against its
// shard's lineage and returns how many there were.
func verifyWriters(ctx context.Context, f *procFleet, writers []*shardWriter) (int, error) {
	total := 0
	for _, w := range writers {
		n, err := f.verify(ctx, w)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

func masterStatusOf(ctx context.Context, f *procFleet, name string) (*masterv1.StatusResponse, error) {
	p := f.masterProc(name)
	if p == nil {
		return nil, fmt.Errorf("no master %s", name)
	}
	res, err := masterv1connect.NewMasterHAServiceClient(f.http, "http://"+p.addr).Status(ctx, connect.NewRequest(&masterv1.StatusRequest{}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}
