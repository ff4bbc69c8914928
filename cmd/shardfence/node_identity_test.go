package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Two sidecar processes started with one --node name: the second is
// refused with a clear error while the first lives (they used to take
// the name from each other about ten times a second, both opening the
// node's shards), the first keeps its shard at its term, and once the
// first is killed the second gets the name within the hold and serves
// the shard with every acknowledged op.
func TestDuplicateNodeNameMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	f := testFleet(t, "dup", 2*time.Second, 2*time.Second, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := f.assign(ctx, "s1", "n1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.openOn(ctx, "s1", ""); err != nil {
		t.Fatal(err)
	}
	ws, stop := startWriters(t, f, "s1")
	defer stop()
	waitAcked(t, ws["s1"], 20, "n1")
	first := f.sidecar("n1")

	dup, err := startFleetProc(f.cmd, "sidecar n1 (second process)", "sidecar listening on ", []string{envPrefix + "STORE=" + f.shardURL},
		"serve", "--listen", "127.0.0.1:0", "--node", "n1", "--master", f.masterList(), "--log-level", "info")
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.sidecars["n1-second"] = dup
	f.mu.Unlock()

	// Six ping intervals (500 ms with a 2 s active TTL): the name stays
	// with the first process, at the shard's first term.
	before := len(ws["s1"].ackedOps())
	for range 12 {
		time.Sleep(250 * time.Millisecond)
		nodes, err := f.nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.GetName() == "n1" && !strings.Contains(n.GetAddr(), first.addr) {
				t.Fatalf("node n1 is published at %s, the second process's address (the first serves %s)", n.GetAddr(), first.addr)
			}
		}
		rows, err := f.shards(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a := rows["s1"].GetAssignment(); a.GetTerm() != 1 || !strings.Contains(rows["s1"].GetAddr(), first.addr) {
			t.Fatalf("s1 moved while its node lived: term %d at %s", a.GetTerm(), rows["s1"].GetAddr())
		}
	}
	if after := len(ws["s1"].ackedOps()); after <= before {
		t.Fatalf("the first process stopped acknowledging (%d acks before the second started, %d after)", before, after)
	}
	if log := dup.Log(); !strings.Contains(log, "another live process holds it") || !strings.Contains(log, "held by a live process") {
		t.Fatalf("the second process does not say why it is refused:\n%s", tail(log, 20))
	}
	if n := strings.Count(dup.Log(), "another live process holds it"); n != 1 {
		t.Errorf("the refusal logged %d times in 3 s, want once (then every half minute)", n)
	}
	if n := strings.Count(f.master.Log(), "refused a second process"); n != 1 {
		t.Errorf("the master logged the refusal %d times in 3 s, want once (then every half minute):\n%s", n, tail(f.master.Log(), 20))
	}

	// The first process dies: the second takes the name and the shard.
	first.kill()
	killed := time.Now()
	err = pollUntil(ctx, "s1 open on the second process", func() (bool, error) {
		rows, err := f.shards(ctx)
		if err != nil {
			return false, nil
		}
		r := rows["s1"]
		return r.GetState() == "open" && strings.Contains(r.GetAddr(), dup.addr), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("s1 open on the second process %v after the first was killed", time.Since(killed).Round(time.Millisecond))
	waitAcked(t, ws["s1"], len(ws["s1"].ackedOps())+20, "n1")
	stop()
	n, err := f.verify(ctx, ws["s1"])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged ops, none lost", n)
}
