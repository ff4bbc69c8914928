package sidecar

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
)

func barrier(ctx context.Context, c sidecarv1connect.SidecarServiceClient, shard string) (*sidecarv1.BarrierResponse, error) {
	res, err := c.Barrier(ctx, connect.NewRequest(&sidecarv1.BarrierRequest{Shard: shard}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// fenceReads counts the fence key reads (GETs under fence/) that reach the
// store through view.
func fenceReads(view *faulty.Container) *atomic.Int64 {
	var n atomic.Int64
	view.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpGet && containsDir(r.Key, layout.FenceDir) {
			n.Add(1)
		}
		return nil
	}})
	return &n
}

func containsDir(key, dir string) bool {
	for i := 0; i+len(dir) <= len(key); i++ {
		if key[i:i+len(dir)] == dir {
			return true
		}
	}
	return false
}

// A barrier proves the term with one fence key read, and concurrent
// barriers share reads: 64 at once cost a few reads, not 64. Each answers
// with the log as acknowledged when it was called.
func TestBarrierReadsTheFenceKeyOnceForConcurrentCallers(t *testing.T) {
	store := mem.New()
	view := faulty.New(store, 1)
	srv, c := serveOn(t, view.Container, Options{})
	openShard(t, c, "s", 1, "alloc-a")
	ack, err := appendOps(t.Context(), c, "s", "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	// A read takes a while, as on a real store: barriers called while one
	// is on its way wait for the next, and share it.
	view.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpGet), Prefix: "s/" + layout.FenceDir, Latency: faulty.Fixed(20 * time.Millisecond)})
	reads := fenceReads(view)
	var wg sync.WaitGroup
	const n = 64
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			r, err := barrier(t.Context(), c, "s")
			switch {
			case err != nil:
				errs <- err
			case r.GetTerm() != 1 || r.GetNextSeqNo() < ack.GetFirstSeqNo()+ack.GetCount() || r.GetLocal():
				errs <- errors.New("barrier answered " + r.String())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := reads.Load()
	if got < 1 || got > n/4 {
		t.Fatalf("%d concurrent barriers sent %d fence key reads, want between 1 and %d", n, got, n/4)
	}
	if v := testutil.ToFloat64(srv.metrics.barrierReads); v != float64(got) {
		t.Fatalf("barrier reads metric %v, store saw %d", v, got)
	}
	t.Logf("%d concurrent barriers: %d fence key reads", n, got)
}

// A zombie's barrier: after a successor opened the shard at term 2, the
// old sidecar's barrier fails fenced (it must serve no read), and the
// shard reports fenced. Its state would still have answered a read.
func TestBarrierFailsOnceASuccessorTookTheShard(t *testing.T) {
	store := mem.New()
	_, a := serveOn(t, store, Options{})
	_, b := serveOn(t, store, Options{})
	openShard(t, a, "s", 1, "alloc-a")
	if _, err := appendOps(t.Context(), a, "s", "before"); err != nil {
		t.Fatal(err)
	}
	if _, err := barrier(t.Context(), a, "s"); err != nil {
		t.Fatalf("the owner's barrier: %v", err)
	}
	openShard(t, b, "s", 2, "alloc-b")
	if _, err := appendOps(t.Context(), b, "s", "after"); err != nil {
		t.Fatal(err)
	}
	// Without a barrier the zombie would answer from its state: it still
	// says open at term 1.
	if st, err := a.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"})); err != nil || st.Msg.GetStatus().GetState() != "open" {
		t.Fatalf("the zombie before its barrier: %v %v", st, err)
	}
	_, err := barrier(t.Context(), a, "s")
	code, d := detailOf(t, err)
	if code != connect.CodeFailedPrecondition || d.GetReason() != "fenced" || d.GetSuccessorTerm() != 2 {
		t.Fatalf("the zombie's barrier: %v (want fenced by term 2)", err)
	}
	st, err := a.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	if err != nil || !st.Msg.GetStatus().GetFenced() {
		t.Fatalf("the zombie after its barrier: %v %v", st, err)
	}
	if _, err := appendOps(t.Context(), a, "s", "zombie"); err == nil {
		t.Fatal("the zombie acknowledged an append after its barrier found it fenced")
	}
	if r, err := barrier(t.Context(), b, "s"); err != nil || r.GetTerm() != 2 {
		t.Fatalf("the successor's barrier: %v %v", r, err)
	}
}

// Lease mode answers inside the lease with no store request; once the
// lease ran out on an idle shard, a barrier reads the key.
func TestBarrierInLeaseModeIsLocalInsideTheLease(t *testing.T) {
	store := mem.New()
	view := faulty.New(store, 1)
	_, c := serveOn(t, view.Container, Options{})
	const lease = 400 * time.Millisecond
	if err := openWith(t, c, &sidecarv1.OpenRequest{Shard: "s", Term: 1, AllocationId: "a",
		Settings: &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, LeaseIntervalMs: lease.Milliseconds()}}); err != nil {
		t.Fatal(err)
	}
	reads := fenceReads(view)
	if _, err := appendOps(t.Context(), c, "s", "x"); err != nil {
		t.Fatal(err)
	}
	local := 0
	for range 20 {
		r, err := barrier(t.Context(), c, "s")
		if err != nil {
			t.Fatal(err)
		}
		if r.GetLocal() {
			local++
		}
	}
	if local == 0 {
		t.Fatal("no barrier was answered inside the lease")
	}
	if got := reads.Load(); got > int64(20-local) {
		t.Fatalf("%d local barriers still read the key %d times", local, got)
	}
	time.Sleep(lease + 100*time.Millisecond)
	r, err := barrier(t.Context(), c, "s")
	if err != nil || r.GetLocal() {
		t.Fatalf("a barrier after the lease ran out: %v %v (want a key read)", r, err)
	}
	if reads.Load() == 0 {
		t.Fatal("the barrier after the lease sent no read")
	}
}

// Observe mode: the barrier reads the key without fencing the writer. A
// successor part-way through its claim (its key created, the old one
// deleted, nothing sealed yet) makes the barrier fail while appends go on,
// as observe mode promises.
func TestBarrierInObserveModeDoesNotStopTheWriter(t *testing.T) {
	store := mem.New()
	_, a := serveOn(t, store, Options{})
	if err := openWith(t, a, &sidecarv1.OpenRequest{Shard: "s", Term: 1, AllocationId: "a",
		Settings: &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_OBSERVE}}); err != nil {
		t.Fatal(err)
	}
	if _, err := barrier(t.Context(), a, "s"); err != nil {
		t.Fatal(err)
	}
	sub, err := blobstore.Sub(store, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Delete(t.Context(), layout.FenceKey(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := barrier(t.Context(), a, "s"); err == nil {
		t.Fatal("the observe-mode barrier succeeded with its fence key gone")
	}
	if _, err := appendOps(t.Context(), a, "s", "still"); err != nil {
		t.Fatalf("observe mode stopped writing after a failed barrier: %v", err)
	}
}

// No term, no barrier: an unfenced shard refuses it.
func TestBarrierRefusesAnUnfencedShard(t *testing.T) {
	_, c := serveOn(t, mem.New(), Options{AllowUnfenced: true})
	if err := openWith(t, c, &sidecarv1.OpenRequest{Shard: "s", Term: 1, AllocationId: "a", Settings: &sidecarv1.ShardSettings{FencingDisabled: true}}); err != nil {
		t.Fatal(err)
	}
	_, err := barrier(t.Context(), c, "s")
	if code, d := detailOf(t, err); code != connect.CodeInvalidArgument || d.GetReason() != "invalid_argument" {
		t.Fatalf("barrier on an unfenced shard: %v", err)
	}
	if _, err := barrier(t.Context(), c, "nope"); err == nil {
		t.Fatal("barrier on a shard not open here")
	}
}
