package azure

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/wire"
)

// serviceError is a one-line form of the service's answer. The SDK's own
// message is a multi-line dump of the whole response; the original stays
// reachable with errors.As.
type serviceError struct {
	status int
	code   string
	err    *azcore.ResponseError
}

func (e *serviceError) Error() string {
	if e.code == "" {
		return fmt.Sprintf("Azure answered HTTP %d", e.status)
	}
	return fmt.Sprintf("Azure answered HTTP %d %s", e.status, e.code)
}

func (e *serviceError) Unwrap() error { return e.err }

// mapError turns an error of the Azure SDK for op into the blobstore
// vocabulary.
func mapError(op driver.Op, err error) error {
	if err == nil {
		return nil
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return mapStatus(op, re.StatusCode, re.ErrorCode, &serviceError{status: re.StatusCode, code: re.ErrorCode, err: re})
	}
	return wire.NoAnswer(op, err)
}

func mapStatus(op driver.Op, status int, code string, err error) error {
	if e := wire.Overloaded(op, status, err); e != nil {
		return e
	}
	switch {
	case code == "ContainerNotFound":
		return fmt.Errorf("container does not exist; create it or fix the store URL: %w", err)
	case status == http.StatusConflict && code == "BlobAlreadyExists",
		status == http.StatusPreconditionFailed && code == "ConditionNotMet" && op == driver.OpCreateIfAbsent:
		if op == driver.OpCreateIfAbsent {
			return fmt.Errorf("%w: %w", blobstore.ErrAlreadyExists, err)
		}
		return fmt.Errorf("unexpected answer to %s: %w", op, err)
	case status == http.StatusPreconditionFailed && code == "ConditionNotMet":
		return fmt.Errorf("%w: %w", blobstore.ErrPreconditionFailed, err)
	case status == http.StatusPreconditionFailed || status == http.StatusConflict:
		// Other refusals (a lease on the blob, an archived blob, ...) are
		// definite but say nothing about the token; reporting them as a
		// precondition failure would send a fencing caller after a
		// version change that never happened.
		return fmt.Errorf("the store refused the request for a reason other than its condition (is the blob leased or archived?): %w", err)
	case status == http.StatusNotFound:
		switch op {
		case driver.OpCompareAndSwap, driver.OpDeleteIfMatch:
			return fmt.Errorf("%w: no object at the key: %w", blobstore.ErrPreconditionFailed, err)
		case driver.OpDelete:
			// A delete of a missing blob succeeds; any other 404 (a
			// missing resource above the blob) must not pass for one.
			if code != "BlobNotFound" {
				return fmt.Errorf("the store answered a delete with a 404 that names no missing blob: %w", err)
			}
		}
		return fmt.Errorf("%w: %w", blobstore.ErrNotFound, err)
	case status == http.StatusRequestedRangeNotSatisfiable:
		// Only ranged reads send a range: one that starts past the end.
		return fmt.Errorf("%w: %w", blobstore.ErrInvalidRange, err)
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", blobstore.ErrTooLarge, err)
	case status == http.StatusBadRequest && (code == "InvalidResourceName" || code == "InvalidUri"):
		return fmt.Errorf("%w: the store refused the blob name: %w", blobstore.ErrInvalidKey, err)
	case status == http.StatusForbidden || status == http.StatusUnauthorized:
		return fmt.Errorf("access denied; check the account key, connection string or SAS token and its permissions: %w", err)
	}
	return err
}
