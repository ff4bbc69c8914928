package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/sidecar"
	"github.com/shardfence/shardfence/translog"
)

const settingsSummary = "show or rewrite a shard's stored fencing (admin; the shard must have no live owner)"

func runSettings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("settings", stdout)
	storeURL := fs.String("store", "", "store URL all shards live under (required)")
	shard := fs.String("shard", "", "shard id (required)")
	term := fs.Int64("term", 0, "term the rewrite claims, above every term of the shard (rewrite only)")
	alloc := fs.String("allocation", "", "allocation id recorded in the claimed fence key (rewrite only)")
	node := fs.String("node", "", "node recorded in the claimed fence key")
	mode := fs.String("fencing-mode", "", "the mode to store: per_sync, lease, create_only, observe, or unfenced")
	lease := fs.Duration("lease-interval", 0, fmt.Sprintf("lease to store with lease mode (%v..%v)", seal.MinLeaseInterval, seal.MaxLeaseInterval))
	maxWait := fs.Duration("max-wait", seal.MaxLeaseInterval+time.Second, "longest wait for a running lease before the rewrite is rolled back")
	fs.Usage = func() {
		w := fs.Output() // the flag package prints usage itself on -h, to its output
		fmt.Fprintf(w, "usage: shardfence settings --store URL --shard S                      # show the stored fencing\n")
		fmt.Fprintf(w, "       shardfence settings --store URL --shard S --term T --allocation A --fencing-mode lease --lease-interval 10s\n\n")
		fmt.Fprintf(w, "A rewrite blocks every open of the shard while it runs, claims term T (a lower per-sync or\n")
		fmt.Fprintf(w, "lease writer fails its next CAS; a lower create-only, observe or unfenced writer is stopped by\n")
		fmt.Fprintf(w, "the next open's seal, which also keeps what it acknowledged), waits out the old lease if the\n")
		fmt.Fprintf(w, "new setting would shorten a successor's wait and a term ever opened, then stores the new\n")
		fmt.Fprintf(w, "setting. The shard's next open needs a term above T.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, clipArg(fs.Arg(0)))
	case *storeURL == "" || *shard == "":
		return fmt.Errorf("%w: --store and --shard are required", errUsage)
	}
	if err := sidecar.ValidateShardID(*shard); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	rewrite := *term != 0 || *alloc != "" || *mode != "" || *lease != 0
	var to seal.Fencing
	if rewrite {
		switch {
		case *term < 1 || *term > sidecar.MaxTerm || *alloc == "":
			return fmt.Errorf("%w: a rewrite needs --term (1..%d, above every term of the shard) and --allocation", errUsage, int64(sidecar.MaxTerm))
		case *mode == "":
			return fmt.Errorf("%w: a rewrite needs --fencing-mode (per_sync, lease, create_only, observe or unfenced)", errUsage)
		case *maxWait <= 0:
			return fmt.Errorf("%w: --max-wait must be positive", errUsage)
		}
		m, err := translog.PerSync, error(nil)
		if *mode == "unfenced" {
			to.Disabled = true
		} else if m, err = parseMode(*mode); err != nil {
			// parseMode names the modes a shard opens with; a rewrite
			// may also store no fencing at all.
			return fmt.Errorf("%w: fencing mode %q (per_sync, lease, create_only, observe or unfenced)", errUsage, clipArg(*mode))
		}
		to.Mode = m
		if m == translog.Lease {
			if *lease < seal.MinLeaseInterval || *lease > seal.MaxLeaseInterval {
				return fmt.Errorf("%w: lease mode needs --lease-interval in %v..%v", errUsage, seal.MinLeaseInterval, seal.MaxLeaseInterval)
			}
			to.LeaseInterval = *lease
		} else if *lease != 0 {
			return fmt.Errorf("%w: --lease-interval goes with --fencing-mode lease", errUsage)
		}
	}

	root, err := blobstore.Open(ctx, *storeURL)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer root.Close()
	store, err := blobstore.Sub(root, *shard)
	if err != nil {
		return err
	}
	if !rewrite {
		f, rw, found, err := seal.ReadFencing(ctx, store, *shard, seal.Options{})
		switch {
		case err != nil:
			return err
		case !found:
			fmt.Fprintf(stdout, "shard %s has no stored fencing: its first open stores what it asks for\n", *shard)
		default:
			fmt.Fprintf(stdout, "shard %s: fencing %s (%s)\n", *shard, f, layout.FencingKey)
			if rw != nil {
				fmt.Fprintf(stdout, "rewrite in progress %s: no term opens until it finishes (run the rewrite again)\n", rw)
			}
		}
		return nil
	}
	res, err := recovery.RewriteFencing(ctx, store, *shard, *term, *alloc, to, recovery.RewriteOptions{
		Node: *node, MaxWait: *maxWait,
		Progress: func(step string) {
			fmt.Fprintf(stderr, "%s\n", step)
		},
	})
	var fe *fence.FencedError
	if errors.As(err, &fe) && !errors.Is(err, recovery.ErrRewriteNotRolledBack) {
		// The rewrite's claim found --term taken or a higher term: the
		// old setting was put back, and a higher term is all it takes.
		next := "a --term above every term of the shard ('inspect --store' lists them)"
		if fe.Successor >= *term {
			next = fmt.Sprintf("--term %d or higher", fe.Successor+1)
		}
		return fmt.Errorf("shard %s: the rewrite cannot claim term %d (%s); nothing changed: run it again with %s", *shard, *term, fe.Reason, next)
	}
	if err != nil {
		return err
	}
	if res.Unchanged {
		fmt.Fprintf(stdout, "shard %s already runs fencing %s; nothing changed\n", *shard, res.To)
		return nil
	}
	fmt.Fprintf(stdout, "shard %s: fencing %s -> %s (waited %v); term %d is claimed: the shard's next open needs a higher term\n",
		*shard, res.From, res.To, res.Waited.Round(time.Millisecond), *term)
	return nil
}
