package s3compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

func TestMap(t *testing.T) {
	sdkErr := errors.New("sdk error")
	cases := []struct {
		name string
		op   driver.Op
		a    Answer
		want error // the sentinel errors.Is must match
		not  []error
	}{
		{"create on existing key", driver.OpCreateIfAbsent, Answer{412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"}, blobstore.ErrAlreadyExists, []error{blobstore.ErrPreconditionFailed}},
		{"stale CAS", driver.OpCompareAndSwap, Answer{412, "PreconditionFailed", ""}, blobstore.ErrPreconditionFailed, []error{blobstore.ErrAlreadyExists}},
		{"CAS on missing key", driver.OpCompareAndSwap, Answer{404, "NoSuchKey", "The specified key does not exist."}, blobstore.ErrPreconditionFailed, []error{blobstore.ErrNotFound}},
		{"stale conditional delete", driver.OpDeleteIfMatch, Answer{412, "PreconditionFailed", ""}, blobstore.ErrPreconditionFailed, nil},
		{"conditional delete of missing key", driver.OpDeleteIfMatch, Answer{404, "NoSuchKey", ""}, blobstore.ErrPreconditionFailed, nil},
		{"get missing", driver.OpGet, Answer{404, "NoSuchKey", ""}, blobstore.ErrNotFound, nil},
		{"head missing (no code body)", driver.OpGet, Answer{404, "NotFound", ""}, blobstore.ErrNotFound, nil},
		{"missing bucket is not a missing object", driver.OpGet, Answer{404, "NoSuchBucket", ""}, ErrNoBucket, []error{blobstore.ErrNotFound, blobstore.ErrPreconditionFailed}},
		{"missing bucket on CAS", driver.OpCompareAndSwap, Answer{404, "NoSuchBucket", ""}, ErrNoBucket, []error{blobstore.ErrPreconditionFailed}},
		{"409 conditional conflict on CAS", driver.OpCompareAndSwap, Answer{409, "ConditionalRequestConflict", "A conflicting conditional operation is currently in progress"}, blobstore.ErrConflict, []error{blobstore.ErrPreconditionFailed, blobstore.ErrAlreadyExists, blobstore.ErrAmbiguous}},
		{"409 conditional conflict on create", driver.OpCreateIfAbsent, Answer{409, "ConditionalRequestConflict", ""}, blobstore.ErrConflict, []error{blobstore.ErrAlreadyExists}},
		{"503 on a conditional write is ambiguous", driver.OpCompareAndSwap, Answer{503, "ServiceUnavailable", ""}, blobstore.ErrAmbiguous, []error{blobstore.ErrPreconditionFailed, blobstore.ErrUnavailable}},
		{"500 on create is ambiguous", driver.OpCreateIfAbsent, Answer{500, "InternalError", ""}, blobstore.ErrAmbiguous, nil},
		{"503 SlowDown on a write is ambiguous", driver.OpPut, Answer{503, "SlowDown", ""}, blobstore.ErrAmbiguous, nil},
		{"503 SlowDown on a read is unavailable", driver.OpGet, Answer{503, "SlowDown", ""}, blobstore.ErrUnavailable, []error{blobstore.ErrAmbiguous}},
		{"429 is unavailable", driver.OpCompareAndSwap, Answer{429, "TooManyRequests", ""}, blobstore.ErrUnavailable, []error{blobstore.ErrAmbiguous}},
		{"500 on a read is unavailable", driver.OpGet, Answer{500, "InternalError", ""}, blobstore.ErrUnavailable, nil},
		{"499 (client closed the request) on a CAS is ambiguous", driver.OpCompareAndSwap, Answer{499, "", "499 status code 499"}, blobstore.ErrAmbiguous, []error{blobstore.ErrPreconditionFailed}},
		{"499 on a read is unavailable", driver.OpGet, Answer{499, "", ""}, blobstore.ErrUnavailable, []error{blobstore.ErrAmbiguous}},
		{"S3 RequestTimeout never wrote", driver.OpCreateIfAbsent, Answer{400, "RequestTimeout", ""}, blobstore.ErrUnavailable, []error{blobstore.ErrAmbiguous}},
		{"403 access denied", driver.OpGet, Answer{403, "AccessDenied", "Access Denied."}, ErrAccessDenied, []error{blobstore.ErrUnavailable}},
		{"403 bad signature on write", driver.OpCompareAndSwap, Answer{403, "SignatureDoesNotMatch", ""}, ErrAccessDenied, []error{blobstore.ErrAmbiguous}},
		{"501 conditional header not implemented", driver.OpCreateIfAbsent, Answer{501, "NotImplemented", "A header you provided implies functionality that is not implemented"}, blobstore.ErrUnsupported, nil},
		{"key too long", driver.OpPut, Answer{400, "KeyTooLongError", ""}, blobstore.ErrInvalidKey, nil},
		{"entity too large", driver.OpCompareAndSwap, Answer{400, "EntityTooLarge", ""}, blobstore.ErrTooLarge, nil},
		{"stale pinned range", driver.OpGetRange, Answer{412, "PreconditionFailed", ""}, blobstore.ErrPreconditionFailed, []error{blobstore.ErrAlreadyExists, blobstore.ErrNotFound}},
		{"pinned range of a missing key", driver.OpGetRange, Answer{404, "NoSuchKey", ""}, blobstore.ErrNotFound, []error{blobstore.ErrPreconditionFailed}},
		{"range past the end", driver.OpGetRange, Answer{416, "InvalidRange", "The requested range is not satisfiable"}, blobstore.ErrInvalidRange, nil},
		{"range past the end (HEAD-like, no code)", driver.OpGetRange, Answer{416, "", ""}, blobstore.ErrInvalidRange, nil},
		{"500 on a range is unavailable", driver.OpGetRange, Answer{500, "InternalError", ""}, blobstore.ErrUnavailable, []error{blobstore.ErrAmbiguous}},
		{"SlowDown on a range is unavailable", driver.OpGetRange, Answer{503, "SlowDown", ""}, blobstore.ErrUnavailable, []error{blobstore.ErrAmbiguous}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Map(tc.op, "bkt", "the hint", tc.a, sdkErr)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Map(%v, %+v) = %v; want errors.Is %v", tc.op, tc.a, err, tc.want)
			}
			for _, n := range tc.not {
				if errors.Is(err, n) {
					t.Errorf("Map(%v, %+v) = %v; must not match %v", tc.op, tc.a, err, n)
				}
			}
			if tc.a.Code != "" && !strings.Contains(err.Error(), tc.a.Code) {
				t.Errorf("message %q does not name the store's code %s", err, tc.a.Code)
			}
		})
	}
}

// A definite refusal must not be retryable and an ambiguous write must be,
// or a caller would loop on bad credentials or give up on a settled write.
func TestMapRetryClasses(t *testing.T) {
	cause := errors.New("x")
	if err := Map(driver.OpGet, "b", "h", Answer{403, "AccessDenied", ""}, cause); blobstore.IsRetryable(err) {
		t.Errorf("403 is retryable: %v", err)
	}
	if err := Map(driver.OpGet, "b", "h", Answer{404, "NoSuchBucket", ""}, cause); blobstore.IsRetryable(err) || blobstore.IsDefinite(err) {
		t.Errorf("NoSuchBucket is retryable or a definite object answer: %v", err)
	}
	if err := Map(driver.OpGet, "b", "h", Answer{400, "InvalidArgument", ""}, cause); blobstore.IsRetryable(err) {
		t.Errorf("400 InvalidArgument is retryable: %v", err)
	}
	if err := Map(driver.OpCompareAndSwap, "b", "h", Answer{409, "ConditionalRequestConflict", ""}, cause); !blobstore.IsRetryable(err) || blobstore.IsDefinite(err) {
		t.Errorf("409 is not retryable or is definite: %v", err)
	}
	// A file-backed store's name clash is answered 409 too, but retrying
	// it can never succeed.
	if err := Map(driver.OpPut, "b", "h", Answer{409, "ExistingObjectIsDirectory", "Existing Object is a directory."}, cause); blobstore.IsRetryable(err) || errors.Is(err, blobstore.ErrConflict) {
		t.Errorf("409 ExistingObjectIsDirectory is a retryable conflict: %v", err)
	}
	if err := Map(driver.OpCompareAndSwap, "b", "h", Answer{503, "", ""}, cause); !blobstore.IsAmbiguous(err) || !errors.Is(err, cause) {
		t.Errorf("503 on CAS is not ambiguous or lost its cause: %v", err)
	}
	if err := Map(driver.OpGet, "b", "h", Answer{403, "AccessDenied", ""}, cause); !strings.Contains(err.Error(), "h") {
		t.Errorf("access denied does not carry the credential hint: %v", err)
	}
}

func TestMapTransport(t *testing.T) {
	dial := fmt.Errorf("send request: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	reset := fmt.Errorf("send request: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	cases := []struct {
		name string
		op   driver.Op
		err  error
		want error
		not  error
	}{
		{"refused connection never sent a write", driver.OpCompareAndSwap, dial, blobstore.ErrUnavailable, blobstore.ErrAmbiguous},
		{"reset after sending a write", driver.OpCompareAndSwap, reset, blobstore.ErrAmbiguous, blobstore.ErrUnavailable},
		{"reset on an unconditional write", driver.OpPut, reset, blobstore.ErrAmbiguous, nil},
		{"reset on a read", driver.OpGet, reset, blobstore.ErrUnavailable, blobstore.ErrAmbiguous},
		{"deadline during a create", driver.OpCreateIfAbsent, fmt.Errorf("op: %w", context.DeadlineExceeded), blobstore.ErrAmbiguous, nil},
		{"cancel during a read", driver.OpGet, fmt.Errorf("op: %w", context.Canceled), context.Canceled, blobstore.ErrUnavailable},
		{"reset during a range", driver.OpGetRange, reset, blobstore.ErrUnavailable, blobstore.ErrAmbiguous},
		{"deadline during a range", driver.OpGetRange, fmt.Errorf("op: %w", context.DeadlineExceeded), context.DeadlineExceeded, blobstore.ErrAmbiguous},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Map(tc.op, "b", "h", Answer{}, tc.err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v; want errors.Is %v", err, tc.want)
			}
			if tc.not != nil && errors.Is(err, tc.not) {
				t.Errorf("got %v; must not match %v", err, tc.not)
			}
		})
	}
}

func TestToken(t *testing.T) {
	for in, want := range map[string]blobstore.Token{
		"":                                   "",
		"d41d8cd98f00b204e9800998ecf8427e":   `"d41d8cd98f00b204e9800998ecf8427e"`,
		`"d41d8cd98f00b204e9800998ecf8427e"`: `"d41d8cd98f00b204e9800998ecf8427e"`,
		`W/"abc"`:                            `W/"abc"`,
	} {
		if got := Token(in); got != want {
			t.Errorf("Token(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestCheckKey(t *testing.T) {
	if err := CheckKey(strings.Repeat("k", blobstore.MaxKeyLen)); err != nil {
		t.Errorf("a %d-byte key was refused: %v", blobstore.MaxKeyLen, err)
	}
	if err := CheckKey(strings.Repeat("k", blobstore.MaxKeyLen+1)); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Errorf("a %d-byte key: %v; want ErrInvalidKey", blobstore.MaxKeyLen+1, err)
	}
}
