package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/sidecar"
)

const inspectSummary = "show a shard's fence keys and translog, through a sidecar or straight from the store"

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	c := addClientFlags(fs, true)
	storeURL := fs.String("store", "", "read straight from this store URL instead of asking a sidecar (no sidecar needed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(fs, true); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var res *sidecarv1.InspectResponse
	if *storeURL != "" {
		store, err := blobstore.Open(ctx, *storeURL)
		if err != nil {
			return fmt.Errorf("open store %s: %w", blobstore.Redact(*storeURL), err)
		}
		defer store.Close()
		if res, err = sidecar.Inspect(ctx, store, c.shard); err != nil {
			return err
		}
	} else {
		client, err := c.dial()
		if err != nil {
			return err
		}
		r, err := client.Inspect(ctx, connect.NewRequest(&sidecarv1.InspectRequest{Shard: c.shard}))
		if err != nil {
			return remoteErr(c.addr, err)
		}
		res = r.Msg
	}
	if c.asJSON {
		return printJSON(stdout, res)
	}
	printInspect(stdout, res)
	return nil
}

func printInspect(w io.Writer, res *sidecarv1.InspectResponse) {
	fmt.Fprintf(w, "shard %s\n\nfence keys (newest term first):\n", res.GetShard())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TERM\tOWNER\tSEQ\tGEN\tNOTE")
	for _, k := range res.GetFenceKeys() {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\n", k.GetTerm(), k.GetOwner(), k.GetSeq(), k.GetGen(), k.GetError())
	}
	tw.Flush()
	if len(res.GetFenceKeys()) == 0 {
		fmt.Fprintln(w, "  none: the shard was never claimed")
	}
	fmt.Fprintln(w, "\ntranslog (newest term first):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TERM\tGENS\tCOUNT\tPOISONED")
	for _, t := range res.GetTranslog() {
		var p []string
		for _, g := range t.GetPoisoned() {
			p = append(p, fmt.Sprint(g))
		}
		fmt.Fprintf(tw, "  %d\t%d..%d\t%d\t%s\n", t.GetTerm(), t.GetFirstGen(), t.GetLastGen(), t.GetCount(), strings.Join(p, ","))
	}
	tw.Flush()
	if len(res.GetTranslog()) == 0 {
		fmt.Fprintln(w, "  empty")
	}
	for _, l := range res.GetLines() {
		fmt.Fprintln(w, l)
	}
}
