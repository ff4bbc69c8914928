package blobstore

import (
	"context"
	"errors"
	"fmt"
)

// Definite outcomes: the store answered and the operation did not take effect.
var (
	// ErrNotFound: no object at the key.
	ErrNotFound = errors.New("object not found")
	// ErrAlreadyExists: CreateIfAbsent found an object at the key.
	ErrAlreadyExists = errors.New("object already exists")
	// ErrPreconditionFailed: the stored token differs from the expected one,
	// or the key is missing.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrInvalidKey: the key breaks the rules of ValidateKey (or a driver's
	// own limits); nothing was sent to the store.
	ErrInvalidKey = errors.New("invalid key")
	// ErrPreconditionsNotEnforced: the store accepted a write it should have
	// refused; fenced writes must not run on it.
	ErrPreconditionsNotEnforced = errors.New("store does not enforce preconditions")
	// ErrUnsupported: the driver does not offer the operation (for example
	// DeleteIfMatch without ConditionalDelete).
	ErrUnsupported = errors.New("operation not supported by this store")
	// ErrTooLarge: the body exceeds what one request of this store takes.
	ErrTooLarge = errors.New("body too large")
	// ErrInvalidRange: a ranged read starts past the object's end, or its
	// offset or length is negative (length -1 aside, which reads to the
	// end).
	ErrInvalidRange = errors.New("invalid range")
)

// Retryable outcomes.
var (
	// ErrConflict: a concurrent conditional write on the same key (S3's 409
	// ConditionalRequestConflict). The operation did not take effect; retry.
	ErrConflict = errors.New("conflicting concurrent request, retry")
	// ErrUnavailable: the request failed before it could take effect
	// (connection refused, throttled before processing). Retry.
	ErrUnavailable = errors.New("store unavailable")
	// ErrAmbiguous: the request may or may not have taken effect (timeout,
	// 5xx, lost response). A caller settles it by reading the key and
	// comparing content identity, never by assuming either outcome.
	ErrAmbiguous = errors.New("outcome unknown")
)

// OpError wraps every error a Container returns with the operation, store
// and key, so a message says what failed where.
type OpError struct {
	Op    Op
	Store string // the container's String()
	Key   string // relative to the container; for List, the prefix
	Err   error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("blobstore %s %s %q: %v", e.Op, e.Store, e.Key, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// Wrap returns err wrapped in an OpError, or nil for a nil err. An error that
// is already an OpError is returned unchanged.
func Wrap(op Op, store, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return err
	}
	return &OpError{Op: op, Store: store, Key: key, Err: err}
}

// hasKind reports whether err is already in one of the error classes a
// driver's Classify places errors in.
func hasKind(err error) bool {
	return IsDefinite(err) || errors.Is(err, ErrPreconditionsNotEnforced) ||
		errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAmbiguous)
}

// Ambiguous marks cause as an outcome that may or may not have taken effect.
// errors.Is matches both ErrAmbiguous and cause.
func Ambiguous(cause error) error {
	if errors.Is(cause, ErrAmbiguous) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrAmbiguous, cause)
}

// Unavailable marks cause as a definite failure before any effect.
func Unavailable(cause error) error {
	if errors.Is(cause, ErrUnavailable) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// IsAmbiguous reports whether err leaves the outcome of a write unknown.
// A cancelled or expired context while a request was in flight is ambiguous
// too: the store may have applied it.
func IsAmbiguous(err error) bool {
	return errors.Is(err, ErrAmbiguous)
}

// IsRetryable reports whether the same request may be sent again: a conflict,
// an unavailable store, or an ambiguous outcome (after settling it). A
// definite answer (not found, exists, precondition failed, invalid key) and a
// cancelled context are not retryable.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAmbiguous)
}

// IsDefinite reports whether err is a definite answer from the store about
// the object (the operation surely did not take effect for that reason).
func IsDefinite(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrAlreadyExists) ||
		errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrInvalidRange)
}
