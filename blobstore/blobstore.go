// Package blobstore is the object-store contract the fencing protocol stands
// on: versioned reads, create-if-absent and compare-and-swap over one bucket
// and prefix, with typed errors and capabilities a driver must earn by passing
// the conformance suite.
//
// Drivers live in sub-packages (fs, mem, s3, minio, gcs, azure) and register a
// URL scheme with Register; Open picks the driver by scheme. Import
// blobstore/drivers to register every driver at once.
package blobstore

import (
	"context"
	"fmt"
)

// Token is a store's opaque version of one object: an S3 or Azure ETag, a GCS
// generation, an fs counter. Tokens are compared only for equality and only
// against tokens of the same key and store. The empty token means "no
// version".
type Token string

// Object is one stored object with the version it was read at.
type Object struct {
	Key   string
	Body  []byte
	Token Token
}

// Attrs describe an object without its body.
type Attrs struct {
	Key   string
	Size  int64
	Token Token
}

// ListPage is one page of a List call, in lexicographic (byte) key order.
type ListPage struct {
	Items []Attrs
	// More reports whether keys after the last item may remain; pass the
	// last item's key as startAfter to read on.
	More bool
}

// Capabilities says which conditional operations a store enforces. A driver
// advertises a capability only where the conformance suite proves it against
// the real store.
type Capabilities struct {
	ConditionalCreate bool // CreateIfAbsent fails on an existing key
	ConditionalUpdate bool // CompareAndSwap fails on a stale or missing token
	ConditionalDelete bool // DeleteIfMatch fails on a stale token
	// MaxConditionalBody is the largest body a conditional write accepts in a
	// single request; 0 means no limit beyond the store's own.
	MaxConditionalBody int64
}

// Container is one bucket and prefix of an object store. Every key is
// relative to the container's prefix and must pass ValidateKey. Every method
// is safe for concurrent use.
type Container interface {
	// Get reads an object and the token of the version read.
	Get(ctx context.Context, key string) (Object, error)
	// Stat reads an object's size and token.
	Stat(ctx context.Context, key string) (Attrs, error)
	// Put writes unconditionally.
	Put(ctx context.Context, key string, body []byte) (Token, error)
	// CreateIfAbsent writes only if no object exists at key; otherwise it
	// fails with ErrAlreadyExists.
	CreateIfAbsent(ctx context.Context, key string, body []byte) (Token, error)
	// CompareAndSwap writes only if the stored token equals expected; a
	// different token or a missing key fails with ErrPreconditionFailed.
	CompareAndSwap(ctx context.Context, key string, expected Token, body []byte) (Token, error)
	// Delete removes an object; deleting a missing key succeeds.
	Delete(ctx context.Context, key string) error
	// DeleteIfMatch removes an object only if its token equals expected
	// (ErrPreconditionFailed otherwise). Drivers without ConditionalDelete
	// return ErrUnsupported.
	DeleteIfMatch(ctx context.Context, key string, expected Token) error
	// List returns up to limit objects whose keys start with prefix and sort
	// after startAfter, in lexicographic order, strongly consistent.
	List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error)
	// Capabilities reports what the store enforces.
	Capabilities() Capabilities
	// String names the store for messages, never with credentials.
	String() string
	// Close releases the container's resources.
	Close() error
}

// DefaultListLimit is the page size callers use when they have no reason to
// pick another; drivers cap larger limits at their own maximum.
const DefaultListLimit = 1000

// ListAll pages through every key under prefix. It is for small listings
// (fence keys, seal markers); large scans should page themselves.
func ListAll(ctx context.Context, c Container, prefix string) ([]Attrs, error) {
	var out []Attrs
	after := ""
	for {
		page, err := c.List(ctx, prefix, after, DefaultListLimit)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if !page.More || len(page.Items) == 0 {
			return out, nil
		}
		after = page.Items[len(page.Items)-1].Key
	}
}

// CheckConditionalBody refuses a conditional write whose body exceeds the
// container's single-request limit, with an error that says so.
func CheckConditionalBody(op, store, key string, size int, caps Capabilities) error {
	if caps.MaxConditionalBody > 0 && int64(size) > caps.MaxConditionalBody {
		return &OpError{Op: op, Store: store, Key: key, Err: fmt.Errorf("%w: body of %d bytes exceeds the %d-byte limit of a single conditional write", ErrTooLarge, size, caps.MaxConditionalBody)}
	}
	return nil
}
