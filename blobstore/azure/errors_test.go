package azure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/shardfence/shardfence/blobstore"
)

func TestMapError(t *testing.T) {
	svc := func(status int, code string) error {
		// The SDK returns these wrapped by its pipeline.
		return fmt.Errorf("pipeline: %w", &azcore.ResponseError{StatusCode: status, ErrorCode: code})
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

	for _, tc := range []struct {
		op   string
		err  error
		want error // nil: none of the sentinels below
	}{
		{"CreateIfAbsent", svc(409, "BlobAlreadyExists"), blobstore.ErrAlreadyExists},
		{"CreateIfAbsent", svc(412, "ConditionNotMet"), blobstore.ErrAlreadyExists},
		{"CompareAndSwap", svc(412, "ConditionNotMet"), blobstore.ErrPreconditionFailed},
		{"DeleteIfMatch", svc(412, "ConditionNotMet"), blobstore.ErrPreconditionFailed},
		{"CompareAndSwap", svc(404, "BlobNotFound"), blobstore.ErrPreconditionFailed},
		{"DeleteIfMatch", svc(404, "BlobNotFound"), blobstore.ErrPreconditionFailed},
		{"Get", svc(404, "BlobNotFound"), blobstore.ErrNotFound},
		{"Stat", svc(404, ""), blobstore.ErrNotFound}, // HEAD answers carry no body
		// A lease or an archived blob refuses definitely, but not because
		// the token moved: no precondition failure, no conflict.
		{"CompareAndSwap", svc(412, "LeaseIdMissing"), nil},
		{"CompareAndSwap", svc(409, "LeaseIdMissing"), nil},
		{"Put", svc(409, "BlobArchived"), nil},
		{"CompareAndSwap", svc(409, "BlobAlreadyExists"), nil},
		{"Put", svc(404, "ContainerNotFound"), nil},
		{"Get", svc(404, "ContainerNotFound"), nil},
		{"CreateIfAbsent", svc(413, "RequestBodyTooLarge"), blobstore.ErrTooLarge},
		{"Put", svc(400, "InvalidResourceName"), blobstore.ErrInvalidKey},
		{"Put", svc(400, "InvalidHeaderValue"), nil},
		{"Get", svc(403, "AuthenticationFailed"), nil},
		{"CreateIfAbsent", svc(503, "ServerBusy"), blobstore.ErrAmbiguous},
		{"CompareAndSwap", svc(500, "OperationTimedOut"), blobstore.ErrAmbiguous},
		{"DeleteIfMatch", svc(500, "InternalError"), blobstore.ErrAmbiguous},
		{"Delete", svc(408, ""), blobstore.ErrAmbiguous},
		{"Get", svc(503, "ServerBusy"), blobstore.ErrUnavailable},
		{"List", svc(500, "InternalError"), blobstore.ErrUnavailable},
		{"Put", svc(429, ""), blobstore.ErrUnavailable},
		{"CreateIfAbsent", dial, blobstore.ErrUnavailable},
		{"Get", dial, blobstore.ErrUnavailable},
		{"CompareAndSwap", reset, blobstore.ErrAmbiguous},
		{"Stat", reset, blobstore.ErrUnavailable},
		{"CreateIfAbsent", errors.New("unrecognised"), blobstore.ErrAmbiguous},
		{"Put", context.DeadlineExceeded, blobstore.ErrAmbiguous},
		{"List", context.Canceled, nil},
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
			blobstore.ErrConflict, blobstore.ErrUnavailable, blobstore.ErrAmbiguous, blobstore.ErrTooLarge, blobstore.ErrInvalidKey} {
			if is := errors.Is(got, s); is != (s == tc.want) {
				t.Errorf("%s %s -> %v: errors.Is(%v) = %v", tc.op, describe(tc.err), got, s, is)
			}
		}
	}
	if mapError("Get", nil) != nil {
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
	got := mapError("CompareAndSwap", &azcore.ResponseError{StatusCode: 412, ErrorCode: "ConditionNotMet"}).Error()
	if want := "precondition failed: Azure answered HTTP 412 ConditionNotMet"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}
