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
