package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const handoffSummary = "relocate a shard within its term: handoff start|adopt|abort"

const handoffUsage = `usage: shardfence handoff start --addr SOURCE --shard S --target-allocation ID [--target-node N] > ctx
       shardfence handoff adopt --addr TARGET --context-file ctx
       shardfence handoff abort --addr SOURCE --context-file ctx
Run 'shardfence handoff start -h' (or adopt, abort) for the flags.
`

func runHandoff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, handoffUsage)
		return flag.ErrHelp
	}
	if len(args) == 0 || (args[0] != "start" && args[0] != "adopt" && args[0] != "abort") {
		fmt.Fprint(stderr, handoffUsage)
		return fmt.Errorf("%w: handoff needs start, adopt or abort", errUsage)
	}
	sub := args[0]
	var target, node, ctxFile string
	cmd := clientCmd{name: "handoff " + sub, withShard: sub == "start"}
	cmd.flags = func(fs *flag.FlagSet) func() error {
		if sub == "start" {
			fs.StringVar(&target, "target-allocation", "", "allocation id of the target (required)")
			fs.StringVar(&node, "target-node", "", "node of the target, for operators")
			return func() error {
				if target == "" {
					return fmt.Errorf("%w: --target-allocation is required", errUsage)
				}
				return nil
			}
		}
		fs.StringVar(&ctxFile, "context-file", "", "file with the handoff context 'handoff start' printed; - for stdin (required)")
		return func() error {
			if ctxFile == "" {
				return fmt.Errorf("%w: --context-file is required", errUsage)
			}
			return nil
		}
	}
	cmd.run = func(ctx context.Context, e *clientEnv) error {
		if sub == "start" {
			res, err := e.client.StartHandoff(ctx, connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: e.shard, TargetAllocationId: target, TargetNode: node}))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(e.stdout, base64.StdEncoding.EncodeToString(res.Msg.GetHandoffContext()))
			return err
		}
		hc, err := readHandoffContext(ctxFile, e.stdin)
		if err != nil {
			return err
		}
		if sub == "adopt" {
			res, err := e.client.AdoptHandoff(ctx, connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc}))
			if err != nil {
				return err
			}
			return e.output(res.Msg.GetStatus(), func(w io.Writer) { printStatus(w, res.Msg.GetStatus()) })
		}
		res, err := e.client.AbortHandoff(ctx, connect.NewRequest(&sidecarv1.AbortHandoffRequest{HandoffContext: hc}))
		if err != nil {
			return err
		}
		return e.output(res.Msg, func(w io.Writer) {
			if res.Msg.GetResumed() {
				fmt.Fprintln(w, "handoff aborted: the source took the shard back and accepts appends")
			} else {
				fmt.Fprintln(w, "handoff not aborted: the target already wrote; the source stood down")
			}
		})
	}
	return runClient(ctx, cmd, args[1:], os.Stdin, stdout, stderr)
}

// readHandoffContext reads what `handoff start` printed, from a file or
// stdin (-).
func readHandoffContext(path string, stdin io.Reader) ([]byte, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --context-file: %v", errUsage, err)
	}
	hc, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("%w: --context-file does not hold what `handoff start` printed: %v", errUsage, err)
	}
	return hc, nil
}
