package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/sidecar"
)

const openSummary = "open a shard on a sidecar at a term (claim, seal, restore)"

func runOpen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		term               int64
		alloc, mode, order string
		lease              time.Duration
		warm, unfenced     bool
		settings           = &sidecarv1.ShardSettings{}
	)
	return runClient(ctx, clientCmd{name: "open", withShard: true,
		flags: func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&term, "term", 0, fmt.Sprintf("term granted to this primary (required, 1..%d)", int64(sidecar.MaxTerm)))
			fs.StringVar(&alloc, "allocation", "", "allocation id of this copy of the shard (required)")
			fs.StringVar(&mode, "fencing-mode", "", "per_sync, lease, create_only or observe (default: the sidecar's); a shard keeps the mode of its first open until 'shardfence settings' rewrites it")
			fs.BoolVar(&unfenced, "unfenced", false, "open with fencing disabled (the sidecar needs --allow-unfenced; a shard created so stays unfenced until 'shardfence settings' rewrites it)")
			fs.StringVar(&order, "ack-order", "", "concurrent or sequenced (default: the sidecar's)")
			fs.BoolVar(&warm, "warm", false, "open in partial locality: return once sealed, serve the checkpoint's files on demand (read-file) while the sidecar hydrates them; appends wait for the replay")
			fs.DurationVar(&lease, "lease-interval", 0, fmt.Sprintf("lease of lease mode, %v..%v (default: the sidecar's)", sidecar.MinLeaseInterval, sidecar.MaxLeaseInterval))
			return func() error {
				switch {
				case term < 1 || term > sidecar.MaxTerm || alloc == "":
					return fmt.Errorf("%w: --term (1..%d) and --allocation are required", errUsage, int64(sidecar.MaxTerm))
				case unfenced && (mode != "" || lease != 0):
					return fmt.Errorf("%w: --unfenced goes without --fencing-mode and --lease-interval", errUsage)
				case lease != 0 && (lease < sidecar.MinLeaseInterval || lease > sidecar.MaxLeaseInterval):
					return fmt.Errorf("%w: --lease-interval %v is outside %v..%v", errUsage, lease, sidecar.MinLeaseInterval, sidecar.MaxLeaseInterval)
				}
				settings.LeaseIntervalMs = lease.Milliseconds()
				settings.FencingDisabled = unfenced
				if mode != "" {
					m, err := parseModeProto(mode)
					if err != nil {
						return err
					}
					settings.Mode = m
				}
				if order != "" {
					o, err := parseAckOrderProto(order)
					if err != nil {
						return err
					}
					settings.AckOrder = o
				}
				return nil
			}
		},
		run: func(ctx context.Context, e *clientEnv) error {
			st, err := e.client.Open(ctx, connect.NewRequest(&sidecarv1.OpenRequest{Shard: e.shard, Term: term, AllocationId: alloc, Settings: settings, Warm: warm}))
			if err != nil {
				return err
			}
			defer st.Close()
			var ops, files int64
			var hydrateStart time.Time
			for st.Receive() {
				msg := st.Msg()
				if e.asJSON {
					if err := printJSON(e.stdout, msg); err != nil {
						return err
					}
					continue
				}
				switch ev := msg.GetEvent().(type) {
				case *sidecarv1.OpenResponse_Progress:
					p := ev.Progress
					if p.GetStep() == "hydrate" && hydrateStart.IsZero() {
						hydrateStart = time.Now()
					}
					rate := ""
					if p.GetStep() == "hydrate" && p.GetBytes() > 0 {
						if s := time.Since(hydrateStart).Seconds(); s > 0.05 {
							rate = fmt.Sprintf(" (%.1f MiB/s)", float64(p.GetBytes())/(1<<20)/s)
						}
					}
					fmt.Fprintf(e.stderr, "%-8s %d/%d %d bytes%s\n", p.GetStep(), p.GetDone(), p.GetTotal(), p.GetBytes(), rate)
				case *sidecarv1.OpenResponse_Ops:
					ops += int64(len(ev.Ops.GetOps()))
				case *sidecarv1.OpenResponse_CheckpointFile:
					if ev.CheckpointFile.GetLast() {
						files++
					}
				case *sidecarv1.OpenResponse_Opened:
					r := ev.Opened.GetRestorePoint()
					fmt.Fprintf(e.stdout, "opened shard %s at term %d (allocation %s)\n", e.shard, term, printable(alloc))
					if warm {
						fmt.Fprintf(e.stdout, "restore point: term %d gen %d, checkpoint gen %d; warm: appends open once the replay ends (status)\n",
							r.GetTerm(), r.GetGen(), r.GetCheckpointGen())
						if ck := ev.Opened.GetCheckpoint(); ck != nil {
							fmt.Fprintf(e.stdout, "checkpoint: term %d gen %d, next seq %d, %d files served on demand (read-file):\n", ck.GetTerm(), ck.GetGen(), ck.GetNextSeqNo(), len(ck.GetFiles()))
							for _, f := range ck.GetFiles() {
								fmt.Fprintf(e.stdout, "  %s\t%d bytes\tcrc32c %08x\n", printable(f.GetName()), f.GetSize(), f.GetCrc32C())
							}
						}
						continue
					}
					fmt.Fprintf(e.stdout, "restore point: term %d gen %d, next seq %d, checkpoint gen %d; replayed %d ops, %d checkpoint files\n",
						r.GetTerm(), r.GetGen(), r.GetNextSeqNo(), r.GetCheckpointGen(), ops, files)
				}
			}
			return st.Err()
		}}, args, os.Stdin, stdout, stderr)
}
