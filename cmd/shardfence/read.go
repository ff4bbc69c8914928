package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const readSummary = "print the ops of a shard's lineage, one per line"

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var from, maxOps int64
	return runClient(ctx, clientCmd{name: "read", withShard: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&from, "from", 0, "first sequence number to print")
			fs.Int64Var(&maxOps, "max", 0, "print at most this many ops (0: all)")
			return func() error {
				if from < 0 || maxOps < 0 {
					return fmt.Errorf("%w: --from and --max must not be negative", errUsage)
				}
				return nil
			}
		},
		run: func(ctx context.Context, e *clientEnv) error {
			st, err := e.client.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: e.shard, FromSeq: from, MaxOps: maxOps}))
			if err != nil {
				return err
			}
			defer st.Close()
			enc := json.NewEncoder(e.stdout)
			for st.Receive() {
				b := st.Msg().GetBatch()
				for i, op := range b.GetOps() {
					if e.asJSON {
						err = enc.Encode(struct {
							Seq  int64  `json:"seq"`
							Term int64  `json:"term"`
							Gen  int64  `json:"gen"`
							Op   string `json:"op"`
						}{b.GetFirstSeqNo() + int64(i), b.GetTerm(), b.GetGen(), string(op)})
					} else {
						_, err = fmt.Fprintf(e.stdout, "%s\n", op)
					}
					if err != nil {
						return err
					}
				}
			}
			return st.Err()
		}}, args, os.Stdin, stdout, stderr)
}
