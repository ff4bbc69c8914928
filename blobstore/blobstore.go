// Package blobstore is the object-store contract the fencing protocol stands
// on: versioned reads, create-if-absent and compare-and-swap over one bucket
// and prefix, with typed errors and capabilities a driver must earn by passing
// the conformance suite.
//
// The package has three layers (docs/ARCHITECTURE.md, "Blob layer"):
//
//   - a driver (package blobstore/driver and its implementations fs, mem,
//     s3, minio, gcs, azure) does bare I/O against one store's SDK and
//     classifies that store's errors into the error kinds of this package;
//   - Container, the portable type every caller holds as *Container, owns
//     what is the same for every store: key rules (ValidateKey), the
//     context check before a request leaves, capability gates, body limits,
//     the empty-token refusal, list limits, the range policy of the stores
//     that read over HTTP (ranges.go: which ranges to ask for and what the
//     answers mean), prefixes (Sub is a view over the same driver) and
//     OpError with its typed Op;
//   - middleware (With) sees every call as a typed Call and Result on its
//     way to the driver: blobstore/metered counts them, blobstore/faulty
//     injects faults, and the protocol checker's store (verify) schedules
//     them.
//
// Drivers register a URL scheme with Register; Open picks the driver by
// scheme. Import blobstore/drivers to register every driver at once.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/shardfence/shardfence/blobstore/driver"
)

// The vocabulary is the driver package's, so drivers need not import this
// package to speak it; these names are what callers use.
type (
	// Token is a store's opaque version of one object; see driver.Token.
	Token = driver.Token
	// Object is one stored object with the version it was read at.
	Object = driver.Object
	// Attrs describe an object without its body.
	Attrs = driver.Attrs
	// ListPage is one page of a List call, in lexicographic (byte) key
	// order; pass the last item's key as startAfter to read on.
	ListPage = driver.ListPage
	// Capabilities says which conditional operations a store enforces and
	// how large one request may be.
	Capabilities = driver.Capabilities
	// Op is one kind of container call (OpGet, ..., OpList); its String
	// is the method's name.
	Op = driver.Op
)

// The container calls, as OpError, Call, metrics and fault rules name them.
const (
	OpGet            = driver.OpGet
	OpStat           = driver.OpStat
	OpPut            = driver.OpPut
	OpCreateIfAbsent = driver.OpCreateIfAbsent
	OpCompareAndSwap = driver.OpCompareAndSwap
	OpDelete         = driver.OpDelete
	OpDeleteIfMatch  = driver.OpDeleteIfMatch
	OpList           = driver.OpList
	OpGetRange       = driver.OpGetRange
	// NumOps is the number of ops, for tables indexed by Op.
	NumOps = driver.NumOps
)

// DefaultListLimit is the page size callers use when they have no reason to
// pick another, and the largest page List returns.
const DefaultListLimit = 1000

// Container is one bucket and prefix of an object store. Every key is
// relative to the container's prefix and must pass ValidateKey. Every method
// is safe for concurrent use. A Container is made by a driver's constructor
// or Open, and derived with Sub and With; all of them share one driver.
type Container struct {
	drv driver.Bucket
	// loc is the container's prefix from the driver's root ("" or ending
	// in '/'); it names the store and reaches driver-specific key limits.
	loc string
	// prefix is prepended to keys before next sees them: next takes keys
	// relative to the container the newest middleware was installed on.
	prefix string
	next   Handler
	// tags name the middleware that asked to show in String, innermost
	// first.
	tags []string
}

// New returns the container at the root of a driver's store.
func New(d driver.Bucket) *Container {
	return &Container{drv: d, next: dispatch(d)}
}

// NewAt returns the container of a driver's store under prefix (a store
// URL's path; empty for the root). A prefix that is not a valid key is
// ErrBadURL.
func NewAt(d driver.Bucket, prefix string) (*Container, error) {
	c := New(d)
	if prefix = strings.Trim(prefix, "/"); prefix == "" {
		return c, nil
	}
	sub, err := Sub(c, prefix)
	if err != nil {
		return nil, fmt.Errorf("%w %s: prefix: %w", ErrBadURL, d, err)
	}
	return sub, nil
}

// String names the store and prefix for messages, never with credentials.
func (c *Container) String() string {
	s := c.drv.String()
	if c.loc != "" {
		s += "/" + c.loc
	}
	for _, t := range c.tags {
		s = t + "(" + s + ")"
	}
	return s
}

// Capabilities reports what the store enforces.
func (c *Container) Capabilities() Capabilities { return c.drv.Capabilities() }

// Close releases the driver's resources, which every container derived from
// the same driver shares.
func (c *Container) Close() error { return c.drv.Close() }

// Get reads an object and the token of the version read.
func (c *Container) Get(ctx context.Context, key string) (Object, error) {
	res, err := c.call(ctx, Call{Op: OpGet, Key: key})
	return res.Object, err
}

// Stat reads an object's size and token.
func (c *Container) Stat(ctx context.Context, key string) (Attrs, error) {
	res, err := c.call(ctx, Call{Op: OpStat, Key: key})
	return res.Attrs, err
}

// Put writes unconditionally.
func (c *Container) Put(ctx context.Context, key string, body []byte) (Token, error) {
	res, err := c.call(ctx, Call{Op: OpPut, Key: key, Body: body})
	return res.Token, err
}

// CreateIfAbsent writes only if no object exists at key; otherwise it fails
// with ErrAlreadyExists.
func (c *Container) CreateIfAbsent(ctx context.Context, key string, body []byte) (Token, error) {
	res, err := c.call(ctx, Call{Op: OpCreateIfAbsent, Key: key, Body: body})
	return res.Token, err
}

// CompareAndSwap writes only if the stored token equals expected; a
// different token, an empty one or a missing key fails with
// ErrPreconditionFailed.
func (c *Container) CompareAndSwap(ctx context.Context, key string, expected Token, body []byte) (Token, error) {
	res, err := c.call(ctx, Call{Op: OpCompareAndSwap, Key: key, Expected: expected, Body: body})
	return res.Token, err
}

// Delete removes an object; deleting a missing key succeeds.
func (c *Container) Delete(ctx context.Context, key string) error {
	_, err := c.call(ctx, Call{Op: OpDelete, Key: key})
	return err
}

// DeleteIfMatch removes an object only if its token equals expected
// (ErrPreconditionFailed otherwise). A store without ConditionalDelete
// refuses it with ErrUnsupported.
func (c *Container) DeleteIfMatch(ctx context.Context, key string, expected Token) error {
	_, err := c.call(ctx, Call{Op: OpDeleteIfMatch, Key: key, Expected: expected})
	return err
}

// List returns up to limit objects whose keys start with prefix and sort
// after startAfter, in lexicographic order, strongly consistent. A limit
// outside 1..DefaultListLimit means DefaultListLimit.
func (c *Container) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	res, err := c.call(ctx, Call{Op: OpList, Key: prefix, After: startAfter, Limit: limit})
	return res.Page, err
}

// NewReader opens a stream over the whole object at key: NewRangeReader
// from 0 to the end, unpinned.
func (c *Container) NewReader(ctx context.Context, key string) (io.ReadCloser, Attrs, error) {
	return c.NewRangeReader(ctx, key, 0, -1, "")
}

// NewRangeReader opens a stream over length bytes of the object at key
// from offset, without holding the object in memory. length -1 reads to
// the end; a range that runs past the end is cut there (a short read).
// offset equal to the size gives an empty stream, offset above it
// ErrInvalidRange. pin, when not empty, pins the read to that version (a
// token a Get, Stat or earlier range returned): an object replaced since
// fails with ErrPreconditionFailed, so the ranges of one file never mix
// two versions. The Attrs are the version read (its whole Size and its
// Token). Errors of the stream's Reads are in the blobstore kinds and name
// the store and key; cancelling ctx fails the next Read. The caller closes
// the stream. A driver without streaming reads refuses with
// ErrUnsupported.
func (c *Container) NewRangeReader(ctx context.Context, key string, offset, length int64, pin Token) (io.ReadCloser, Attrs, error) {
	res, err := c.call(ctx, Call{Op: OpGetRange, Key: key, Offset: offset, Length: length, Expected: pin})
	if err != nil {
		return nil, Attrs{}, err
	}
	return &rangeReader{rc: res.Reader, classify: c.drv.Classify, store: c.String(), key: key}, res.Attrs, nil
}

// rangeReader puts a stream's errors in the blobstore kinds and names the
// store and key in them.
type rangeReader struct {
	rc         io.ReadCloser
	classify   func(Op, error) error
	store, key string
	err        error
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.rc.Read(p)
	if err != nil && err != io.EOF {
		if !hasKind(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			err = r.classify(OpGetRange, err)
		}
		r.err = Wrap(OpGetRange, r.store, r.key, err)
		return n, r.err
	}
	return n, err
}

func (r *rangeReader) Close() error { return r.rc.Close() }

// call checks a call, sends it through the middleware to the driver and
// names the store and key in its error.
func (c *Container) call(ctx context.Context, call Call) (Result, error) {
	call.Refusal = c.refusal(ctx, call)
	res, err := c.send(ctx, call)
	if err != nil {
		return Result{}, Wrap(call.Op, c.String(), call.Key, err)
	}
	return res, nil
}

// refusal is why the call must not reach the store, or nil: the checks
// every driver would otherwise repeat, in the order a caller hears them.
func (c *Container) refusal(ctx context.Context, call Call) error {
	if call.Op == OpList {
		if err := ValidatePrefix(call.Key); err != nil {
			return err
		}
	} else {
		if err := ValidateKey(call.Key); err != nil {
			return err
		}
		if kc, ok := c.drv.(driver.KeyChecker); ok {
			if err := kc.CheckKey(c.loc + call.Key); err != nil {
				return err
			}
		}
	}
	// A context that is already done fails here, before anything is sent,
	// so a write cut off this early is a definite failure, not an
	// ambiguous one.
	if err := ctx.Err(); err != nil {
		return err
	}
	if call.Op == OpGetRange {
		return c.rangeRefusal(call)
	}
	if !call.Op.Mutates() {
		return nil
	}
	caps := c.drv.Capabilities()
	if call.Op == OpDeleteIfMatch && !caps.ConditionalDelete {
		why := "a driver offers DeleteIfMatch only for a store known to refuse a stale If-Match on delete"
		if e, ok := c.drv.(driver.Explainer); ok {
			why = e.Unsupported(call.Op)
		}
		return fmt.Errorf("%w: %s offers no conditional delete: %s", ErrUnsupported, c.drv, why)
	}
	if call.Op == OpCompareAndSwap || call.Op == OpDeleteIfMatch {
		// An empty If-Match is not sent at all, and "*" matches any
		// version: either would make the call unconditional.
		if t := strings.Trim(string(call.Expected), `" `); t == "" || t == "*" {
			return fmt.Errorf("%w: expected token %q names no version", ErrPreconditionFailed, string(call.Expected))
		}
	}
	size := int64(len(call.Body))
	if call.Op.Conditional() && caps.MaxConditionalBody > 0 && size > caps.MaxConditionalBody {
		return fmt.Errorf("%w: body of %d bytes exceeds the %d-byte limit of a single conditional write", ErrTooLarge, size, caps.MaxConditionalBody)
	}
	if caps.MaxBody > 0 && size > caps.MaxBody {
		return fmt.Errorf("%w: body of %d bytes exceeds the %d-byte limit of a single write to this store", ErrTooLarge, size, caps.MaxBody)
	}
	return nil
}

// send puts the container's prefix on the call's keys, passes it on, and
// takes the prefix off the keys of the result.
func (c *Container) send(ctx context.Context, call Call) (Result, error) {
	key := call.Key
	if c.prefix == "" {
		return c.next(ctx, call)
	}
	call.Key = c.prefix + call.Key
	if call.After != "" {
		call.After = c.prefix + call.After
	}
	res, err := c.next(ctx, call)
	if err != nil {
		return Result{}, err
	}
	res.Object.Key, res.Attrs.Key = key, key
	items := res.Page.Items[:0]
	for _, it := range res.Page.Items {
		if rel, ok := strings.CutPrefix(it.Key, c.prefix); ok {
			it.Key = rel
			items = append(items, it)
		}
	}
	res.Page.Items = items
	return res, nil
}

// dispatch is the end of every chain: it carries a call out on the driver.
func dispatch(d driver.Bucket) Handler {
	return func(ctx context.Context, call Call) (res Result, err error) {
		if call.Refusal != nil {
			return Result{}, call.Refusal
		}
		// Middleware may have held the call; the context is checked again
		// right before anything is sent.
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		switch call.Op {
		case OpGet:
			res.Object, err = d.Get(ctx, call.Key)
			res.Object.Key = call.Key
		case OpStat:
			res.Attrs, err = d.Stat(ctx, call.Key)
			res.Attrs.Key = call.Key
		case OpPut:
			res.Token, err = d.Write(ctx, call.Key, call.Body, driver.Precondition{})
		case OpCreateIfAbsent:
			res.Token, err = d.Write(ctx, call.Key, call.Body, driver.Precondition{IfAbsent: true})
		case OpCompareAndSwap:
			res.Token, err = d.Write(ctx, call.Key, call.Body, driver.Precondition{IfMatch: call.Expected})
		case OpDelete:
			err = d.Delete(ctx, call.Key, driver.Precondition{})
		case OpDeleteIfMatch:
			err = d.Delete(ctx, call.Key, driver.Precondition{IfMatch: call.Expected})
		case OpList:
			res.Page, err = d.List(ctx, call.Key, call.After, call.Limit)
		case OpGetRange:
			// The range policy decides on classified errors, so it
			// classifies them itself, once.
			res.Reader, res.Attrs, err = getRange(ctx, d, call)
			res.Attrs.Key = call.Key
			if err != nil {
				return Result{}, err
			}
		default:
			return Result{}, fmt.Errorf("%w: operation %v", ErrUnsupported, call.Op)
		}
		if err == nil {
			return res, nil
		}
		err = classified(d, call.Op, err)
		if call.Op == OpDelete && errors.Is(err, ErrNotFound) {
			return Result{}, nil
		}
		return Result{}, err
	}
}

// classified is err in the blobstore kinds, through the driver's Classify
// unless it is in them already.
func classified(d driver.Bucket, op Op, err error) error {
	if err == nil || hasKind(err) {
		return err
	}
	return d.Classify(op, err)
}

// ListAll pages through every key under prefix. It is for small listings
// (fence keys, seal markers); large scans should page themselves.
func ListAll(ctx context.Context, c *Container, prefix string) ([]Attrs, error) {
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
