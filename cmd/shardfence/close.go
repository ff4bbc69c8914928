package main

import (
	"context"
	"io"
	"os"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const closeSummary = "drain and release a shard on a sidecar (the term stays claimed)"

func runClose(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runClient(ctx, clientCmd{name: "close", withShard: true, run: func(ctx context.Context, e *clientEnv) error {
		res, err := e.client.Close(ctx, connect.NewRequest(&sidecarv1.CloseRequest{Shard: e.shard}))
		if err != nil {
			return err
		}
		return e.output(res.Msg.GetStatus(), func(w io.Writer) { printStatus(w, res.Msg.GetStatus()) })
	}}, args, os.Stdin, stdout, stderr)
}
