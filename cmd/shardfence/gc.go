package main

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const gcSummary = "delete what no restore point of a shard needs (on its current owner)"

func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gc", stderr)
	c := addClientFlags(fs, true)
	dryRun := fs.Bool("dry-run", false, "list what would be deleted, delete nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(fs, true); err != nil {
		return err
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := client.GC(ctx, connect.NewRequest(&sidecarv1.GCRequest{Shard: c.shard, DryRun: *dryRun}))
	if err != nil {
		return remoteErr(c.addr, err)
	}
	if c.asJSON {
		return printJSON(stdout, res.Msg)
	}
	verb := "deleted"
	if *dryRun {
		verb = "would delete"
	}
	for _, k := range res.Msg.GetDeleted() {
		fmt.Fprintf(stdout, "%s %s\n", verb, k)
	}
	fmt.Fprintf(stdout, "%s %d objects, kept %d\n", verb, len(res.Msg.GetDeleted()), res.Msg.GetKept())
	return nil
}
