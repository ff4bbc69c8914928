package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const handoffSummary = "relocate a shard within its term: handoff start|adopt|abort"

func runHandoff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "start" && args[0] != "adopt" && args[0] != "abort") {
		fmt.Fprintln(stderr, "usage: shardfence handoff start --addr SOURCE --shard S --target-allocation ID [--target-node N] > ctx")
		fmt.Fprintln(stderr, "       shardfence handoff adopt --addr TARGET --context-file ctx")
		fmt.Fprintln(stderr, "       shardfence handoff abort --addr SOURCE --context-file ctx")
		return fmt.Errorf("%w: handoff needs start, adopt or abort", errUsage)
	}
	sub := args[0]
	fs := newFlags("handoff "+sub, stderr)
	c := addClientFlags(fs, sub == "start")
	target := fs.String("target-allocation", "", "allocation id of the target (start)")
	node := fs.String("target-node", "", "node of the target, for operators (start)")
	ctxFile := fs.String("context-file", "", "file with the handoff context `start` printed (adopt, abort); - for stdin")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := c.check(fs, sub == "start"); err != nil {
		return err
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if sub == "start" {
		if *target == "" {
			return fmt.Errorf("%w: --target-allocation is required", errUsage)
		}
		res, err := client.StartHandoff(ctx, connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: c.shard, TargetAllocationId: *target, TargetNode: *node}))
		if err != nil {
			return remoteErr(c.addr, err)
		}
		_, err = fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(res.Msg.GetHandoffContext()))
		return err
	}
	if *ctxFile == "" {
		return fmt.Errorf("%w: --context-file is required", errUsage)
	}
	var raw []byte
	if *ctxFile == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(*ctxFile)
	}
	if err != nil {
		return fmt.Errorf("%w: --context-file: %v", errUsage, err)
	}
	hc, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("%w: --context-file does not hold what `handoff start` printed: %v", errUsage, err)
	}
	if sub == "adopt" {
		res, err := client.AdoptHandoff(ctx, connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc}))
		if err != nil {
			return remoteErr(c.addr, err)
		}
		if c.asJSON {
			return printJSON(stdout, res.Msg.GetStatus())
		}
		printStatus(stdout, res.Msg.GetStatus())
		return nil
	}
	res, err := client.AbortHandoff(ctx, connect.NewRequest(&sidecarv1.AbortHandoffRequest{HandoffContext: hc}))
	if err != nil {
		return remoteErr(c.addr, err)
	}
	if res.Msg.GetResumed() {
		fmt.Fprintln(stdout, "handoff aborted: the source took the shard back and accepts appends")
	} else {
		fmt.Fprintln(stdout, "handoff not aborted: the target already wrote; the source stood down")
	}
	return nil
}
