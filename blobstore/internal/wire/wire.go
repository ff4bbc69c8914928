// Package wire holds what the gcs and azure drivers share about the HTTP
// under their SDKs: a store URL's endpoint option, and how to place an
// error that carries no answer from the store or an answer that says the
// store did not, or may not, have processed the request. Whether such a
// failure is harmless or leaves the outcome open depends only on whether
// the call writes, so both drivers must decide it the same way. (The S3
// drivers share theirs through s3compat.)
package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

// NoAnswer places an error of op that carries no answer from the store. A
// request never sent (a refused dial) is ErrUnavailable. A write the
// caller gave up on (its context ended) or that broke off on the wire (a
// reset connection, a truncated response, an error the driver does not
// recognise) may have reached the store: ErrAmbiguous. A read's context
// error is returned as it is, and its transport errors are ErrUnavailable;
// anything else is returned as it is.
func NoAnswer(op driver.Op, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if op.Mutates() {
			return blobstore.Ambiguous(err)
		}
		return err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return blobstore.Unavailable(err)
	}
	if op.Mutates() {
		return blobstore.Ambiguous(err)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return blobstore.Unavailable(err)
	}
	return err
}

// Overloaded places an answer of status to op that says the store did not
// or may not have processed the request, or returns nil for any other
// status. 429 refuses before processing: ErrUnavailable. 408 and every 5xx
// are ErrAmbiguous for a write and ErrUnavailable for a read: some 5xx
// (503 ServerBusy) are documented as "not processed", but the cost of
// taking a write that was applied for one that was not is a lost
// acknowledged write.
func Overloaded(op driver.Op, status int, err error) error {
	switch {
	case status == http.StatusTooManyRequests:
		return blobstore.Unavailable(err)
	case status == http.StatusRequestTimeout || status >= 500:
		if op.Mutates() {
			return blobstore.Ambiguous(err)
		}
		return blobstore.Unavailable(err)
	}
	return nil
}

// Endpoint reads a store URL's endpoint option: an http or https URL with
// a host and no user info. Its error does not repeat the value, which may
// carry credentials.
func Endpoint(v string) (*url.URL, error) {
	ep, err := url.Parse(v)
	if err != nil || (ep.Scheme != "http" && ep.Scheme != "https") || ep.Host == "" || ep.User != nil {
		return nil, errors.New("endpoint is not an http(s) URL without user info")
	}
	return ep, nil
}
