package main

import (
	"bufio"
	"context"
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

func appendFrom(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("append", stderr)
	c := addClientFlags(fs, true)
	var ops stringList
	fs.Var(&ops, "op", "op to append (repeatable); without it, each stdin line is one op")
	batch := fs.Int("batch", 256, "stdin lines sent per Append")
	term := fs.Int64("expected-term", 0, "refuse unless the shard is open at this term")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(fs, true); err != nil {
		return err
	}
	if *batch < 1 {
		return fmt.Errorf("%w: --batch must be at least 1", errUsage)
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	send := func(ops [][]byte) error {
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		res, err := client.Append(actx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: c.shard, Ops: ops, ExpectedTerm: *term}))
		if err != nil {
			return remoteErr(c.addr, err)
		}
		a := res.Msg
		if c.asJSON {
			return printJSON(stdout, a)
		}
		_, err = fmt.Fprintf(stdout, "acked %d ops: term %d gen %d seq %d..%d\n", a.GetCount(), a.GetTerm(), a.GetGen(), a.GetFirstSeqNo(), a.GetFirstSeqNo()+a.GetCount()-1)
		return err
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
	for sc.Scan() {
		pending = append(pending, append([]byte(nil), sc.Bytes()...))
		if len(pending) == *batch {
			if err := send(pending); err != nil {
				return err
			}
			pending = nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading ops from stdin: %w", err)
	}
	if len(pending) > 0 {
		return send(pending)
	}
	return nil
}
