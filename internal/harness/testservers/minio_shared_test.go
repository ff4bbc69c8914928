package testservers_test

import (
	"context"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	_ "github.com/shardfence/shardfence/blobstore/drivers"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// A MinIO started without a test serves its bucket through a minio:// URL,
// and its CPU time is read from /proc while it runs.
func TestStartMinIOShared(t *testing.T) {
	srv, proc, err := testservers.StartMinIOShared(t.TempDir())
	if err != nil {
		testservers.Unavailable(t, "minio", err)
	}
	defer proc.Stop()
	ctx := context.Background()
	c, err := blobstore.Open(ctx, srv.MinioURL("shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if obj, err := c.Get(ctx, "k"); err != nil || string(obj.Body) != "v" {
		t.Fatalf("get: %q, %v", obj.Body, err)
	}
	if proc.CPU() <= 0 {
		t.Fatalf("MinIO's CPU time reads %v after it started and served requests", proc.CPU())
	}
}
