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
			p := &openPrinter{e: e, term: term, alloc: alloc, warm: warm}
			for st.Receive() {
				if err := p.print(st.Msg()); err != nil {
					return err
				}
			}
			return st.Err()
		}}, args, os.Stdin, stdout, stderr)
}

// openPrinter prints an Open stream: progress on stderr, the outcome on
// stdout (or every message as JSON with --json).
type openPrinter struct {
	e            *clientEnv
	term         int64
	alloc        string
	warm         bool
	ops, files   int64
	hydrateStart time.Time
}

func (p *openPrinter) print(msg *sidecarv1.OpenResponse) error {
	e := p.e
	if e.asJSON {
		return printJSON(e.stdout, msg)
	}
	switch ev := msg.GetEvent().(type) {
	case *sidecarv1.OpenResponse_Progress:
		p.progress(ev.Progress)
	case *sidecarv1.OpenResponse_Ops:
		p.ops += int64(len(ev.Ops.GetOps()))
	case *sidecarv1.OpenResponse_CheckpointFile:
		if ev.CheckpointFile.GetLast() {
			p.files++
		}
	case *sidecarv1.OpenResponse_Opened:
		p.opened(ev.Opened)
	}
	return nil
}

func (p *openPrinter) progress(pr *sidecarv1.OpenProgress) {
	if pr.GetStep() == "hydrate" && p.hydrateStart.IsZero() {
		p.hydrateStart = time.Now()
	}
	rate := ""
	if pr.GetStep() == "hydrate" && pr.GetBytes() > 0 {
		if s := time.Since(p.hydrateStart).Seconds(); s > 0.05 {
			rate = fmt.Sprintf(" (%.1f MiB/s)", float64(pr.GetBytes())/(1<<20)/s)
		}
	}
	fmt.Fprintf(p.e.stderr, "%-8s %d/%d %d bytes%s\n", pr.GetStep(), pr.GetDone(), pr.GetTotal(), pr.GetBytes(), rate)
}

func (p *openPrinter) opened(o *sidecarv1.Opened) {
	w := p.e.stdout
	r := o.GetRestorePoint()
	fmt.Fprintf(w, "opened shard %s at term %d (allocation %s)\n", p.e.shard, p.term, printable(p.alloc))
	if !p.warm {
		fmt.Fprintf(w, "restore point: term %d gen %d, next seq %d, checkpoint gen %d; replayed %d ops, %d checkpoint files\n",
			r.GetTerm(), r.GetGen(), r.GetNextSeqNo(), r.GetCheckpointGen(), p.ops, p.files)
		return
	}
	fmt.Fprintf(w, "restore point: term %d gen %d, checkpoint gen %d; warm: appends open once the replay ends (status)\n",
		r.GetTerm(), r.GetGen(), r.GetCheckpointGen())
	if ck := o.GetCheckpoint(); ck != nil {
		fmt.Fprintf(w, "checkpoint: term %d gen %d, next seq %d, %d files served on demand (read-file):\n", ck.GetTerm(), ck.GetGen(), ck.GetNextSeqNo(), len(ck.GetFiles()))
		for _, f := range ck.GetFiles() {
			fmt.Fprintf(w, "  %s\t%d bytes\tcrc32c %08x\n", printable(f.GetName()), f.GetSize(), f.GetCrc32C())
		}
	}
}
