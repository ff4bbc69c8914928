package main

// The sidecar client commands that make one call: barrier, close, gc,
// read and read-file. Each gives its own flags and what it does with the
// client; runClient does the rest (client.go).

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

const readFileSummary = "write a checkpoint file (or a range of it) of a shard opened with --warm to stdout"

func runReadFile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		file           string
		offset, length int64
	)
	return runClient(ctx, clientCmd{name: "read-file", withShard: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&file, "file", "", "the file's name in the checkpoint (open --warm lists them; required)")
			fs.Int64Var(&offset, "offset", 0, "first byte to read")
			fs.Int64Var(&length, "length", 0, "bytes to read (0: to the end of the file)")
			return func() error {
				if file == "" || offset < 0 || length < 0 {
					return fmt.Errorf("%w: --file is required, --offset and --length must not be negative", errUsage)
				}
				return nil
			}
		},
		run: func(ctx context.Context, e *clientEnv) error {
			st, err := e.client.ReadCheckpointFile(ctx, connect.NewRequest(&sidecarv1.ReadCheckpointFileRequest{Shard: e.shard, File: file, Offset: offset, Length: length}))
			if err != nil {
				return err
			}
			defer st.Close()
			for st.Receive() {
				if _, err := e.stdout.Write(st.Msg().GetData()); err != nil {
					return err
				}
			}
			return st.Err()
		}}, args, os.Stdin, stdout, stderr)
}
