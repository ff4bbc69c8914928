package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const readSummary = "print the ops of a shard's lineage, one per line"

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("read", stderr)
	c := addClientFlags(fs, true)
	from := fs.Int64("from", 0, "first sequence number to print")
	maxOps := fs.Int64("max", 0, "print at most this many ops (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(fs, true); err != nil {
		return err
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	st, err := client.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: c.shard, FromSeq: *from, MaxOps: *maxOps}))
	if err != nil {
		return remoteErr(c.addr, err)
	}
	defer st.Close()
	enc := json.NewEncoder(stdout)
	for st.Receive() {
		b := st.Msg().GetBatch()
		for i, op := range b.GetOps() {
			if c.asJSON {
				if err := enc.Encode(struct {
					Seq  int64  `json:"seq"`
					Term int64  `json:"term"`
					Gen  int64  `json:"gen"`
					Op   string `json:"op"`
				}{b.GetFirstSeqNo() + int64(i), b.GetTerm(), b.GetGen(), string(op)}); err != nil {
					return err
				}
				continue
			}
			if _, err := fmt.Fprintf(stdout, "%s\n", op); err != nil {
				return err
			}
		}
	}
	if err := st.Err(); err != nil {
		return remoteErr(c.addr, err)
	}
	return nil
}
