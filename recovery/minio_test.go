package recovery_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	_ "github.com/shardfence/shardfence/blobstore/minio"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// TestScenariosMinIO runs the scenario table against a real MinIO server
// (one server, one prefix per scenario).
func TestScenariosMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MinIO server")
	}
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	for i, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			c, err := blobstore.Open(context.Background(), srv.MinioURL(fmt.Sprintf("recovery-%d", i)))
			if err != nil {
				t.Fatalf("open MinIO: %v", err)
			}
			t.Cleanup(func() { _ = c.Close() })
			sc.run(t, faulty.New(c, 1))
		})
	}
}
