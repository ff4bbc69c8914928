package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// A small fleet on MinIO: 50 simulated nodes and 500 auto-restore shards
// over a primary and a standby master process. Every shard of the node
// that stops pinging ends open on another node, and the promoted standby
// serves the whole table with the owners, terms and allocations the
// primary had; then every live node is back and every shard open.
func TestBenchFleetSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO and two master processes")
	}
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	var out, errOut syncBuffer
	c := thisBinary()
	args := []string{"--store", srv.MinioURL("fleet"), "--nodes", "50", "--shards", "500", "--lost-shards", "20", "--steady", "1s",
		"--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--election-timeout", "1s"}
	res, err := benchFleet(t.Context(), c, args, &out, &errOut)
	if err != nil {
		t.Fatalf("bench fleet: %v\n%s", err, errOut.String())
	}
	if res.LostShards < 20 || res.MovedOpen != res.LostShards {
		t.Errorf("lost node %s: %d of its %d shards open elsewhere", res.LostNode, res.MovedOpen, res.LostShards)
	}
	if res.PromotedRows != 500 || res.SameOwners != 500 || res.PromotedNodes < 49 {
		t.Errorf("promoted standby: %d shards (%d with the primary's owner, term and allocation), %d nodes; want 500, 500, at least 49",
			res.PromotedRows, res.SameOwners, res.PromotedNodes)
	}
	if res.PingsPerSec <= 0 || res.PutPerHour <= 0 {
		t.Errorf("steady state measured nothing: %.0f pings/s, %.0f PUTs/h", res.PingsPerSec, res.PutPerHour)
	}
	for _, want := range []string{"pings/s", "store PUT-class/h", "lost node's shards", "kill to whole table served", "target promotion"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{{"--nodes", "1"}, {"--lost-shards", "600", "--shards", "500"}, {"--max-streams", "100"}} {
		if _, err := benchFleet(t.Context(), c, bad, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
