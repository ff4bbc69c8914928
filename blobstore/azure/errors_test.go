package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

func TestMapError(t *testing.T) {
	svc := func(status int, code string) error {
		// The SDK returns these wrapped by its pipeline.
		return fmt.Errorf("pipeline: %w", &azcore.ResponseError{StatusCode: status, ErrorCode: code})
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

	for _, tc := range []struct {
		op   driver.Op
		err  error
		want error // nil: none of the sentinels below
	}{
		{driver.OpCreateIfAbsent, svc(409, "BlobAlreadyExists"), blobstore.ErrAlreadyExists},
		{driver.OpCreateIfAbsent, svc(412, "ConditionNotMet"), blobstore.ErrAlreadyExists},
		{driver.OpCompareAndSwap, svc(412, "ConditionNotMet"), blobstore.ErrPreconditionFailed},
		{driver.OpDeleteIfMatch, svc(412, "ConditionNotMet"), blobstore.ErrPreconditionFailed},
		{driver.OpCompareAndSwap, svc(404, "BlobNotFound"), blobstore.ErrPreconditionFailed},
		{driver.OpDeleteIfMatch, svc(404, "BlobNotFound"), blobstore.ErrPreconditionFailed},
		{driver.OpGet, svc(404, "BlobNotFound"), blobstore.ErrNotFound},
		{driver.OpStat, svc(404, ""), blobstore.ErrNotFound}, // HEAD answers carry no body
		// A lease or an archived blob refuses definitely, but not because
		// the token moved: no precondition failure, no conflict.
		{driver.OpCompareAndSwap, svc(412, "LeaseIdMissing"), nil},
		{driver.OpCompareAndSwap, svc(409, "LeaseIdMissing"), nil},
		{driver.OpPut, svc(409, "BlobArchived"), nil},
		{driver.OpCompareAndSwap, svc(409, "BlobAlreadyExists"), nil},
		{driver.OpPut, svc(404, "ContainerNotFound"), nil},
		{driver.OpGet, svc(404, "ContainerNotFound"), nil},
		{driver.OpCreateIfAbsent, svc(413, "RequestBodyTooLarge"), blobstore.ErrTooLarge},
		{driver.OpPut, svc(400, "InvalidResourceName"), blobstore.ErrInvalidKey},
		{driver.OpPut, svc(400, "InvalidHeaderValue"), nil},
		{driver.OpGet, svc(403, "AuthenticationFailed"), nil},
		{driver.OpCreateIfAbsent, svc(503, "ServerBusy"), blobstore.ErrAmbiguous},
		{driver.OpCompareAndSwap, svc(500, "OperationTimedOut"), blobstore.ErrAmbiguous},
		{driver.OpDeleteIfMatch, svc(500, "InternalError"), blobstore.ErrAmbiguous},
		{driver.OpDelete, svc(408, ""), blobstore.ErrAmbiguous},
		{driver.OpGet, svc(503, "ServerBusy"), blobstore.ErrUnavailable},
		{driver.OpList, svc(500, "InternalError"), blobstore.ErrUnavailable},
		{driver.OpPut, svc(429, ""), blobstore.ErrUnavailable},
		{driver.OpCreateIfAbsent, dial, blobstore.ErrUnavailable},
		{driver.OpGet, dial, blobstore.ErrUnavailable},
		{driver.OpCompareAndSwap, reset, blobstore.ErrAmbiguous},
		{driver.OpStat, reset, blobstore.ErrUnavailable},
		{driver.OpCreateIfAbsent, errors.New("unrecognised"), blobstore.ErrAmbiguous},
		{driver.OpPut, context.DeadlineExceeded, blobstore.ErrAmbiguous},
		{driver.OpList, context.Canceled, nil},
		// A ranged read is a read, plus its own answers.
		{driver.OpGetRange, svc(416, "InvalidRange"), blobstore.ErrInvalidRange},
		{driver.OpGetRange, svc(412, "ConditionNotMet"), blobstore.ErrPreconditionFailed},
		{driver.OpGetRange, svc(412, "LeaseIdMissing"), nil},
		{driver.OpGetRange, svc(404, "BlobNotFound"), blobstore.ErrNotFound},
		{driver.OpGetRange, svc(503, "ServerBusy"), blobstore.ErrUnavailable},
		{driver.OpGetRange, reset, blobstore.ErrUnavailable},
		{driver.OpGetRange, io.ErrUnexpectedEOF, blobstore.ErrUnavailable},
		{driver.OpGetRange, context.Canceled, nil},
	} {
		got := mapError(tc.op, tc.err)
		var re, gotRE *azcore.ResponseError
		if errors.As(tc.err, &re) {
			if !errors.As(got, &gotRE) || gotRE != re {
				t.Errorf("%s %s: result lost the SDK's ResponseError", tc.op, describe(tc.err))
			}
		} else if !errors.Is(got, tc.err) {
			t.Errorf("%s %v: result lost the original error", tc.op, tc.err)
		}
		for _, s := range []error{blobstore.ErrAlreadyExists, blobstore.ErrPreconditionFailed, blobstore.ErrNotFound,
			blobstore.ErrConflict, blobstore.ErrUnavailable, blobstore.ErrAmbiguous, blobstore.ErrTooLarge, blobstore.ErrInvalidKey, blobstore.ErrInvalidRange} {
			if is := errors.Is(got, s); is != (s == tc.want) {
				t.Errorf("%s %s -> %v: errors.Is(%v) = %v", tc.op, describe(tc.err), got, s, is)
			}
		}
	}
	if mapError(driver.OpGet, nil) != nil {
		t.Error("mapError(nil) is not nil")
	}
}

// describe names an error for a failure message without calling the SDK's
// Error, which dumps a whole HTTP response.
func describe(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("HTTP %d %s", re.StatusCode, re.ErrorCode)
	}
	return err.Error()
}

// The mapped message is one line naming status and code, not the SDK's
// multi-line response dump.
func TestServiceErrorMessage(t *testing.T) {
	got := mapError(driver.OpCompareAndSwap, &azcore.ResponseError{StatusCode: 412, ErrorCode: "ConditionNotMet"}).Error()
	if want := "precondition failed: Azure answered HTTP 412 ConditionNotMet"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}
