package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/harness/cost"
	"github.com/shardfence/shardfence/internal/harness/fleetbench"
	"github.com/shardfence/shardfence/master"
)

const benchFleetSummary = "fleet scale: a primary and a standby master (processes) carrying simulated nodes and auto-restore shards: CPU, memory, log cost, a lost node's shards, promotion"

func runBenchFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := selfCmd()
	if err != nil {
		return err
	}
	_, err = benchFleet(ctx, c, args, stdout, stderr)
	return err
}

// benchFleet runs the bench with c as the masters' command.
func benchFleet(ctx context.Context, c fleetCmd, args []string, stdout, stderr io.Writer) (*fleetbench.Result, error) {
	fs := newFlags("bench fleet", stdout)
	storeURL := fs.String("store", "", "the masters' store URL (default: a fresh file:// store in a temporary folder); the log is the shard master-CLUSTER, CLUSTER a new name per run")
	nodes := fs.Int("nodes", 1000, "simulated sidecar nodes, each with its own connections to the masters")
	shards := fs.Int("shards", 10000, "auto-restore shards assigned through AssignShard")
	lostShards := fs.Int("lost-shards", 0, "shards assigned to the node that is then lost (default: shards/nodes)")
	steady := fs.Duration("steady", 30*time.Second, "measuring window at steady state (pings only)")
	election := fs.Duration("election-timeout", 3*time.Second, "the masters' --election-timeout")
	activeTTL := fs.Duration("client-active-ttl", master.DefaultClientActiveTTL, "the masters' --client-active-ttl")
	suspicionTTL := fs.Duration("client-suspicion-ttl", master.DefaultClientSuspicionTTL, "the masters' --client-suspicion-ttl")
	maxStreams := fs.Int("max-streams", master.DefaultMaxStreams, "the masters' --max-streams (one WatchAssignments stream per node)")
	registrations := fs.Int("registrations", 32, "nodes registering at once while the fleet starts")
	assigns := fs.Int("assigns", 16, "AssignShard calls at once")
	profile := fs.String("profile", "", "write the primary's CPU profile over the steady window to DIR/master.pprof")
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *lostShards == 0 && *nodes > 0 {
		*lostShards = max(*shards / *nodes, 1)
	}
	switch {
	case *nodes < 2 || *shards < 1:
		return nil, fmt.Errorf("%w: --nodes must be at least 2 and --shards at least 1", errUsage)
	case *lostShards < 1 || *lostShards > *shards:
		return nil, fmt.Errorf("%w: --lost-shards must be within 1..--shards", errUsage)
	case *steady <= 0 || *registrations < 1 || *assigns < 1:
		return nil, fmt.Errorf("%w: --steady, --registrations and --assigns must be positive", errUsage)
	case *election < 100*time.Millisecond:
		return nil, fmt.Errorf("%w: --election-timeout must be at least 100ms", errUsage)
	case *nodes+16 > *maxStreams:
		return nil, fmt.Errorf("%w: --max-streams %d is below --nodes %d: every node holds one WatchAssignments stream (give the masters at least nodes plus headroom)", errUsage, *maxStreams, *nodes)
	}
	url, cleanup, err := storeOrTemp(*storeURL, "shardfence-bench-fleet-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	where := blobstore.Redact(url)
	if *storeURL == "" {
		where = "fs (file://, a temporary folder)"
	}
	price, err := cost.DefaultTable().Find("aws", "s3-standard")
	if err != nil {
		return nil, err
	}
	cluster := fmt.Sprintf("fleetbench-%d", time.Now().UnixNano())
	var procs []*fleetProc
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	start := func(_ context.Context, name string, standby bool) (fleetbench.Proc, error) {
		a := []string{"master", "--listen", "127.0.0.1:0", "--cluster", cluster, "--node", name,
			"--election-timeout", election.String(), "--client-active-ttl", activeTTL.String(), "--client-suspicion-ttl", suspicionTTL.String(),
			"--max-streams", strconv.Itoa(*maxStreams)}
		if *profile != "" {
			a = append(a, "--pprof")
		}
		if standby {
			a = append(a, "--standby")
		}
		p, err := startFleetProc(c, "master "+name, "master listening on ", []string{masterStoreEnv + "=" + url}, a...)
		if err != nil {
			return fleetbench.Proc{}, err
		}
		procs = append(procs, p)
		return fleetbench.Proc{Base: "http://" + p.addr, Kill: p.kill}, nil
	}
	return fleetbench.Run(ctx, fleetbench.Config{
		Nodes: *nodes, Shards: *shards, LostShards: *lostShards, Store: blobstore.Redact(url), Where: where,
		StartMaster: start, ElectionTimeout: *election, Steady: *steady, Registrations: *registrations, Assigns: *assigns,
		ProfileDir: *profile, Price: price, Progress: stderr,
	}, stdout)
}
