package main

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const openSummary = "open a shard on a sidecar at a term (claim, seal, restore)"

func runOpen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("open", stderr)
	c := addClientFlags(fs, true)
	term := fs.Int64("term", 0, "term granted to this primary (required, >= 1)")
	alloc := fs.String("allocation", "", "allocation id of this copy of the shard (required)")
	mode := fs.String("fencing-mode", "", "per_sync or lease (default: the sidecar's)")
	order := fs.String("ack-order", "", "concurrent or sequenced (default: the sidecar's)")
	lease := fs.Duration("lease-interval", 0, "lease of lease mode (default: the sidecar's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(fs, true); err != nil {
		return err
	}
	if *term < 1 || *alloc == "" {
		return fmt.Errorf("%w: --term (>= 1) and --allocation are required", errUsage)
	}
	settings := &sidecarv1.ShardSettings{LeaseIntervalMs: lease.Milliseconds()}
	if *mode != "" {
		m, err := parseMode(*mode)
		if err != nil {
			return err
		}
		settings.Mode = sidecarv1.FencingMode(m + 1)
	}
	if *order != "" {
		o, err := parseAckOrder(*order)
		if err != nil {
			return err
		}
		settings.AckOrder = sidecarv1.AckOrder(o + 1)
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	st, err := client.Open(ctx, connect.NewRequest(&sidecarv1.OpenRequest{Shard: c.shard, Term: *term, AllocationId: *alloc, Settings: settings}))
	if err != nil {
		return remoteErr(c.addr, err)
	}
	defer st.Close()
	var ops, files int64
	for st.Receive() {
		msg := st.Msg()
		if c.asJSON {
			if err := printJSON(stdout, msg); err != nil {
				return err
			}
			continue
		}
		switch ev := msg.GetEvent().(type) {
		case *sidecarv1.OpenResponse_Progress:
			p := ev.Progress
			fmt.Fprintf(stderr, "%-8s %d/%d %d bytes\n", p.GetStep(), p.GetDone(), p.GetTotal(), p.GetBytes())
		case *sidecarv1.OpenResponse_Ops:
			ops += int64(len(ev.Ops.GetOps()))
		case *sidecarv1.OpenResponse_CheckpointFile:
			if ev.CheckpointFile.GetLast() {
				files++
			}
		case *sidecarv1.OpenResponse_Opened:
			r := ev.Opened.GetRestorePoint()
			fmt.Fprintf(stdout, "opened shard %s at term %d (allocation %s)\n", c.shard, *term, *alloc)
			fmt.Fprintf(stdout, "restore point: term %d gen %d, next seq %d, checkpoint gen %d; replayed %d ops, %d checkpoint files\n",
				r.GetTerm(), r.GetGen(), r.GetNextSeqNo(), r.GetCheckpointGen(), ops, files)
		}
	}
	if err := st.Err(); err != nil {
		return remoteErr(c.addr, err)
	}
	return nil
}
