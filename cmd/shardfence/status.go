package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const statusSummary = "show a shard's term, owner, generation, fencing, store health and settings (without --shard: list the shards open on the sidecar)"

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runClient(ctx, clientCmd{name: "status", withShard: true, shardOptional: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.Lookup("shard").Usage = "shard id; without it, list every shard open (or fenced) on the sidecar: term, state, generation"
			return nil
		},
		run: func(ctx context.Context, e *clientEnv) error {
			if e.shard == "" {
				return listShards(ctx, e)
			}
			res, err := e.client.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: e.shard}))
			if err != nil {
				return err
			}
			return e.output(res.Msg.GetStatus(), func(w io.Writer) { printStatus(w, res.Msg.GetStatus()) })
		}}, args, os.Stdin, stdout, stderr)
}

// listShards prints every shard open or fenced on the sidecar. The
// sidecar API has no list call; its Watch feed starts with exactly that
// list (GAINED for each open shard, FENCED for each fenced one, then
// SYNCED), so the list is the feed up to SYNCED.
func listShards(ctx context.Context, e *clientEnv) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch once the list is read
	st, err := e.client.Watch(ctx, connect.NewRequest(&sidecarv1.WatchRequest{}))
	if err != nil {
		return err
	}
	defer st.Close()
	var shards []*sidecarv1.ShardStatus
	synced := false
	for !synced && st.Receive() {
		ev := st.Msg()
		switch ev.GetKind() {
		case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_FENCED:
			if s := ev.GetStatus(); s != nil {
				shards = append(shards, s)
			} else {
				shards = append(shards, &sidecarv1.ShardStatus{Shard: ev.GetShard(), Term: ev.GetTerm(), AllocationId: ev.GetAllocation(), Fenced: true})
			}
		case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_SYNCED:
			synced = true
		}
	}
	if !synced {
		if err := st.Err(); err != nil {
			return err
		}
		return errors.New("the sidecar ended its watch feed before it listed its shards")
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i].GetShard() < shards[j].GetShard() })
	if e.asJSON {
		for _, s := range shards {
			if err := printJSON(e.stdout, s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(shards) == 0 {
		fmt.Fprintln(e.stdout, "no shard is open on this sidecar")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tTERM\tSTATE\tGEN\tNEXT SEQ\tALLOCATION\tFENCED")
	for _, s := range shards {
		fenced := "no"
		if s.GetFenced() {
			fenced = "yes"
			if s.GetSuccessorTerm() > 0 {
				fenced = fmt.Sprintf("by term %d", s.GetSuccessorTerm())
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\n", printable(s.GetShard()), s.GetTerm(), printable(s.GetState()), s.GetGen(), s.GetNextSeqNo(), printable(s.GetAllocationId()), fenced)
	}
	return tw.Flush()
}
