package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const watchSummary = "follow a sidecar's Watch feed: one line per shard gained, lost, fenced or opening"

// shardList is a repeatable --shard.
type shardList []string

func (l *shardList) String() string { return strings.Join(*l, ",") }
func (l *shardList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var shards shardList
	timed := false
	return runClient(ctx, clientCmd{name: "watch", perCall: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.Var(&shards, "shard", "watch only this shard (repeatable; default every shard)")
			fs.Lookup("timeout").Usage = "stop watching after this long (more than 0, at most 24h; default: until interrupted)"
			fs.Lookup("json").Usage = "print each event as one line of protobuf JSON (checkpoint file bytes and op payloads left out)"
			return func() error {
				fs.Visit(func(f *flag.Flag) { timed = timed || f.Name == "timeout" })
				return nil
			}
		},
		run: func(ctx context.Context, e *clientEnv) error {
			if timed {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, e.timeout)
				defer cancel()
			}
			return watchEvents(ctx, e, shards)
		}}, args, os.Stdin, stdout, stderr)
}

// watchEvents prints the feed until ctx ends (Ctrl-C, --timeout: a clean
// exit) or the sidecar ends it (an error: a watcher that fell behind is
// cut off with watch_behind, and watches again).
func watchEvents(ctx context.Context, e *clientEnv, shards []string) error {
	st, err := e.client.Watch(ctx, connect.NewRequest(&sidecarv1.WatchRequest{Shards: shards}))
	if err != nil {
		return err
	}
	defer st.Close()
	for st.Receive() {
		ev := st.Msg()
		if e.asJSON {
			if err := printJSON(e.stdout, watchJSON(ev)); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(e.stdout, watchLine(ev)); err != nil {
			return err
		}
	}
	err = st.Err()
	switch {
	case ctx.Err() != nil:
		return nil
	case err == nil:
		return errors.New("the sidecar ended the watch feed")
	}
	return err
}

// watchJSON is the event without the restore stream's bytes.
func watchJSON(ev *sidecarv1.WatchResponse) *sidecarv1.WatchResponse {
	if ev.GetCheckpointFile() == nil && ev.GetOps() == nil {
		return ev
	}
	ev = proto.Clone(ev).(*sidecarv1.WatchResponse)
	if f := ev.GetCheckpointFile(); f != nil {
		f.Data = nil
	}
	if o := ev.GetOps(); o != nil {
		o.Ops = nil
	}
	return ev
}

// watchLine is one event as one line: its kind, the shard and what the
// event says.
func watchLine(ev *sidecarv1.WatchResponse) string {
	kind := strings.TrimPrefix(ev.GetKind().String(), "WATCH_EVENT_KIND_")
	if ev.GetKind() == sidecarv1.WatchEventKind_WATCH_EVENT_KIND_SYNCED {
		return "SYNCED (the shards here when the watch began are listed above; live events follow)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %s term %d", kind, printable(ev.GetShard()), ev.GetTerm())
	if a := ev.GetAllocation(); a != "" {
		fmt.Fprintf(&b, " allocation %s", printable(a))
	}
	switch ev.GetKind() {
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED:
		if s := ev.GetStatus(); s != nil {
			fmt.Fprintf(&b, " gen %d next seq %d", s.GetGen(), s.GetNextSeqNo())
		}
		if ev.GetCurrent() {
			b.WriteString(" (open when the watch began)")
		} else if rp := ev.GetRestorePoint(); rp != nil {
			fmt.Fprintf(&b, " (restored to gen %d, checkpoint gen %d)", rp.GetGen(), rp.GetCheckpointGen())
		}
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_LOST:
		fmt.Fprintf(&b, " reason %s", printable(ev.GetReason()))
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_FENCED:
		if t := ev.GetSuccessorTerm(); t > 0 {
			fmt.Fprintf(&b, " by term %d", t)
		}
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_OPEN_FAILED:
		fmt.Fprintf(&b, " reason %s: %s", printable(ev.GetReason()), printable(ev.GetError()))
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_PROGRESS:
		p := ev.GetProgress()
		fmt.Fprintf(&b, " step %s %d/%d (%d bytes)", printable(p.GetStep()), p.GetDone(), p.GetTotal(), p.GetBytes())
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_CHECKPOINT_FILE:
		f := ev.GetCheckpointFile()
		fmt.Fprintf(&b, " file %s offset %d, %d bytes", printable(f.GetName()), f.GetOffset(), len(f.GetData()))
		if f.GetLast() {
			b.WriteString(" (last)")
		}
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_OPS:
		o := ev.GetOps()
		fmt.Fprintf(&b, " gen %d, %d ops from seq %d", o.GetGen(), len(o.GetOps()), o.GetFirstSeqNo())
	case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_CHECKPOINT_REQUESTED:
		fmt.Fprintf(&b, " checkpoint gen %d (backlog %d bytes, %d generations)", ev.GetCheckpointGen(), ev.GetBacklogBytes(), ev.GetBacklogGens())
	}
	if ev.GetError() != "" && ev.GetKind() != sidecarv1.WatchEventKind_WATCH_EVENT_KIND_OPEN_FAILED {
		fmt.Fprintf(&b, ": %s", printable(ev.GetError()))
	}
	return b.String()
}
