package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
)

// sidecarOn serves the production opener on store, as a separate sidecar
// process would.
func sidecarOn(t *testing.T, store *blobstore.Container) sidecarv1connect.SidecarServiceClient {
	t.Helper()
	_, c := serveOn(t, store, Options{})
	return c
}

// serveOn is sidecarOn with options, returning the server too.
func serveOn(t *testing.T, store *blobstore.Container, opts Options) (*Server, sidecarv1connect.SidecarServiceClient) {
	t.Helper()
	srv, err := New(t.Context(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler(HandlerOptions{}))
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		hs.Close()
	})
	return srv, sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, hs.URL)
}

// A successor opens the shard while the incumbent's clients keep
// appending: the incumbent is fenced with the successor's term, and every
// op it acknowledged is in the successor's lineage.
func TestSuccessorFencesIncumbentAndKeepsEveryAck(t *testing.T) {
	store := mem.New()
	a, b := sidecarOn(t, store), sidecarOn(t, store)
	openShard(t, a, "s", 1, "alloc-a")

	var mu sync.Mutex
	acked := map[string]bool{}
	fencedBy := map[int64]int{}
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				op := fmt.Sprintf("a-%d-%d", g, i)
				_, err := appendOps(t.Context(), a, "s", op)
				if err != nil {
					code, d := detailOf(t, err)
					mu.Lock()
					defer mu.Unlock()
					if code != connect.CodeFailedPrecondition || d.GetReason() != "fenced" {
						t.Errorf("incumbent append: %v", err)
					}
					fencedBy[d.GetSuccessorTerm()]++
					return
				}
				mu.Lock()
				acked[op] = true
				if len(acked) >= 100 {
					once.Do(func() { close(started) })
				}
				mu.Unlock()
			}
		})
	}
	<-started
	opened, steps := openShardSteps(t, b, "s", 2, "alloc-b")
	wg.Wait()
	if rp := opened.GetRestorePoint(); rp.GetTerm() != 1 || rp.GetGen() < 1 {
		t.Errorf("restore point %v", rp)
	}
	if len(steps) == 0 || steps[0] != "claim" || steps[len(steps)-1] != "open" {
		t.Errorf("open progress %v", steps)
	}
	if fencedBy[2] != 8 {
		t.Errorf("incumbent clients fenced by %v, want all 8 by term 2", fencedBy)
	}
	if _, err := appendOps(t.Context(), b, "s", "b-0"); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, b, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, op := range got {
		if read[op] {
			t.Errorf("op %s read twice", op)
		}
		read[op] = true
	}
	for op := range acked {
		if !read[op] {
			t.Errorf("acked op %s missing from the successor's lineage", op)
		}
	}
	if got[len(got)-1] != "b-0" {
		t.Errorf("last op read %q, want the successor's b-0", got[len(got)-1])
	}
	st, err := a.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Msg.GetStatus(); !s.GetFenced() || s.GetSuccessorTerm() != 2 {
		t.Errorf("incumbent status %v", s)
	}

	// A third term on a fresh sidecar replays the two terms' ops in its
	// Open stream, in sequence order.
	c := sidecarOn(t, store)
	stream, err := c.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 3, AllocationId: "alloc-c"}))
	if err != nil {
		t.Fatal(err)
	}
	var replayed []string
	for stream.Receive() {
		if ops := stream.Msg().GetOps(); ops != nil {
			for _, op := range ops.GetOps() {
				replayed = append(replayed, string(op))
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(replayed) != fmt.Sprint(got) {
		t.Errorf("term 3 replayed %d ops, term 2 read %d; they differ", len(replayed), len(got))
	}
}
