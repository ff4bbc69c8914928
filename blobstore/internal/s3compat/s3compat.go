// Package s3compat holds what the s3 and minio drivers share: the meaning of
// an S3 answer for each kind of operation, and the ETag token form. Both
// drivers speak the same protocol to the same stores, so they must turn the
// same answer into the same typed error and the same token.
package s3compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

// ErrNoBucket is returned when the bucket does not exist: a configuration
// error, neither a missing object nor something a retry fixes.
var ErrNoBucket = errors.New("bucket does not exist")

// ErrAccessDenied is returned for 401 and 403 answers: wrong or missing
// credentials, or a policy that forbids the request.
var ErrAccessDenied = errors.New("access denied")

// Answer is what an S3 store said about a failed request. Status 0 and an
// empty Code mean no answer arrived (a transport error).
type Answer struct {
	Status  int
	Code    string
	Message string
}

// statusClientClosedRequest is MinIO's (and nginx's) 499: the client
// closed the connection before the answer.
const statusClientClosedRequest = 499

// Map turns a failed request into the blobstore's typed errors. op says
// what the request was, which decides what its error means: a 412 is
// "already exists" for a create and "precondition failed" for a CAS, and a
// timeout is harmless for a read but ambiguous for a write. cause is the
// SDK's error, kept in the chain for detail; credentialHint says where this
// driver reads credentials from, for the access-denied message.
//
// The rules: 412 is ErrAlreadyExists for a create and ErrPreconditionFailed
// otherwise; 404 is ErrPreconditionFailed for If-Match requests and
// ErrNotFound for the rest; 409 ConditionalRequestConflict is the retryable
// ErrConflict, while other 409 codes (a file-backed store's name clash) are
// definite refusals; 416 (InvalidRange: a ranged GET starting past the
// end) is ErrInvalidRange; 429 and a read's SlowDown are ErrUnavailable; a 5xx,
// and MinIO's 499 for a client that stopped reading, is ErrAmbiguous for a
// write (the store may have applied it) and ErrUnavailable for a read;
// other 4xx are definite refusals.
func Map(op driver.Op, bucket, credentialHint string, a Answer, cause error) error {
	if a.Status == 0 && a.Code == "" {
		return mapTransport(op, cause)
	}
	detail := fmt.Sprintf("S3 answered %d %s", a.Status, a.Code)
	if a.Message != "" {
		detail += ": " + a.Message
	}
	switch {
	case a.Code == "NoSuchBucket":
		return fmt.Errorf("%w: bucket %q (create it, or fix the bucket in the store URL; %s)", ErrNoBucket, bucket, detail)
	case a.Status == http.StatusPreconditionFailed || a.Code == "PreconditionFailed":
		if op == driver.OpCreateIfAbsent {
			return fmt.Errorf("%w (%s)", blobstore.ErrAlreadyExists, detail)
		}
		return fmt.Errorf("%w (%s)", blobstore.ErrPreconditionFailed, detail)
	case a.Status == http.StatusNotFound:
		if op == driver.OpCompareAndSwap || op == driver.OpDeleteIfMatch {
			// If-Match on a missing key: the expected version is gone.
			return fmt.Errorf("%w: object is missing (%s)", blobstore.ErrPreconditionFailed, detail)
		}
		return fmt.Errorf("%w (%s)", blobstore.ErrNotFound, detail)
	case a.Code == "ConditionalRequestConflict" || a.Code == "OperationAborted" || (a.Status == http.StatusConflict && a.Code == ""):
		return fmt.Errorf("%w (%s)", blobstore.ErrConflict, detail)
	case a.Code == "ExistingObjectIsDirectory" || a.Code == "ObjectParentIsFile" || a.Code == "XMinioParentIsObject" || a.Code == "XMinioObjectExistsAsDirectory":
		// A file-backed store cannot hold both "a" and "a/b".
		return fmt.Errorf("store refused the key: on this store a name cannot be both an object and a prefix of other keys (%s)", detail)
	case a.Status == http.StatusNotImplemented:
		return fmt.Errorf("%w: the store does not implement this request, likely its conditional headers (%s)", blobstore.ErrUnsupported, detail)
	case a.Status == http.StatusRequestedRangeNotSatisfiable || a.Code == "InvalidRange":
		return fmt.Errorf("%w (%s)", blobstore.ErrInvalidRange, detail)
	case a.Code == "KeyTooLongError":
		return fmt.Errorf("%w (%s)", blobstore.ErrInvalidKey, detail)
	case a.Code == "EntityTooLarge":
		return fmt.Errorf("%w (%s)", blobstore.ErrTooLarge, detail)
	case a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden:
		return fmt.Errorf("%w: check the credentials (%s) and the bucket policy (%s)", ErrAccessDenied, credentialHint, detail)
	case a.Status == http.StatusTooManyRequests || (a.Code == "SlowDown" && !op.Mutates()):
		// Throttled before any processing.
		return fmt.Errorf("%w: throttled (%s)", blobstore.ErrUnavailable, detail)
	case a.Code == "RequestTimeout":
		// S3's 400 RequestTimeout: the body never fully arrived, so the
		// object was not written.
		return fmt.Errorf("%w (%s)", blobstore.ErrUnavailable, detail)
	case a.Status >= 500 || a.Status == statusClientClosedRequest:
		// 499: the server gave up on a request whose client stopped
		// reading (a paused or stalled process); it may have applied a
		// write first, like a 5xx.
		if op.Mutates() {
			return blobstore.Ambiguous(fmt.Errorf("%s: %w", detail, cause))
		}
		return fmt.Errorf("%w (%s)", blobstore.ErrUnavailable, detail)
	}
	// Any other 4xx: the store refused the request; nothing changed.
	return fmt.Errorf("store refused the request (%s)", detail)
}

// mapTransport handles errors without a store answer.
func mapTransport(op driver.Op, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		// Never connected, so nothing was sent.
		return blobstore.Unavailable(err)
	}
	if op.Mutates() {
		// The request may have reached the store; a cancelled or expired
		// context included.
		return blobstore.Ambiguous(err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return blobstore.Unavailable(err)
}

// Token normalises an ETag to its quoted form, so tokens from PUT, GET, HEAD
// and LIST, and from either driver, compare equal however the store or the
// SDK spells them.
func Token(etag string) blobstore.Token {
	if etag == "" {
		return ""
	}
	if !strings.HasPrefix(etag, `"`) && !strings.HasPrefix(etag, `W/"`) {
		etag = `"` + etag + `"`
	}
	return blobstore.Token(etag)
}

// MaxSinglePut is the largest object S3 accepts in one PUT (5 GiB). A
// conditional write above it would need a multipart upload, which neither
// driver uses for conditional writes.
const MaxSinglePut = 5 << 30

// CheckKey checks the store key (container prefix included) against S3's
// 1024-byte limit.
func CheckKey(full string) error {
	if len(full) > blobstore.MaxKeyLen {
		return fmt.Errorf("%w: with the container prefix the key is %d bytes; S3 allows %d", blobstore.ErrInvalidKey, len(full), blobstore.MaxKeyLen)
	}
	return nil
}
