package main

import (
	"context"
	"io"
	"os"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const statusSummary = "show a shard's term, owner, generation, fencing, store health and settings"

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runClient(ctx, clientCmd{name: "status", withShard: true, run: func(ctx context.Context, e *clientEnv) error {
		res, err := e.client.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: e.shard}))
		if err != nil {
			return err
		}
		return e.output(res.Msg.GetStatus(), func(w io.Writer) { printStatus(w, res.Msg.GetStatus()) })
	}}, args, os.Stdin, stdout, stderr)
}
