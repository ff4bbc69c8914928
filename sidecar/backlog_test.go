package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
)

// The backlog's bookkeeping: a checkpoint drops what it covers, marks stay
// bounded, and a request waits before it is sent again.
func TestBacklogAccounting(t *testing.T) {
	var b backlog
	for g := int64(1); g <= 3000; g++ {
		b.acked(g, g*100)
	}
	if len(b.marks) > maxBacklogMarks {
		t.Fatalf("%d marks, more than %d", len(b.marks), maxBacklogMarks)
	}
	if bytes, gens := b.size(3000); bytes != 300000 || gens != 3000 {
		t.Fatalf("backlog %d bytes, %d gens", bytes, gens)
	}
	b.checkpointed(2000, time.Now())
	bytes, gens := b.size(3000)
	if gens != 1000 || bytes < 100000 || bytes > 101000 {
		t.Fatalf("after a checkpoint at 2000: %d bytes, %d gens (want about 100000 and 1000)", bytes, gens)
	}
	p := CheckpointPolicy{EveryBytes: 50000, Every: -1}.normalized()
	now := time.Now()
	why, ok := b.due(p, 3000, now)
	if !ok || !strings.Contains(why, "checkpoint-every-bytes") {
		t.Fatalf("not due at %d bytes over a 50000 policy: %q", bytes, why)
	}
	b.reqGen, b.reqAt = 3000, now
	if _, ok := b.due(p, 3000, now.Add(time.Second)); ok {
		t.Fatal("asked again at once")
	}
	if _, ok := b.due(p, 3000, now.Add(p.reaskAfter())); !ok {
		t.Fatal("not asked again after the re-ask interval")
	}
	b.checkpointed(3000, now)
	if _, gens := b.size(3000); gens != 0 || b.reqGen != 0 {
		t.Fatalf("a checkpoint covering the request left %d gens, request %d", gens, b.reqGen)
	}
	if _, ok := b.due(p, 3000, now.Add(time.Hour)); ok {
		t.Fatal("asked for a checkpoint with nothing written since")
	}
	age := CheckpointPolicy{EveryBytes: -1, Every: time.Minute}.normalized()
	b.acked(3001, b.bytes+1)
	if why, ok := b.due(age, 3001, now.Add(2*time.Minute)); !ok || !strings.Contains(why, "checkpoint-every") {
		t.Fatalf("not due by age: %q", why)
	}
}

// A sidecar asks its primary for a checkpoint through Watch once the
// backlog passes the policy, shows the backlog in status and /readyz, and
// runs GC after the checkpoint the primary publishes.
func TestSidecarAsksForACheckpointAndCollectsAfterIt(t *testing.T) {
	store := mem.New()
	srv, c := serveOn(t, store, Options{Checkpoint: CheckpointPolicy{EveryBytes: 4096, Every: -1, WarnBytes: 8192}})
	openShard(t, c, "s", 1, "a")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	requests := make(chan WatchEvent, 16)
	go func() {
		_ = srv.Watch(ctx, []string{"s"}, func(ev WatchEvent) error {
			if ev.Kind == WatchCheckpointRequested {
				requests <- ev
			}
			return nil
		})
	}()
	op := strings.Repeat("x", 1000)
	for range 10 {
		if _, err := appendOps(t.Context(), c, "s", op); err != nil {
			t.Fatal(err)
		}
	}
	st, err := srv.Status("s")
	if err != nil || st.ReplayBacklogBytes < 10000 || st.ReplayBacklogGens != 10 {
		t.Fatalf("backlog in status: %d bytes %d gens, %v", st.ReplayBacklogBytes, st.ReplayBacklogGens, err)
	}
	if rd, _ := srv.Readiness(""); !rd.Ready || len(rd.Warnings) != 1 {
		t.Fatalf("readiness past the warning bound: %+v", rd)
	}
	var ev WatchEvent
	select {
	case ev = <-requests:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint request came")
	}
	if ev.CheckpointGen != 10 || ev.BacklogBytes < 10000 || ev.Term != 1 {
		t.Fatalf("checkpoint request %+v", ev)
	}
	if _, err := srv.PublishCheckpoint(t.Context(), "s", ev.CheckpointGen, []FileChunk{{Name: "state", Data: []byte("10 ops"), Last: true}}); err != nil {
		t.Fatal(err)
	}
	st, _ = srv.Status("s")
	if st.ReplayBacklogGens != 0 || st.ReplayBacklogBytes != 0 || st.CheckpointGen != 10 || st.CheckpointRequestedGen != 0 {
		t.Fatalf("after the checkpoint: %+v", st)
	}
	// GC after the checkpoint removes the translog it covers (retention
	// 0 keeps none below it).
	sub, _ := blobstore.Sub(store, "s")
	deadline := time.Now().Add(10 * time.Second)
	for {
		items, err := blobstore.ListAll(t.Context(), sub, layout.TranslogDir)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) < 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GC after the checkpoint left %d translog objects", len(items))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rd, _ := srv.Readiness(""); len(rd.Warnings) != 0 {
		t.Fatalf("warnings after the checkpoint: %v", rd.Warnings)
	}
}

// A long-running shard whose primary answers the checkpoint requests keeps
// its replay backlog bounded while the log grows far past it, and the
// next term's takeover replays only the backlog, not the shard's history.
// The test looks at the policy after every append (as the ticker does once
// a second) and, like a primary that keeps up, answers a request before it
// appends more: the bound it checks is the policy's, not the machine's
// speed.
func TestAnsweredRequestsKeepTheBacklogBounded(t *testing.T) {
	store := mem.New()
	const every = 32 << 10
	srv, c := serveOn(t, store, Options{Checkpoint: CheckpointPolicy{EveryBytes: every, Every: -1}})
	openShard(t, c, "s", 1, "a")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	published := make(chan int64, 100)
	go func() {
		_ = srv.Watch(ctx, []string{"s"}, func(ev WatchEvent) error {
			if ev.Kind == WatchCheckpointRequested {
				go func() {
					if _, err := srv.PublishCheckpoint(ctx, "s", ev.CheckpointGen, []FileChunk{{Name: "state", Data: []byte("state"), Last: true}}); err == nil {
						published <- ev.CheckpointGen
					}
				}()
			}
			return nil
		})
	}()
	op := strings.Repeat("x", 512)
	const batch = 4 * 512
	var total, maxBacklog int64
	for total < 24*every {
		if _, err := appendOps(t.Context(), c, "s", op, op, op, op); err != nil {
			t.Fatal(err)
		}
		total += batch
		st, _ := srv.Status("s")
		maxBacklog = max(maxBacklog, st.ReplayBacklogBytes)
		srv.checkpointTick(time.Now())
		waitAnswered(t, srv, "s")
	}
	if len(published) < 3 {
		t.Fatalf("only %d checkpoints published for %d bytes appended over a %d-byte policy", len(published), total, every)
	}
	if maxBacklog > every+2*batch {
		t.Fatalf("backlog reached %d bytes of %d appended (policy %d): not bounded by the checkpoints", maxBacklog, total, every)
	}
	// The next term replays only the backlog.
	_, b := serveOn(t, store, Options{})
	st, err := b.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 2, AllocationId: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	var replayed int64
	for st.Receive() {
		for _, o := range st.Msg().GetOps().GetOps() {
			replayed += int64(len(o))
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if replayed > total/4 {
		t.Fatalf("the takeover replayed %d bytes of %d appended: the checkpoints did not bound it", replayed, total)
	}
	t.Logf("%d bytes appended, %d checkpoints, backlog at most %d bytes, takeover replayed %d bytes", total, len(published), maxBacklog, replayed)
}

// waitAnswered waits until the shard has no checkpoint request pending.
func waitAnswered(t *testing.T, srv *Server, shard string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := srv.Status(shard)
		if err != nil {
			t.Fatal(err)
		}
		if st.CheckpointRequestedGen == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint request for gen %d was not answered", st.CheckpointRequestedGen)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
