package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/shardfence/shardfence/master/masterbench"
)

const benchMasterSummary = "master: remount recovery-lease assignment, heap per object, GetReplicaList ops/s"

func runBenchMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench master", stderr)
	objects := fs.String("objects", "1000000,10000000", "comma-separated object counts for the remount table (10M needs about 4 GB of memory)")
	clients := fs.String("clients", "1,16", "comma-separated client counts for the GetReplicaList table; empty skips it")
	keys := fs.Int("read-keys", 100000, "objects the GetReplicaList table reads from")
	dur := fs.Duration("duration", 2*time.Second, "measuring time per GetReplicaList row")
	if err := parseArgs(fs, args); err != nil {
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
	if *keys < 1 || *dur <= 0 {
		return fmt.Errorf("%w: --read-keys and --duration must be positive", errUsage)
	}
	return masterbench.Run(ctx, stdout, masterbench.Options{RemountSizes: sizes, ReadClients: cl, ReadKeys: *keys, ReadDuration: *dur})
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
