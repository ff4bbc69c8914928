package sidecar

import (
	"context"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/translog"
)

// An unfenced shard (benchmarks) opens through the production recovery
// path, takes appends and reads them back.
func TestUnfencedShardOpensThroughRecovery(t *testing.T) {
	srv, err := New(t.Context(), mem.New(), Options{AllowUnfenced: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	if _, err := srv.Open(t.Context(), "u", 1, "alloc-a", Settings{FencingDisabled: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Append(t.Context(), "u", [][]byte{[]byte("x"), []byte("y")}, 1); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = srv.Read(t.Context(), "u", 0, 0, func(b translog.Batch) error {
		for _, op := range b.Ops {
			got = append(got, string(op))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Fatalf("read back %q, want [x y]", got)
	}
}
