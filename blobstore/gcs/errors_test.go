package gcs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/shardfence/shardfence/blobstore"
)

func TestMapError(t *testing.T) {
	api := func(code int) error {
		// The client hands these back wrapped, the way run() and
		// formatObjectErr do.
		return fmt.Errorf("googleapi: %w", &googleapi.Error{Code: code, Message: "from the store"})
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	objectGone := fmt.Errorf("%w: %w", storage.ErrObjectNotExist, &googleapi.Error{Code: 404})

	for _, tc := range []struct {
		op   string
		err  error
		want error // nil: none of the sentinels below
	}{
		{"CreateIfAbsent", api(412), blobstore.ErrAlreadyExists},
		{"CompareAndSwap", api(412), blobstore.ErrPreconditionFailed},
		{"DeleteIfMatch", api(412), blobstore.ErrPreconditionFailed},
		{"CompareAndSwap", api(404), blobstore.ErrPreconditionFailed},
		{"DeleteIfMatch", objectGone, blobstore.ErrPreconditionFailed},
		{"Get", objectGone, blobstore.ErrNotFound},
		{"Stat", storage.ErrObjectNotExist, blobstore.ErrNotFound},
		{"Put", api(404), nil}, // a missing bucket, not a missing object
		{"CreateIfAbsent", api(404), nil},
		{"Get", storage.ErrBucketNotExist, nil},
		{"CompareAndSwap", api(409), blobstore.ErrConflict},
		{"Put", api(429), blobstore.ErrUnavailable},
		{"Get", api(429), blobstore.ErrUnavailable},
		{"CreateIfAbsent", api(413), blobstore.ErrTooLarge},
		{"CreateIfAbsent", api(503), blobstore.ErrAmbiguous},
		{"CompareAndSwap", api(500), blobstore.ErrAmbiguous},
		{"Delete", api(502), blobstore.ErrAmbiguous},
		{"DeleteIfMatch", api(408), blobstore.ErrAmbiguous},
		{"Get", api(503), blobstore.ErrUnavailable},
		{"List", api(500), blobstore.ErrUnavailable},
		{"Get", api(403), nil},
		{"Put", api(401), nil},
		{"CompareAndSwap", api(400), nil},
		{"CreateIfAbsent", dial, blobstore.ErrUnavailable},
		{"Get", dial, blobstore.ErrUnavailable},
		{"CreateIfAbsent", reset, blobstore.ErrAmbiguous},
		{"Stat", reset, blobstore.ErrUnavailable},
		{"CompareAndSwap", errors.New("unrecognised"), blobstore.ErrAmbiguous},
		{"CompareAndSwap", context.DeadlineExceeded, blobstore.ErrAmbiguous},
		{"Get", context.Canceled, nil},
	} {
		got := mapError(tc.op, tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s %v: result %v lost the original error", tc.op, tc.err, got)
		}
		sentinels := []error{blobstore.ErrAlreadyExists, blobstore.ErrPreconditionFailed, blobstore.ErrNotFound,
			blobstore.ErrConflict, blobstore.ErrUnavailable, blobstore.ErrAmbiguous, blobstore.ErrTooLarge}
		for _, s := range sentinels {
			if is := errors.Is(got, s); is != (s == tc.want) {
				t.Errorf("%s %v -> %v: errors.Is(%v) = %v", tc.op, tc.err, got, s, is)
			}
		}
	}
	if mapError("Get", nil) != nil {
		t.Error("mapError(nil) is not nil")
	}
}

// A definite refusal must not be retryable; an ambiguous write must be, so
// that callers settle it and go on.
func TestMappedErrorClasses(t *testing.T) {
	pre := mapError("CompareAndSwap", &googleapi.Error{Code: 412})
	if !blobstore.IsDefinite(pre) || blobstore.IsRetryable(pre) {
		t.Errorf("412 on CAS: definite %v retryable %v", blobstore.IsDefinite(pre), blobstore.IsRetryable(pre))
	}
	amb := mapError("CreateIfAbsent", &googleapi.Error{Code: 503})
	if blobstore.IsDefinite(amb) || !blobstore.IsRetryable(amb) || !blobstore.IsAmbiguous(amb) {
		t.Errorf("503 on create: definite %v retryable %v ambiguous %v", blobstore.IsDefinite(amb), blobstore.IsRetryable(amb), blobstore.IsAmbiguous(amb))
	}
	// A cancelled caller is ambiguous about the write but not retried.
	cancelled := mapError("Put", context.Canceled)
	if !blobstore.IsAmbiguous(cancelled) || blobstore.IsRetryable(cancelled) {
		t.Errorf("cancelled Put: ambiguous %v retryable %v", blobstore.IsAmbiguous(cancelled), blobstore.IsRetryable(cancelled))
	}
}
