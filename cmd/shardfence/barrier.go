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

const barrierSummary = "prove the sidecar still holds a shard's term (a read barrier): one fence key read, none inside a lease"

func runBarrier(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var term int64
	return runClient(ctx, clientCmd{name: "barrier", withShard: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&term, "term", 0, "refuse unless the shard is open at this term (0: any)")
			return func() error {
				if term < 0 {
					return fmt.Errorf("%w: --term %d is negative", errUsage, term)
				}
				return nil
			}
		},
		run: func(ctx context.Context, e *clientEnv) error {
			res, err := e.client.Barrier(ctx, connect.NewRequest(&sidecarv1.BarrierRequest{Shard: e.shard, ExpectedTerm: term}))
			if err != nil {
				return err
			}
			return e.output(res.Msg, func(w io.Writer) {
				how := "proven by a fence key read"
				if res.Msg.GetLocal() {
					how = "inside the lease, no store request"
				}
				fmt.Fprintf(w, "shard %s held at term %d (%s): every op acknowledged before the barrier is below sequence number %d (generation %d)\n",
					e.shard, res.Msg.GetTerm(), how, res.Msg.GetNextSeqNo(), res.Msg.GetGen())
			})
		}}, args, os.Stdin, stdout, stderr)
}
