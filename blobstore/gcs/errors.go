package gcs

import (
	"errors"
	"fmt"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/wire"
)

// mapError turns an error of the GCS client for op into the blobstore
// vocabulary. The result wraps the original error, so its text (status,
// reason) stays in the message.
func mapError(op driver.Op, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, storage.ErrBucketNotExist) {
		return fmt.Errorf("bucket does not exist or is not visible to these credentials; create it or fix the store URL: %w", err)
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		return mapStatus(op, gerr.Code, err)
	}
	if errors.Is(err, storage.ErrObjectNotExist) {
		return mapStatus(op, http.StatusNotFound, err)
	}
	return wire.NoAnswer(op, err)
}

// mapStatus maps an HTTP status the store answered with.
func mapStatus(op driver.Op, code int, err error) error {
	if e := wire.Overloaded(op, code, err); e != nil {
		return e
	}
	switch {
	case code == http.StatusPreconditionFailed:
		if op == driver.OpCreateIfAbsent {
			return fmt.Errorf("%w: %w", blobstore.ErrAlreadyExists, err)
		}
		return fmt.Errorf("%w: %w", blobstore.ErrPreconditionFailed, err)
	case code == http.StatusNotFound:
		switch op {
		case driver.OpCompareAndSwap, driver.OpDeleteIfMatch:
			// No object, so no object with the expected generation.
			return fmt.Errorf("%w: no object at the key: %w", blobstore.ErrPreconditionFailed, err)
		case driver.OpPut, driver.OpCreateIfAbsent:
			// A write that finds nothing is missing its bucket.
			return fmt.Errorf("bucket does not exist or is not visible to these credentials; create it or fix the store URL: %w", err)
		}
		return fmt.Errorf("%w: %w", blobstore.ErrNotFound, err)
	case code == http.StatusConflict:
		return fmt.Errorf("%w: %w", blobstore.ErrConflict, err)
	case code == http.StatusRequestedRangeNotSatisfiable:
		// A ranged read that starts at or past the end; the portable
		// layer tells the empty stream at the end from a start past it.
		return fmt.Errorf("%w: %w", blobstore.ErrInvalidRange, err)
	case code == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", blobstore.ErrTooLarge, err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("access denied; check the credentials (GOOGLE_APPLICATION_CREDENTIALS, application-default login) and the bucket's IAM permissions: %w", err)
	}
	return err
}
