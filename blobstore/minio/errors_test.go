package minio

import (
	"errors"
	"fmt"
	"testing"

	minio "github.com/minio/minio-go/v7"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

// The client returns minio.ErrorResponse values; the driver must read the
// status and code through any wrapping and give the s3 driver's answers.
func TestClientErrorsMap(t *testing.T) {
	c := &Container{bucket: "bkt", name: "minio://h/bkt/"}
	cases := []struct {
		name string
		kind s3compat.Op
		er   minio.ErrorResponse
		want error
	}{
		{"create on an existing key", s3compat.Create, minio.ErrorResponse{StatusCode: 412, Code: "PreconditionFailed"}, blobstore.ErrAlreadyExists},
		{"stale CAS", s3compat.CAS, minio.ErrorResponse{StatusCode: 412, Code: "PreconditionFailed"}, blobstore.ErrPreconditionFailed},
		{"CAS on a missing key", s3compat.CAS, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}, blobstore.ErrPreconditionFailed},
		{"409 conflict", s3compat.CAS, minio.ErrorResponse{StatusCode: 409, Code: "ConditionalRequestConflict"}, blobstore.ErrConflict},
		{"missing object", s3compat.Read, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}, blobstore.ErrNotFound},
		{"missing bucket", s3compat.Read, minio.ErrorResponse{StatusCode: 404, Code: "NoSuchBucket"}, s3compat.ErrNoBucket},
		{"server error on create", s3compat.Create, minio.ErrorResponse{StatusCode: 500, Code: "InternalError"}, blobstore.ErrAmbiguous},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{tc.er, fmt.Errorf("put: %w", tc.er)} {
				got := c.fail("Op", "k", tc.kind, err)
				if !errors.Is(got, tc.want) {
					t.Errorf("fail(%v) = %v; want errors.Is %v", err, got, tc.want)
				}
				var oe *blobstore.OpError
				if !errors.As(got, &oe) || oe.Key != "k" || oe.Store != c.name {
					t.Errorf("fail(%v) = %v; want an OpError naming store and key", err, got)
				}
			}
		})
	}
}
