package main

import (
	"context"
	"errors"
	"flag"
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

// settingsFlags are the flags of `shardfence settings`.
type settingsFlags struct {
	storeURL, shard, alloc, node, mode string
	term                               int64
	lease, maxWait                     time.Duration
}

func settingsFlagSet(stdout io.Writer) (*flag.FlagSet, *settingsFlags) {
	fs := newFlags("settings", stdout)
	f := &settingsFlags{}
	fs.StringVar(&f.storeURL, "store", "", "store URL all shards live under (required)")
	fs.StringVar(&f.shard, "shard", "", "shard id (required)")
	fs.Int64Var(&f.term, "term", 0, "term the rewrite claims, above every term of the shard (rewrite only)")
	fs.StringVar(&f.alloc, "allocation", "", "allocation id recorded in the claimed fence key (rewrite only)")
	fs.StringVar(&f.node, "node", "", "node recorded in the claimed fence key")
	fs.StringVar(&f.mode, "fencing-mode", "", "the mode to store: per_sync, lease, create_only, observe, or unfenced")
	fs.DurationVar(&f.lease, "lease-interval", 0, fmt.Sprintf("lease to store with lease mode (%v..%v)", seal.MinLeaseInterval, seal.MaxLeaseInterval))
	fs.DurationVar(&f.maxWait, "max-wait", seal.MaxLeaseInterval+time.Second, "longest wait for a running lease before the rewrite is rolled back")
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
	return fs, f
}

// rewrite reports whether the flags ask for a rewrite (any of its flags
// given) and, if so, the fencing to store.
func (f *settingsFlags) rewrite() (bool, seal.Fencing, error) {
	var to seal.Fencing
	if f.term == 0 && f.alloc == "" && f.mode == "" && f.lease == 0 {
		return false, to, nil
	}
	switch {
	case f.term < 1 || f.term > sidecar.MaxTerm || f.alloc == "":
		return true, to, fmt.Errorf("%w: a rewrite needs --term (1..%d, above every term of the shard) and --allocation", errUsage, int64(sidecar.MaxTerm))
	case f.mode == "":
		return true, to, fmt.Errorf("%w: a rewrite needs --fencing-mode (per_sync, lease, create_only, observe or unfenced)", errUsage)
	case f.maxWait <= 0:
		return true, to, fmt.Errorf("%w: --max-wait must be positive", errUsage)
	}
	m, err := translog.PerSync, error(nil)
	if f.mode == "unfenced" {
		to.Disabled = true
	} else if m, err = parseMode(f.mode); err != nil {
		// parseMode names the modes a shard opens with; a rewrite
		// may also store no fencing at all.
		return true, to, fmt.Errorf("%w: fencing mode %q (per_sync, lease, create_only, observe or unfenced)", errUsage, clipArg(f.mode))
	}
	to.Mode = m
	if m == translog.Lease {
		if f.lease < seal.MinLeaseInterval || f.lease > seal.MaxLeaseInterval {
			return true, to, fmt.Errorf("%w: lease mode needs --lease-interval in %v..%v", errUsage, seal.MinLeaseInterval, seal.MaxLeaseInterval)
		}
		to.LeaseInterval = f.lease
	} else if f.lease != 0 {
		return true, to, fmt.Errorf("%w: --lease-interval goes with --fencing-mode lease", errUsage)
	}
	return true, to, nil
}

func runSettings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, f := settingsFlagSet(stdout)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, clipArg(fs.Arg(0)))
	case f.storeURL == "" || f.shard == "":
		return fmt.Errorf("%w: --store and --shard are required", errUsage)
	}
	if err := sidecar.ValidateShardID(f.shard); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	rewrite, to, err := f.rewrite()
	if err != nil {
		return err
	}
	root, err := blobstore.Open(ctx, f.storeURL)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer root.Close()
	store, err := blobstore.Sub(root, f.shard)
	if err != nil {
		return err
	}
	if !rewrite {
		return showFencing(ctx, store, f.shard, stdout)
	}
	return f.rewriteFencing(ctx, store, to, stdout, stderr)
}

// showFencing prints a shard's stored fencing and a rewrite in progress.
func showFencing(ctx context.Context, store *blobstore.Container, shard string, stdout io.Writer) error {
	f, rw, found, err := seal.ReadFencing(ctx, store, shard, seal.Options{})
	switch {
	case err != nil:
		return err
	case !found:
		fmt.Fprintf(stdout, "shard %s has no stored fencing: its first open stores what it asks for\n", shard)
	default:
		fmt.Fprintf(stdout, "shard %s: fencing %s (%s)\n", shard, f, layout.FencingKey)
		if rw != nil {
			fmt.Fprintf(stdout, "rewrite in progress %s: no term opens until it finishes (run the rewrite again)\n", rw)
		}
	}
	return nil
}

// rewriteFencing stores the fencing to (recovery.RewriteFencing), its
// steps on stderr.
func (f *settingsFlags) rewriteFencing(ctx context.Context, store *blobstore.Container, to seal.Fencing, stdout, stderr io.Writer) error {
	res, err := recovery.RewriteFencing(ctx, store, f.shard, f.term, f.alloc, to, recovery.RewriteOptions{
		Node: f.node, MaxWait: f.maxWait,
		Progress: func(step string) {
			fmt.Fprintf(stderr, "%s\n", step)
		},
	})
	var fe *fence.FencedError
	if errors.As(err, &fe) && !errors.Is(err, recovery.ErrRewriteNotRolledBack) {
		// The rewrite's claim found --term taken or a higher term: the
		// old setting was put back, and a higher term is all it takes.
		next := "a --term above every term of the shard ('inspect --store' lists them)"
		if fe.Successor >= f.term {
			next = fmt.Sprintf("--term %d or higher", fe.Successor+1)
		}
		return fmt.Errorf("shard %s: the rewrite cannot claim term %d (%s); nothing changed: run it again with %s", f.shard, f.term, fe.Reason, next)
	}
	if err != nil {
		return err
	}
	if res.Unchanged {
		fmt.Fprintf(stdout, "shard %s already runs fencing %s; nothing changed\n", f.shard, res.To)
		return nil
	}
	fmt.Fprintf(stdout, "shard %s: fencing %s -> %s (waited %v); term %d is claimed: the shard's next open needs a higher term\n",
		f.shard, res.From, res.To, res.Waited.Round(time.Millisecond), f.term)
	return nil
}
