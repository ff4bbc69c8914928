package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// A client that knows only the master (client.Router) appends to three
// shards on MinIO through two automatic failovers and a drain, with no
// polling loop of its own, and reads every acknowledged op back once.
func TestRouterThroughFailoversAndADrainMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	f := testFleet(t, "router", time.Second, time.Second, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	placement := map[string]string{"r1": "n1", "r2": "n2", "r3": "n3"}
	for s, n := range placement {
		if err := f.assign(ctx, s, n, false); err != nil {
			t.Fatal(err)
		}
	}
	r, err := client.NewRouter(strings.Split(f.masterList(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	acked := map[string][]string{}
	unknown := 0
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for s := range placement {
		wg.Go(func() {
			for i := 0; wctx.Err() == nil; i++ {
				op := fmt.Sprintf("%s-%d", s, i)
				actx, c := context.WithTimeout(wctx, 20*time.Second)
				_, err := r.Append(actx, s, []byte(op))
				c()
				mu.Lock()
				switch {
				case err == nil:
					acked[s] = append(acked[s], op)
				case client.IsOutcomeUnknown(err):
					unknown++
				case wctx.Err() == nil:
					t.Errorf("append %s through the router: %v", op, err)
				}
				mu.Unlock()
			}
		})
	}
	count := func(s string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked[s])
	}
	grow := func(what string) {
		t.Helper()
		before := map[string]int{}
		for s := range placement {
			before[s] = count(s)
		}
		err := pollUntil(ctx, what, func() (bool, error) {
			for s := range placement {
				if count(s) < before[s]+20 {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	grow("appends on every shard")
	f.sidecar("n1").kill()
	grow("appends after n1 died")
	if _, err := f.startSidecar("n1"); err != nil {
		t.Fatal(err)
	}
	f.sidecar("n2").kill()
	grow("appends after n2 died")
	fc, err := f.fleetClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.DrainNode(ctx, connect.NewRequest(&masterv1.DrainNodeRequest{Node: "n3"})); err != nil {
		t.Fatal(err)
	}
	if err := pollUntil(ctx, "n3 drained", func() (bool, error) {
		rows, err := f.shards(ctx)
		if err != nil {
			return false, nil
		}
		for _, row := range rows {
			if row.GetAssignment().GetNode() == "n3" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	grow("appends after n3 drained")
	stop()
	wg.Wait()
	total := 0
	for s := range placement {
		seen := map[string]int{}
		if err := r.Read(ctx, s, 0, 0, func(b client.Batch) error {
			for _, op := range b.Ops {
				seen[string(op)]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, op := range acked[s] {
			if seen[op] != 1 {
				t.Fatalf("shard %s: acknowledged op %s read back %d times", s, op, seen[op])
			}
		}
		total += len(acked[s])
	}
	t.Logf("%d ops acknowledged through the router across two failovers and a drain (%d of unknown outcome), each read back once", total, unknown)
}

// A zombie primary's reads: its sidecar frozen (SIGSTOP) past the client
// TTLs while a successor takes the shard and acknowledges more, then
// resumed. Without a barrier it still answers a read from its own state,
// which misses the successor's ops (the stale read the barrier exists
// for); its barrier fails fenced, so a primary that barriers first serves
// no stale read.
func TestZombieReadNeedsTheBarrierMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	f := testFleet(t, "zread", time.Second, time.Second, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := f.assign(ctx, "z", "n1", false); err != nil {
		t.Fatal(err)
	}
	row, err := f.openOn(ctx, "z", "")
	if err != nil {
		t.Fatal(err)
	}
	zombie := sidecarv1connect.NewSidecarServiceClient(f.http, row.GetAddr())
	if _, err := zombie.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte("before")}})); err != nil {
		t.Fatal(err)
	}
	n1 := f.sidecar("n1")
	if err := n1.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	moved, err := f.openOn(ctx, "z", "n1")
	if err != nil {
		t.Fatal(err)
	}
	successor := sidecarv1connect.NewSidecarServiceClient(f.http, moved.GetAddr())
	if _, err := successor.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte("after")}})); err != nil {
		t.Fatal(err)
	}
	if err := n1.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The stale read: the zombie's own lineage, without "after".
	var ops []string
	st, err := zombie.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: "z"}))
	if err == nil {
		for st.Receive() {
			for _, op := range st.Msg().GetBatch().GetOps() {
				ops = append(ops, string(op))
			}
		}
		err = st.Err()
		st.Close()
	}
	if err == nil && strings.Contains(strings.Join(ops, ","), "after") {
		t.Fatalf("the zombie's read holds the successor's op (%v): the test lost its teeth", ops)
	}
	t.Logf("without a barrier the resumed zombie answered a read: %v (err %v)", ops, err)
	// With the barrier: refused, fenced.
	_, berr := zombie.Barrier(ctx, connect.NewRequest(&sidecarv1.BarrierRequest{Shard: "z"}))
	if berr == nil {
		t.Fatal("the zombie's barrier succeeded after a successor acknowledged a write")
	}
	if reason := sidecarproc.ReasonOf(berr); reason != "fenced" && reason != "not_open" {
		t.Fatalf("the zombie's barrier failed with %v, want fenced (or the shard already closed)", berr)
	}
	if _, err := successor.Barrier(ctx, connect.NewRequest(&sidecarv1.BarrierRequest{Shard: "z"})); err != nil {
		t.Fatalf("the owner's barrier: %v", err)
	}
}
