package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/harness/demo"
)

const demoSummary = "a guided failover: term 2 fences a live term 1, a handoff moves it on, no acknowledged op lost"

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stdout)
	storeURL := fs.String("store", "", "store URL for the demo's shard (default: a fresh file:// store in a temporary folder)")
	phase := fs.Duration("phase", 3*time.Second, "how long each phase appends")
	clients := fs.Int("clients", 8, "appending clients per sidecar")
	auto := fs.Bool("auto", false, "automatic failover instead: a master and three sidecar processes; the shard's sidecar is SIGKILLed and the shard comes back on another by itself")
	masterFailover := fs.Bool("master-failover", false, "master failover instead: a primary master, two standbys and three sidecar processes; the primary master is SIGKILLed, a standby is elected by itself and no shard moves")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *auto && *masterFailover {
		return fmt.Errorf("%w: --auto and --master-failover are two different demos", errUsage)
	}
	if *auto || *masterFailover {
		if fs.NArg() > 0 || *phase <= 0 {
			return fmt.Errorf("%w: unexpected argument, or --phase not positive", errUsage)
		}
		c, err := selfCmd()
		if err != nil {
			return err
		}
		if *masterFailover {
			return runDemoMasterFailover(ctx, c, *storeURL, *phase, stdout)
		}
		return runDemoAuto(ctx, c, *storeURL, *phase, stdout)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *clients < 1 || *phase <= 0 {
		return fmt.Errorf("%w: --clients and --phase must be positive", errUsage)
	}
	store, where, closeStore, err := openStoreOrTemp(ctx, *storeURL, "shardfence-demo-")
	if err != nil {
		return err
	}
	defer closeStore()
	return demo.Run(ctx, demo.Config{Store: store, Where: where, Phase: *phase, Clients: *clients}, stdout)
}

// openStoreOrTemp opens the store at url, or a fresh file:// store in a
// temporary folder named after tempPrefix when url is empty; where names
// it for output, and done closes it (and removes the folder).
func openStoreOrTemp(ctx context.Context, url, tempPrefix string) (c *blobstore.Container, where string, done func(), err error) {
	url, cleanup, err := storeOrTemp(url, tempPrefix)
	if err != nil {
		return nil, "", nil, err
	}
	c, err = blobstore.Open(ctx, url)
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("open store: %w", err)
	}
	return c, blobstore.Redact(url), func() { _ = c.Close(); cleanup() }, nil
}

// demoFleet is the start of a process demo: the store (url, or a fresh
// file:// store), its timeline, and an empty fleet of cluster "demo"; the
// context ends after five minutes. done stops the fleet and removes the
// store it made.
func demoFleet(ctx context.Context, c fleetCmd, url string, stdout io.Writer) (_ context.Context, _ *procFleet, _ *demo.Timeline, where string, done func(), err error) {
	url, cleanup, err := storeOrTemp(url, "shardfence-demo-")
	if err != nil {
		return nil, nil, nil, "", nil, err
	}
	f := newProcFleet(c, url, url)
	f.cluster = "demo"
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	return ctx, f, demo.NewTimeline(stdout), blobstore.Redact(url), func() { cancel(); f.stop(); cleanup() }, nil
}
