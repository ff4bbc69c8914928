package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/sidecar/warmbench"
)

// sizedTakeover is one failover of a shard with a checkpoint of a given
// size: its owner SIGKILLed, the master's takeover (durable) to the first
// read served by the new owner (a barrier, the log after the checkpoint,
// and, warm, the first block of the checkpoint read on demand).
type sizedTakeover struct {
	mib       int
	warm      bool
	takeover  time.Duration // takeover recorded to the first read on the new owner
	detection time.Duration
	// after is the new owner's status of the shard once the first read
	// was served: its locality, what it holds locally and what it fetched.
	after *sidecarv1.ShardStatus
}

// takeoverOfSize fills shard with a checkpoint of mib MiB (term 1, written
// as a sidecar would), assigns it at term 2 to n1 (auto-restore, warm or
// not), kills n1 once it opened, and times the way back. f runs a master
// and sidecars n1.. over the store at f.shardURL; killed sidecars are
// started again before it returns.
func takeoverOfSize(ctx context.Context, f *procFleet, shard string, mib int, warm bool) (sizedTakeover, error) {
	r := sizedTakeover{mib: mib, warm: warm}
	root, err := blobstore.Open(ctx, f.shardURL)
	if err != nil {
		return r, err
	}
	defer root.Close()
	work, err := os.MkdirTemp("", "shardfence-takeover-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(work)
	if err := warmbench.Fill(ctx, root, shard, work, int64(mib)<<20, 64<<20); err != nil {
		return r, fmt.Errorf("fill %s with %d MiB: %w", shard, mib, err)
	}
	fc, err := f.fleetClient(ctx)
	if err != nil {
		return r, err
	}
	if _, err := fc.AssignShard(ctx, connect.NewRequest(&masterv1.AssignShardRequest{Shard: shard, Node: "n1", Term: 2, AutoRestore: true, Warm: warm})); err != nil {
		return r, err
	}
	if _, err := f.openOn(ctx, shard, ""); err != nil {
		return r, err
	}
	f.sidecar("n1").kill()
	killed := time.Now()
	defer func() { _, _ = f.startSidecar("n1") }()
	var assigned time.Time
	if err := pollUntil(ctx, "the takeover of "+shard, func() (bool, error) {
		rows, err := f.shards(ctx)
		if err != nil {
			return false, nil
		}
		row := rows[shard]
		if row.GetAssignment().GetTerm() >= 3 && row.GetDurable() {
			assigned = time.Now()
			return true, nil
		}
		return false, nil
	}); err != nil {
		return r, err
	}
	row, err := f.openOn(ctx, shard, "n1")
	if err != nil {
		return r, err
	}
	c, err := client.New(row.GetAddr())
	if err != nil {
		return r, err
	}
	defer c.Close()
	for {
		err := firstRead(ctx, c, shard, warm)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return r, fmt.Errorf("first read of %s on the new owner: %w", shard, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.takeover, r.detection = time.Since(assigned), assigned.Sub(killed)
	if r.after, err = c.Status(ctx, shard); err != nil {
		return r, fmt.Errorf("status of %s on the new owner: %w", shard, err)
	}
	return r, nil
}

// firstRead is what a primary does first after gaining a shard: a barrier,
// the log after the checkpoint, and (warm) the checkpoint's first block.
func firstRead(ctx context.Context, c *client.Client, shard string, warm bool) error {
	st, err := c.Status(ctx, shard)
	if err != nil {
		return err
	}
	if _, err := c.Barrier(ctx, shard, 0); err != nil {
		return err
	}
	if err := c.Read(ctx, shard, max(st.GetNextSeqNo()-1, 0), 1, func(client.Batch) error { return nil }); err != nil {
		return err
	}
	if warm {
		return c.ReadCheckpointFile(ctx, shard, "seg-0000", 0, 64<<10, func(int64, []byte) error { return nil })
	}
	return nil
}
