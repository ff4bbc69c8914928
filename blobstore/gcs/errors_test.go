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
	"github.com/shardfence/shardfence/blobstore/driver"
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
		op   driver.Op
		err  error
		want error // nil: none of the sentinels below
	}{
		{driver.OpCreateIfAbsent, api(412), blobstore.ErrAlreadyExists},
		{driver.OpCompareAndSwap, api(412), blobstore.ErrPreconditionFailed},
		{driver.OpDeleteIfMatch, api(412), blobstore.ErrPreconditionFailed},
		{driver.OpCompareAndSwap, api(404), blobstore.ErrPreconditionFailed},
		{driver.OpDeleteIfMatch, objectGone, blobstore.ErrPreconditionFailed},
		{driver.OpGet, objectGone, blobstore.ErrNotFound},
		{driver.OpStat, storage.ErrObjectNotExist, blobstore.ErrNotFound},
		{driver.OpPut, api(404), nil}, // a missing bucket, not a missing object
		{driver.OpCreateIfAbsent, api(404), nil},
		{driver.OpGet, storage.ErrBucketNotExist, nil},
		{driver.OpCompareAndSwap, api(409), blobstore.ErrConflict},
		{driver.OpPut, api(429), blobstore.ErrUnavailable},
		{driver.OpGet, api(429), blobstore.ErrUnavailable},
		{driver.OpCreateIfAbsent, api(413), blobstore.ErrTooLarge},
		{driver.OpCreateIfAbsent, api(503), blobstore.ErrAmbiguous},
		{driver.OpCompareAndSwap, api(500), blobstore.ErrAmbiguous},
		{driver.OpDelete, api(502), blobstore.ErrAmbiguous},
		{driver.OpDeleteIfMatch, api(408), blobstore.ErrAmbiguous},
		{driver.OpGet, api(503), blobstore.ErrUnavailable},
		{driver.OpList, api(500), blobstore.ErrUnavailable},
		{driver.OpGet, api(403), nil},
		{driver.OpPut, api(401), nil},
		{driver.OpCompareAndSwap, api(400), nil},
		{driver.OpCreateIfAbsent, dial, blobstore.ErrUnavailable},
		{driver.OpGet, dial, blobstore.ErrUnavailable},
		{driver.OpCreateIfAbsent, reset, blobstore.ErrAmbiguous},
		{driver.OpStat, reset, blobstore.ErrUnavailable},
		{driver.OpCompareAndSwap, errors.New("unrecognised"), blobstore.ErrAmbiguous},
		{driver.OpCompareAndSwap, context.DeadlineExceeded, blobstore.ErrAmbiguous},
		{driver.OpGet, context.Canceled, nil},
		{driver.OpGetRange, api(412), blobstore.ErrPreconditionFailed},
		{driver.OpGetRange, objectGone, blobstore.ErrNotFound},
		{driver.OpGetRange, api(416), blobstore.ErrInvalidRange},
		{driver.OpGetRange, api(503), blobstore.ErrUnavailable},
		{driver.OpGetRange, api(408), blobstore.ErrUnavailable},
		{driver.OpGetRange, reset, blobstore.ErrUnavailable},
		{driver.OpGetRange, context.Canceled, nil},
	} {
		got := mapError(tc.op, tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s %v: result %v lost the original error", tc.op, tc.err, got)
		}
		sentinels := []error{blobstore.ErrAlreadyExists, blobstore.ErrPreconditionFailed, blobstore.ErrNotFound,
			blobstore.ErrConflict, blobstore.ErrUnavailable, blobstore.ErrAmbiguous, blobstore.ErrTooLarge, blobstore.ErrInvalidRange}
		for _, s := range sentinels {
			if is := errors.Is(got, s); is != (s == tc.want) {
				t.Errorf("%s %v -> %v: errors.Is(%v) = %v", tc.op, tc.err, got, s, is)
			}
		}
	}
	if mapError(driver.OpGet, nil) != nil {
		t.Error("mapError(nil) is not nil")
	}
}

// A definite refusal must not be retryable; an ambiguous write must be, so
// that callers settle it and go on.
func TestMappedErrorClasses(t *testing.T) {
	pre := mapError(driver.OpCompareAndSwap, &googleapi.Error{Code: 412})
	if !blobstore.IsDefinite(pre) || blobstore.IsRetryable(pre) {
		t.Errorf("412 on CAS: definite %v retryable %v", blobstore.IsDefinite(pre), blobstore.IsRetryable(pre))
	}
	amb := mapError(driver.OpCreateIfAbsent, &googleapi.Error{Code: 503})
	if blobstore.IsDefinite(amb) || !blobstore.IsRetryable(amb) || !blobstore.IsAmbiguous(amb) {
		t.Errorf("503 on create: definite %v retryable %v ambiguous %v", blobstore.IsDefinite(amb), blobstore.IsRetryable(amb), blobstore.IsAmbiguous(amb))
	}
	// A cancelled caller is ambiguous about the write but not retried.
	cancelled := mapError(driver.OpPut, context.Canceled)
	if !blobstore.IsAmbiguous(cancelled) || blobstore.IsRetryable(cancelled) {
		t.Errorf("cancelled Put: ambiguous %v retryable %v", blobstore.IsAmbiguous(cancelled), blobstore.IsRetryable(cancelled))
	}
}
