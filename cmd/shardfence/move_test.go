package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// master move and master rebalance against real processes: a master and
// three sidecars over a file store, a writer appending to every shard the
// whole time. The moves keep each shard's term, land where they were
// told, and lose no acknowledged op; the refusals name their reason.
func TestMasterMoveAndRebalanceCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master and sidecar processes")
	}
	url := "file://" + t.TempDir()
	f := newProcFleet(thisBinary(), url, url)
	t.Cleanup(f.stop)
	if err := f.startMaster(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := f.startSidecar(n); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := f.waitNodes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	runErr := func(args ...string) (string, error) {
		var out, errOut syncBuffer
		err := runMaster(ctx, append(args, "--addr", f.base), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := runErr(args...)
		if err != nil {
			t.Fatalf("master %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	shards := []string{"m1", "m2", "m3", "m4"}
	for _, s := range shards {
		run("assign", "--shard", s, "--node", "n1", "--auto-restore")
	}
	for _, s := range shards {
		if _, err := f.openOn(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
	}
	ws, stop := startWriters(t, f, shards...)
	defer stop()
	for _, s := range shards {
		waitAcked(t, ws[s], 20, "n1")
	}

	// The dry run plans, and moves nothing.
	out := run("rebalance", "--dry-run")
	for _, want := range []string{"plan: 2 moves", "m1 n1 n2", "m2 n1 n3", "n1 4 2", "n2 0 1", "dry run: nothing moved"} {
		if !hasLine(out, want) {
			t.Fatalf("rebalance --dry-run lacks %q:\n%s", want, out)
		}
	}
	rows, err := f.shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		if a := rows[s].GetAssignment(); a.GetNode() != "n1" || a.GetHandoffNode() != "" {
			t.Fatalf("the dry run moved %s: %v", s, a)
		}
	}

	// A move to the node named, at the same term.
	if out := run("move", "--shard", "m4", "--node", "n3", "--wait", "60s"); !strings.Contains(out, "moving m4 from n1 to n3 at term 1") || !strings.Contains(out, "m4 is on node n3") {
		t.Fatalf("move: %q", out)
	}
	row, err := f.openOn(ctx, "m4", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if a := row.GetAssignment(); a.GetNode() != "n3" || a.GetTerm() != 1 {
		t.Fatalf("after the move: %v", a)
	}
	waitAcked(t, ws["m4"], 20, "n3")

	// Refusals, with the reason the API carries.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"move", "--shard", "m4", "--node", "n3"}, "SHARD_ASSIGNED"},
		{[]string{"move", "--shard", "nope", "--node", "n2"}, "SHARD_NOT_ASSIGNED"},
		{[]string{"move", "--shard", "m1", "--node", "n9"}, "NODE_NOT_ELIGIBLE"},
	} {
		if out, err := runErr(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("master %s: %v, want %s\n%s", strings.Join(tc.args, " "), err, tc.want, out)
		}
	}

	// The rebalance moves one shard off n1 (3, 0, 1 -> 2, 1, 1).
	out = run("rebalance", "--max-moves", "2")
	for _, want := range []string{"plan: 1 moves", "m1 is on node n2", "rebalanced: 1 moves done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rebalance lacks %q:\n%s", want, out)
		}
	}
	if out := run("rebalance", "--dry-run"); !strings.Contains(out, "balanced: nothing to move") {
		t.Fatalf("rebalance after the rebalance: %q", out)
	}
	waitAcked(t, ws["m1"], 20, "n2")
	stop()
	for _, s := range shards {
		row, err := f.openOn(ctx, s, "")
		if err != nil {
			t.Fatal(err)
		}
		if row.GetAssignment().GetTerm() != 1 {
			t.Fatalf("%s changed its term: %v", s, row.GetAssignment())
		}
		n, err := f.verify(ctx, ws[s])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d acknowledged ops, all in the lineage on %s", s, n, row.GetAssignment().GetNode())
	}
}

// hasLine reports whether out has a line of the words of want, however
// the columns were padded.
func hasLine(out, want string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == want {
			return true
		}
	}
	return false
}
