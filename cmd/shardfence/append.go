package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const appendSummary = "append ops to an open shard (one per stdin line, or --op); prints the ack"

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runAppend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return appendFrom(ctx, args, os.Stdin, stdout, stderr)
}

// appendFrom appends --op values, or else one op per line of stdin. A
// blank line is skipped (and counted on stderr) unless --empty-ops makes
// it an empty op; stdin without any op is an error, not a silent success.
// --op "" appends an empty op: it was asked for.
func appendFrom(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var (
		ops      stringList
		batch    int
		term     int64
		emptyOps bool
	)
	return runClient(ctx, clientCmd{name: "append", withShard: true, perCall: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.Var(&ops, "op", "op to append (repeatable); without it, each stdin line is one op")
			fs.IntVar(&batch, "batch", 256, "stdin lines sent per Append")
			fs.Int64Var(&term, "expected-term", 0, "refuse unless the shard is open at this term")
			fs.BoolVar(&emptyOps, "empty-ops", false, "append a blank stdin line as an empty op (default: skip it)")
			return func() error {
				if batch < 1 {
					return fmt.Errorf("%w: --batch must be at least 1", errUsage)
				}
				if term < 0 {
					return fmt.Errorf("%w: --expected-term must not be negative", errUsage)
				}
				return nil
			}
		},
		run: func(ctx context.Context, e *clientEnv) error {
			send := func(ops [][]byte) error {
				actx, cancel := context.WithTimeout(ctx, e.timeout)
				defer cancel()
				res, err := e.client.Append(actx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: e.shard, Ops: ops, ExpectedTerm: term}))
				if err != nil {
					return err
				}
				a := res.Msg
				return e.output(a, func(w io.Writer) {
					fmt.Fprintf(w, "acked %d ops: term %d gen %d seq %d..%d\n", a.GetCount(), a.GetTerm(), a.GetGen(), a.GetFirstSeqNo(), a.GetFirstSeqNo()+a.GetCount()-1)
				})
			}
			if len(ops) > 0 {
				b := make([][]byte, len(ops))
				for i, o := range ops {
					b[i] = []byte(o)
				}
				return send(b)
			}
			sc := bufio.NewScanner(stdin)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			var pending [][]byte
			sent, blank := 0, 0
			for sc.Scan() {
				line := sc.Bytes()
				if len(line) == 0 && !emptyOps {
					blank++
					continue
				}
				pending = append(pending, append([]byte(nil), line...))
				if len(pending) == batch {
					if err := send(pending); err != nil {
						return err
					}
					sent += len(pending)
					pending = nil
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("reading ops from stdin after %d ops were acknowledged: %w", sent, err)
			}
			if len(pending) > 0 {
				if err := send(pending); err != nil {
					return err
				}
				sent += len(pending)
			}
			if blank > 0 {
				fmt.Fprintf(e.stderr, "skipped %d blank %s (--empty-ops appends them as empty ops)\n", blank, plural(blank, "line", "lines"))
			}
			if sent == 0 {
				return fmt.Errorf("%w: no ops to append: stdin had none (give --op, or one op per line on stdin)", errUsage)
			}
			return nil
		}}, args, stdin, stdout, stderr)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
