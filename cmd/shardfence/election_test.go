package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// Master elections across real processes: a primary master and two
// standbys, three sidecars that list all three, auto-restore shards under
// append load. The primary master is SIGKILLed, frozen with SIGSTOP past
// the election timeout and resumed, and killed again; nobody runs a
// command, no shard moves, every acknowledged append and every
// acknowledged master change survives, and a resumed old primary
// acknowledges nothing and turns standby by itself.
func TestMasterElectionMultiProcess(t *testing.T) {
	// Not parallel, nor are its two runs: no shard may move across an
	// election, which holds only while every sidecar renews within its
	// 1 s TTL; CPU taken by parallel process fleets can cost it that
	// (seen at a load average of 60 with four fleets beside it).
	if testing.Short() {
		t.Skip("starts masters and sidecars as processes")
	}
	t.Run("fs", func(t *testing.T) {
		url := "file://" + t.TempDir()
		runElection(t, url, url)
	})
	t.Run("minio", func(t *testing.T) {
		srv, err := testservers.StartMinIO(t)
		if err != nil {
			testservers.Unavailable(t, "MinIO", err)
		}
		runElection(t, srv.MinioURL("el-shards"), srv.MinioURL("el-master"))
	})
}

// electionTimeout is short so the test sees several elections; the
// default (3 s) only stretches the same steps.
const electionTimeout = time.Second

func runElection(t *testing.T, shardURL, masterURL string) {
	f := newProcFleet(thisBinary(), shardURL, masterURL)
	t.Cleanup(func() {
		f.stop()
		if t.Failed() {
			for _, name := range []string{"m1", "m2", "m3"} {
				if p := f.masterProc(name); p != nil {
					t.Logf("master %s log:\n%s", name, tail(p.Log(), 50))
				}
			}
			for _, name := range []string{"n1", "n2", "n3"} {
				if p := f.sidecar(name); p != nil {
					t.Logf("sidecar %s log:\n%s", name, tail(p.Log(), 30))
				}
			}
		}
	})
	masterFlags := []string{"--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--liveness-interval", "50ms",
		"--election-timeout", electionTimeout.String()}
	if _, err := f.startMasterNamed("m1", masterFlags...); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"m2", "m3"} {
		if _, err := f.startMasterNamed(name, append([]string{"--standby"}, masterFlags...)...); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := f.startSidecar(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.waitNodes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	placement := map[string]string{"e1": "n1", "e2": "n2", "e3": "n3"}
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
	ws, stop := startWriters(t, f, "e1", "e2", "e3")
	defer stop()
	for s, n := range placement {
		waitAcked(t, ws[s], 20, n)
	}
	// Acknowledged master changes: shards put in the table (unassigned
	// later would be a change too); each must be in every later primary.
	var ledger []string
	change := func(i int) {
		t.Helper()
		name := fmt.Sprintf("x%d", i)
		// A change refused as not the primary (a primary whose leadership
		// lapsed under load, an election under way) was not made: send it
		// again, as a client does.
		if err := assignRetrying(ctx, f, name, "n3"); err != nil {
			t.Fatalf("assign %s: %v", name, err)
		}
		ledger = append(ledger, name)
	}
	change(0)

	// 1. SIGKILL the primary: a standby takes over with no command, and
	// no shard moves.
	killed := time.Now()
	f.masterProc("m1").kill()
	p1 := waitPrimary(t, ctx, f, "m1")
	t.Logf("%s elected %v after the primary's SIGKILL", p1, time.Since(killed).Round(time.Millisecond))
	checkNoShardMoved(t, ctx, f, placement)
	change(1)

	// 2. A sidecar killed afterwards fails over under the new primary.
	f.sidecar("n1").kill()
	row, err := f.openOn(ctx, "e1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if row.GetAssignment().GetTerm() != 2 {
		t.Fatalf("e1 moved at term %d, want 2", row.GetAssignment().GetTerm())
	}
	placement["e1"] = row.GetAssignment().GetNode()
	waitAcked(t, ws["e1"], 10, placement["e1"])
	// The killed master comes back: a standby by itself (the log has a
	// primary), at its old address.
	if _, err := f.startMasterNamed("m1", masterFlags...); err != nil {
		t.Fatal(err)
	}
	waitRole(t, ctx, f, "m1", "standby")

	// 3. SIGSTOP the primary past the election timeout: another master
	// is elected; resumed, the old one acknowledges no change and turns
	// standby by itself.
	frozen := f.masterProc(p1)
	if err := frozen.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p2 := waitPrimary(t, ctx, f, p1)
	checkNoShardMoved(t, ctx, f, placement)
	change(2)
	if err := frozen.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	zombie := masterv1connect.NewMasterFleetServiceClient(f.http, "http://"+frozen.addr)
	zctx, zcancel := context.WithTimeout(ctx, 5*time.Second)
	_, zerr := zombie.AssignShard(zctx, connect.NewRequest(&masterv1.AssignShardRequest{Shard: "zombie", Node: "n2"}))
	zcancel()
	if zerr == nil {
		t.Fatalf("the resumed old primary %s acknowledged a change after %s was elected", p1, p2)
	}
	t.Logf("the resumed old primary %s refused a change: %v", p1, zerr)
	waitRole(t, ctx, f, p1, "standby")

	// 4. Kill the elected primary again: a third election.
	f.masterProc(p2).kill()
	p3 := waitPrimary(t, ctx, f, p2)
	t.Logf("%s elected after %s was killed", p3, p2)
	checkNoShardMoved(t, ctx, f, placement)
	change(3)
	for s, n := range placement {
		waitAcked(t, ws[s], len(ws[s].ackedOps())+10, n)
	}
	stop()

	// Every acknowledged append is in its shard's lineage; every
	// acknowledged master change is in the last primary's table; the
	// zombie's change is not.
	total := 0
	for _, s := range []string{"e1", "e2", "e3"} {
		n, err := f.verify(ctx, ws[s])
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	rows, err := f.shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ledger {
		if rows[name] == nil {
			t.Fatalf("acknowledged change (assign %s) missing after the elections", name)
		}
	}
	if rows["zombie"] != nil {
		t.Fatal("the resumed old primary's change reached the table")
	}
	t.Logf("%d acknowledged appends and %d acknowledged master changes survived three master failovers", total, len(ledger))
}

// waitPrimary waits until a master other than not is primary, confirmed
// by its own answer, and every live master names it.
func waitPrimary(t *testing.T, ctx context.Context, f *procFleet, not string) string {
	t.Helper()
	var name string
	err := pollUntil(ctx, "a master other than "+not+" to be elected", func() (bool, error) {
		p, answers, ok := f.finder.Find(ctx, time.Second)
		if !ok || !p.Confirmed || p.Leader.Node == not {
			return false, nil
		}
		for _, a := range answers {
			if a.Err == nil && a.Leader != p.Leader {
				return false, nil
			}
		}
		name = p.Leader.Node
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// waitRole waits until master name reports role.
func waitRole(t *testing.T, ctx context.Context, f *procFleet, name, role string) {
	t.Helper()
	p := f.masterProc(name)
	c := masterv1connect.NewMasterHAServiceClient(f.http, "http://"+p.addr)
	err := pollUntil(ctx, "master "+name+" to be "+role, func() (bool, error) {
		res, err := c.Status(ctx, connect.NewRequest(&masterv1.StatusRequest{}))
		return err == nil && roleName(res.Msg.GetRole()) == role && res.Msg.GetLeaderTerm() > 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkNoShardMoved watches the table for a few seconds: every shard of
// placement stays on its node at the term it had, and is shown open.
func checkNoShardMoved(t *testing.T, ctx context.Context, f *procFleet, placement map[string]string) {
	t.Helper()
	before, err := f.shards(ctx)
	for err != nil {
		time.Sleep(20 * time.Millisecond)
		before, err = f.shards(ctx)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		rows, err := f.shards(ctx)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for s, n := range placement {
			a := rows[s].GetAssignment()
			if a.GetNode() != n || a.GetTerm() != before[s].GetAssignment().GetTerm() {
				t.Fatalf("shard %s moved after a master failover: %v (was on %s)", s, a, n)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The finder may catch the new primary too busy to answer in time
	// (a partitioned old primary answers for itself then, and refuses):
	// ask again, as a client would.
	rows, err := f.shards(ctx)
	for err != nil && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		rows, err = f.shards(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for s := range placement {
		if rows[s].GetState() != "open" {
			states = append(states, s+" "+rows[s].GetState())
		}
	}
	if len(states) > 0 {
		t.Fatalf("after a master failover the new primary shows shards not open: %s", strings.Join(states, ", "))
	}
}
