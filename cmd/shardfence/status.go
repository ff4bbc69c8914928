package main

import (
	"context"
	"io"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const statusSummary = "show a shard's term, owner, generation, last CAS age and fencing state"

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	c := addClientFlags(fs, true)
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
	res, err := client.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: c.shard}))
	if err != nil {
		return remoteErr(c.addr, err)
	}
	if c.asJSON {
		return printJSON(stdout, res.Msg.GetStatus())
	}
	printStatus(stdout, res.Msg.GetStatus())
	return nil
}
