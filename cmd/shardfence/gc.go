package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const gcSummary = "delete what no restore point of a shard needs (on its current owner)"

func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dryRun bool
	return runClient(ctx, clientCmd{name: "gc", withShard: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.BoolVar(&dryRun, "dry-run", false, "list what would be deleted, delete nothing")
			return nil
		},
		run: func(ctx context.Context, e *clientEnv) error {
			res, err := e.client.GC(ctx, connect.NewRequest(&sidecarv1.GCRequest{Shard: e.shard, DryRun: dryRun}))
			if err != nil {
				return err
			}
			return e.output(res.Msg, func(w io.Writer) {
				verb := "deleted"
				if dryRun {
					verb = "would delete"
				}
				for _, k := range res.Msg.GetDeleted() {
					fmt.Fprintf(w, "%s %s\n", verb, k)
				}
				fmt.Fprintf(w, "%s %d objects, kept %d\n", verb, len(res.Msg.GetDeleted()), res.Msg.GetKept())
			})
		}}, args, os.Stdin, stdout, stderr)
}
