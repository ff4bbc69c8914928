package minio

import (
	"errors"
	"fmt"
	"testing"

	minio "github.com/minio/minio-go/v7"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

// The client returns minio.ErrorResponse values; the driver must read the
// status and code through any wrapping and give the s3 driver's answers.
func TestClientErrorsMap(t *testing.T) {
	b := &bucket{bucket: "bkt", name: "minio://h/bkt"}
	cases := []struct {
		name string
		op   driver.Op
		er   minio.ErrorResponse
		want error
	}{
		{"create on an existing key", driver.OpCreateIfAbsent, minio.ErrorResponse{StatusCode: 412, Code: "PreconditionFailed"}, blobstore.ErrAlreadyExists},
		{"stale CAS", driver.OpCompareAndSwap, minio.ErrorResponse{StatusCode: 412, Code: "PreconditionFailed"}, blobstore.ErrPreconditionFailed},
		{"CAS on a missing key", driver.OpCompareAndSwap, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}, blobstore.ErrPreconditionFailed},
		{"409 conflict", driver.OpCompareAndSwap, minio.ErrorResponse{StatusCode: 409, Code: "ConditionalRequestConflict"}, blobstore.ErrConflict},
		{"missing object", driver.OpGet, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}, blobstore.ErrNotFound},
		{"missing bucket", driver.OpGet, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchBucket"}, s3compat.ErrNoBucket},
		{"server error on create", driver.OpCreateIfAbsent, minio.ErrorResponse{StatusCode: 500, Code: "InternalError"}, blobstore.ErrAmbiguous},
		{"range of a replaced pinned version", driver.OpGetRange, minio.ErrorResponse{StatusCode: 412, Code: "PreconditionFailed"}, blobstore.ErrPreconditionFailed},
		{"range of a missing object", driver.OpGetRange, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}, blobstore.ErrNotFound},
		{"range past the end", driver.OpGetRange, minio.ErrorResponse{StatusCode: 416, Code: "InvalidRange"}, blobstore.ErrInvalidRange},
		{"server error on a range", driver.OpGetRange, minio.ErrorResponse{StatusCode: 500, Code: "InternalError"}, blobstore.ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{tc.er, fmt.Errorf("put: %w", tc.er)} {
				got := b.Classify(tc.op, err)
				if !errors.Is(got, tc.want) {
					t.Errorf("Classify(%v) = %v; want errors.Is %v", err, got, tc.want)
				}
			}
		})
	}
}
