package sidecarapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/sidecar"
)

// A real sidecar over an in-memory store: an open drains to its opened
// event and counts the replayed ops; an open below the shard's term is
// refused with the sidecar's reason.
func TestOpenAndReason(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	client := func(name string) sidecarv1connect.SidecarServiceClient {
		srv, err := sidecar.New(ctx, store, sidecar.Options{Node: name, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler(sidecar.HandlerOptions{}))
		t.Cleanup(func() { hs.Close(); _ = srv.Shutdown(ctx) })
		return sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, hs.URL)
	}
	a, b := client("A"), client("B")
	opened, replayed, err := OpenShard(ctx, a, "s", 1, "alloc-a")
	if err != nil || opened == nil || replayed != 0 {
		t.Fatalf("first open: %v, %d replayed, %v", opened, replayed, err)
	}
	for i := range 3 {
		if _, err := a.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "s", Ops: [][]byte{fmt.Appendf(nil, "op-%d", i)}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, replayed, err := Open(ctx, b, &sidecarv1.OpenRequest{Shard: "s", Term: 2, AllocationId: "alloc-b"}); err != nil || replayed != 3 {
		t.Fatalf("open at term 2: %d replayed, %v; want 3", replayed, err)
	}
	_, err = a.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "s", Ops: [][]byte{[]byte("late")}}))
	if Reason(err) != "fenced" || ErrorDetail(err).GetSuccessorTerm() != 2 {
		t.Errorf("append on the fenced term: %v (reason %q, successor %d), want fenced by term 2", err, Reason(err), ErrorDetail(err).GetSuccessorTerm())
	}
	if r := Reason(fmt.Errorf("wrapped: %w", err)); r != "fenced" {
		t.Errorf("reason through a wrap %q, want fenced", r)
	}
	if ErrorDetail(errors.New("plain")) != nil || Reason(nil) != "" {
		t.Error("a reason from an error without a detail")
	}
}
