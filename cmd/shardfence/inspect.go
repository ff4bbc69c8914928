package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/sidecar"
)

const inspectSummary = "show a shard's fence keys and translog, through a sidecar or straight from the store"

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var storeURL string
	cmd := clientCmd{name: "inspect", withShard: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&storeURL, "store", "", "read straight from this store URL instead of asking a sidecar (no sidecar needed)")
			return nil
		},
		run: func(ctx context.Context, e *clientEnv) error {
			var res *sidecarv1.InspectResponse
			if storeURL != "" {
				store, err := blobstore.Open(ctx, storeURL)
				if err != nil {
					return fmt.Errorf("open store: %w", err)
				}
				defer store.Close()
				if res, err = sidecar.Inspect(ctx, store, e.shard); err != nil {
					return err
				}
			} else {
				r, err := e.client.Inspect(ctx, connect.NewRequest(&sidecarv1.InspectRequest{Shard: e.shard}))
				if err != nil {
					return err
				}
				res = r.Msg
			}
			return e.output(res, func(w io.Writer) { printInspect(w, res) })
		}}
	return runClient(ctx, cmd, args, os.Stdin, stdout, stderr)
}

func printInspect(w io.Writer, res *sidecarv1.InspectResponse) {
	fmt.Fprintf(w, "shard %s\n\nfence keys (newest term first):\n", res.GetShard())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TERM\tOWNER\tSEQ\tGEN\tNOTE")
	for _, k := range res.GetFenceKeys() {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\n", k.GetTerm(), printable(k.GetOwner()), k.GetSeq(), k.GetGen(), printable(k.GetError()))
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
		fmt.Fprintln(w, printable(l))
	}
}
