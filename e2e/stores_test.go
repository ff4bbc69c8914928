package e2e

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	_ "github.com/shardfence/shardfence/blobstore/minio"
	_ "github.com/shardfence/shardfence/blobstore/s3"
	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/testservers"
)

// The blob contract on MinIO in a container, through both drivers that
// speak to it, as blobstore/minio and blobstore/s3 check it on the local
// binary: no known limits.
func TestMinIOContainerConformance(t *testing.T) {
	srv := startMinIO(t)
	var n atomic.Int64
	prefix := func() string { return fmt.Sprintf("t%d", n.Add(1)) }
	t.Run("minio-scheme", func(t *testing.T) {
		conformance.RunWithLimits(t, testservers.OpenStore(t, srv.MinioURL(prefix())), nil)
	})
	t.Run("s3-scheme", func(t *testing.T) {
		conformance.RunWithLimits(t, testservers.OpenStore(t, srv.S3URL(prefix())), nil)
	})
	t.Run("probe", func(t *testing.T) {
		if err := blobstore.ProbePreconditions(t.Context(), testservers.OpenStore(t, srv.MinioURL(prefix()))); err != nil {
			t.Fatalf("probe refused MinIO in a container: %v", err)
		}
	})
}

// The blob contract on versitygw in a container, with its conditional
// deletes on and the limits its tests on the local binary know.
func TestVersityGWContainerConformance(t *testing.T) {
	srv := startVersityGW(t)
	t.Run("s3-scheme", func(t *testing.T) {
		conformance.RunWithLimits(t, testservers.OpenStore(t, srv.S3URL("conformance", "conditional_delete=true")), testservers.VersityGWLimits())
	})
	t.Run("probe", func(t *testing.T) {
		if err := blobstore.ProbePreconditions(t.Context(), testservers.OpenStore(t, srv.S3URL("probe", "conditional_delete=true"))); err != nil {
			t.Fatalf("probe refused versitygw in a container: %v", err)
		}
	})
}
