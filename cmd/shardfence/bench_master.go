package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	fsstore "github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/master/masterbench"
)

const benchMasterSummary = "master: remount recovery-lease assignment, heap per object, GetReplicaList ops/s, snapshots, promotion, log cost per mutation"

func runBenchMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("bench master", stdout)
	objects := fl.String("objects", "1000000,10000000", "comma-separated object counts for the remount table (10M needs about 4 GB of memory); empty skips it")
	clients := fl.String("clients", "1,16", "comma-separated client counts for the GetReplicaList table; empty skips it")
	keys := fl.Int("read-keys", 100000, "objects the GetReplicaList table reads from")
	dur := fl.Duration("duration", 2*time.Second, "measuring time per GetReplicaList row")
	storeURL := fl.String("store", "", "store URL for the snapshot, promotion and log tables (e.g. minio://...); empty: the fs driver in a temporary directory")
	snapObjects := fl.String("snapshot-objects", "1000000", "comma-separated object counts for the snapshot table (10000000 needs about 6 GB of memory); empty skips it")
	promoteObjects := fl.Int("promote-objects", 1000000, "objects of the promotion row; 0 skips it")
	appendClients := fl.String("append-clients", "1,16", "comma-separated client counts for the log-cost table; empty skips it")
	appendDur := fl.Duration("append-duration", 3*time.Second, "measuring time per log-cost row")
	profileDir := fl.String("profile", "", "write CPU profiles of each snapshot, restore and standby bootstrap of the snapshot table to this folder (snapshot-N.pprof, restore-N.pprof, standby-N.pprof)")
	if err := parseArgs(fl, args); err != nil {
		return err
	}
	sizes, err := intList(*objects)
	if err != nil {
		return fmt.Errorf("%w: --objects: %v", errUsage, err)
	}
	cl, err := intList(*clients)
	if err != nil {
		return fmt.Errorf("%w: --clients: %v", errUsage, err)
	}
	snaps, err := intList(*snapObjects)
	if err != nil {
		return fmt.Errorf("%w: --snapshot-objects: %v", errUsage, err)
	}
	acl, err := intList(*appendClients)
	if err != nil {
		return fmt.Errorf("%w: --append-clients: %v", errUsage, err)
	}
	if *keys < 1 || *dur <= 0 || *appendDur <= 0 || *promoteObjects < 0 {
		return fmt.Errorf("%w: --read-keys, --duration and --append-duration must be positive, --promote-objects not negative", errUsage)
	}
	if err := masterbench.Run(ctx, stdout, masterbench.Options{RemountSizes: sizes, ReadClients: cl, ReadKeys: *keys, ReadDuration: *dur}); err != nil {
		return err
	}
	if len(snaps) == 0 && *promoteObjects == 0 && len(acl) == 0 {
		return nil
	}
	work, err := os.MkdirTemp("", "shardfence-bench-master-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	o := masterbench.HAOptions{Dir: work, SnapshotSizes: snaps, PromoteObjects: *promoteObjects, AppendClients: acl, AppendDuration: *appendDur, ProfileDir: *profileDir}
	if *storeURL == "" {
		c, err := fsstore.Open(filepath.Join(work, "store"))
		if err != nil {
			return err
		}
		defer c.Close()
		o.Store, o.Where = c, "fs (local disk)"
	} else {
		c, err := blobstore.Open(ctx, *storeURL)
		if err != nil {
			return fmt.Errorf("bench master: open %s: %w", blobstore.Redact(*storeURL), err)
		}
		defer c.Close()
		o.Store, o.Where = c, blobstore.Redact(*storeURL)
	}
	return masterbench.RunHA(ctx, stdout, o)
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a non-negative count", f)
		}
		out = append(out, n)
	}
	return out, nil
}
