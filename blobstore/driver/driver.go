// Package driver is the contract between the portable *blobstore.Container
// and one object store: bare I/O against the store's SDK, with the store's
// own errors classified once, by the driver, into the blobstore error kinds.
//
// A driver does not validate keys, check a context before sending, refuse an
// empty token, clamp a listing's limit, apply a container prefix, wrap errors
// with the operation and key, or gate calls on its capabilities: the portable
// type does all of that, the same way for every store, before a call reaches
// the driver. A driver receives full keys (container prefix included) that
// already passed blobstore.ValidateKey, a context that was live when the call
// was sent, a limit in 1..blobstore.DefaultListLimit, and never a conditional
// call it does not advertise.
//
// Errors. A method returns either its SDK's error as it came, or an error
// that already matches a blobstore error kind (blobstore.ErrNotFound,
// ErrAlreadyExists, ErrPreconditionFailed, ErrConflict, ErrUnavailable,
// ErrAmbiguous, ErrTooLarge, ErrInvalidKey, ErrUnsupported) where the driver
// itself knows what happened. The portable type passes every error that
// matches no kind through Classify, once: Classify is where a driver says
// what its store's answers mean (a 412 is "already exists" for a create and
// "precondition failed" for a compare-and-swap; a timeout is harmless for a
// read and ambiguous for a write).
//
// A new driver is a file of SDK calls implementing Bucket plus a test that
// runs the conformance suite (package conformance) against the real store.
//
// Streaming reads. A driver serves OpGetRange, a stream over a range of one
// version of an object with no whole body in memory, in one of two ways. A
// store that reads over HTTP implements RangeGetter: one GET of a range the
// portable type chose, answered as the SDK reports it; the range contract's
// corners (zero bytes, a start at or past the end, a pin on a replaced or
// missing object, an answer that ignored the range) are decided once, in
// the portable type, for every such store. A store that can read any range
// of one version itself (fs, mem) implements RangeReader and answers the
// whole contract. The portable type gates OpGetRange like ConditionalDelete:
// ErrUnsupported where a driver has neither.
package driver

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Token is a store's opaque version of one object: an S3 or Azure ETag, a GCS
// generation, an fs random id. Tokens are compared only for equality and
// only against tokens of the same key and store. The empty token means "no
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

// ListPage is one page of a listing, in lexicographic (byte) key order.
type ListPage struct {
	Items []Attrs
	// More reports whether keys after the last item may remain; pass the
	// last item's key as startAfter to read on.
	More bool
}

// Capabilities says which conditional operations a store enforces and how
// large one request may be. A driver advertises a capability only where the
// conformance suite proves it against the real store.
type Capabilities struct {
	ConditionalCreate bool // CreateIfAbsent fails on an existing key
	ConditionalUpdate bool // CompareAndSwap fails on a stale or missing token
	ConditionalDelete bool // DeleteIfMatch fails on a stale token
	// MaxConditionalBody is the largest body a conditional write accepts in a
	// single request; 0 means no limit beyond the store's own.
	MaxConditionalBody int64
	// MaxBody is the largest body any single write accepts; 0 means the
	// driver sets no limit of its own.
	MaxBody int64
}

// Op is one kind of container call. Its String is the method's name, which
// is how errors, metrics, fault rules and the protocol checker's traces name
// it.
type Op uint8

// The container calls.
const (
	OpGet Op = iota
	OpStat
	OpPut
	OpCreateIfAbsent
	OpCompareAndSwap
	OpDelete
	OpDeleteIfMatch
	OpList
	// OpGetRange opens a stream over a range of an object (RangeReader).
	OpGetRange
	// NumOps is the number of ops, for tables indexed by Op.
	NumOps
)

var opNames = [NumOps]string{"Get", "Stat", "Put", "CreateIfAbsent", "CompareAndSwap", "Delete", "DeleteIfMatch", "List", "GetRange"}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Mutates reports whether the call can change the store, so that a failure
// after its request left must be reported as ambiguous rather than as a
// clean miss.
func (o Op) Mutates() bool {
	switch o {
	case OpPut, OpCreateIfAbsent, OpCompareAndSwap, OpDelete, OpDeleteIfMatch:
		return true
	}
	return false
}

// Conditional reports whether the call carries a precondition.
func (o Op) Conditional() bool {
	return o == OpCreateIfAbsent || o == OpCompareAndSwap || o == OpDeleteIfMatch
}

// Precondition is what the store must find at the key for a request to take
// effect, as the stores' own conditional headers say it (If-None-Match: *,
// If-Match, ifGenerationMatch). The zero Precondition is unconditional; at
// most one field is set.
type Precondition struct {
	// IfAbsent: only if no object exists at the key.
	IfAbsent bool
	// IfMatch: only if the stored object's token equals this one.
	IfMatch Token
}

// WriteOp is the container call a Write with p carries out.
func (p Precondition) WriteOp() Op {
	switch {
	case p.IfAbsent:
		return OpCreateIfAbsent
	case p.IfMatch != "":
		return OpCompareAndSwap
	}
	return OpPut
}

// DeleteOp is the container call a Delete with p carries out.
func (p Precondition) DeleteOp() Op {
	if p.IfMatch != "" {
		return OpDeleteIfMatch
	}
	return OpDelete
}

// Bucket is one store, addressed by full keys. Every method is safe for
// concurrent use.
type Bucket interface {
	// Get reads an object and the token of the version read.
	Get(ctx context.Context, key string) (Object, error)
	// Stat reads an object's size and token.
	Stat(ctx context.Context, key string) (Attrs, error)
	// Write stores body at key if pre holds and returns the new version's
	// token. A write whose precondition does not hold fails with
	// ErrAlreadyExists (IfAbsent) or ErrPreconditionFailed (IfMatch, a
	// missing key included), and changes nothing.
	Write(ctx context.Context, key string, body []byte, pre Precondition) (Token, error)
	// Delete removes the object at key if pre holds (only IfMatch is used).
	// An unconditional delete of a missing key may succeed or fail with
	// ErrNotFound; the portable type reports success either way.
	Delete(ctx context.Context, key string, pre Precondition) error
	// List returns up to limit objects whose keys start with prefix and
	// sort strictly after startAfter (when not empty), in byte order,
	// strongly consistent.
	List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error)
	// Classify turns an error a method returned for op, one that matches no
	// blobstore error kind yet, into the kinds; an error it cannot place is
	// returned as it is.
	Classify(op Op, err error) error
	// Capabilities reports what the store enforces.
	Capabilities() Capabilities
	// String names the store's root for messages (the container prefix is
	// added by the portable type), never with credentials.
	String() string
	// Close releases the driver's resources.
	Close() error
}

// KeyChecker is implemented by a driver whose store limits keys beyond
// blobstore.ValidateKey (a name length that counts the container prefix, a
// segment a filesystem cannot name). CheckKey gets the full key and returns
// an error matching blobstore.ErrInvalidKey for one the store cannot hold;
// the call is then refused before anything is sent.
type KeyChecker interface {
	CheckKey(key string) error
}

// RangeReader is implemented by a driver that serves the whole range
// contract itself, natively (fs pread from one open single-version file, mem
// a slice of the stored body): it knows the size before it reads, so no
// corner of the contract costs it a request. Drivers of stores that read
// over HTTP implement RangeGetter instead.
type RangeReader interface {
	// NewRangeReader opens a stream over length bytes of the object at key
	// from offset; length -1 reads to the end, and a range that runs past
	// the end is cut there (a short read, not an error). offset equal to
	// the size gives an empty stream; offset above it fails with
	// ErrInvalidRange. pre.IfMatch, when set, pins the read to that
	// version: an object replaced since fails with ErrPreconditionFailed
	// (a missing one with ErrNotFound). The returned Attrs are the version
	// read: its whole Size and its Token. The stream returns the bytes of
	// that one version or an error, never bytes of two versions; the
	// caller closes it. ctx governs the whole stream: cancelling it fails
	// the next Read.
	NewRangeReader(ctx context.Context, key string, offset, length int64, pre Precondition) (io.ReadCloser, Attrs, error)
}

// RangeGetter is implemented by a driver whose store reads ranges over
// HTTP (S3 and MinIO a GET with Range and If-Match, GCS NewRangeReader with
// a generation condition, Azure a ranged download with If-Match). It
// answers only what its SDK does: the portable type decides which ranges
// to ask for, when a Stat must answer instead, and what each answer means,
// the same way for every such store.
type RangeGetter interface {
	// GetRange sends one GET of r of the object at key, with pre.IfMatch
	// (when set) as the store's own version condition, and returns the
	// answer as the SDK reports it; Body is the response's, read as the
	// caller reads, never held whole. An SDK that resumes a broken body
	// must pin the resumed request to the first answer's version. Errors
	// are the SDK's, for Classify with OpGetRange: a 416 (a range starting
	// at or past the end) must classify as ErrInvalidRange, a refused
	// version condition as ErrPreconditionFailed, a missing key as
	// ErrNotFound. ctx governs the whole body.
	GetRange(ctx context.Context, key string, r ByteRange, pre Precondition) (RangeAnswer, error)
}

// ByteRange is the range a RangeGetter asks its store for: Length bytes
// from Offset, or to the end for Length -1. It is never empty (Length is
// -1 or positive) and its end fits an int64, so every SDK can say it.
type ByteRange struct {
	Offset, Length int64
}

// Whole reports whether the range is the whole object, which is asked
// with no Range header at all (S3 answers 416 to any range of an empty
// object).
func (r ByteRange) Whole() bool { return r.Offset == 0 && r.Length < 0 }

// Header is the HTTP Range header of r: "bytes=FIRST-LAST", "bytes=FIRST-"
// to the end, and "" for the whole object.
func (r ByteRange) Header() string {
	switch {
	case r.Whole():
		return ""
	case r.Length < 0:
		return "bytes=" + strconv.FormatInt(r.Offset, 10) + "-"
	}
	return "bytes=" + strconv.FormatInt(r.Offset, 10) + "-" + strconv.FormatInt(r.Offset+r.Length-1, 10)
}

// RangeAnswer is a store's answer to a GetRange, as its SDK reports it.
type RangeAnswer struct {
	// Body is the answer's bytes; the portable type closes it.
	Body io.ReadCloser
	// Token is the version served (an ETag, a generation).
	Token Token
	// Start is the offset in the object of Body's first byte: the first
	// byte of a partial answer (206), 0 for the whole object (200).
	Start int64
	// Size is the whole object's size, -1 when the answer does not say (a
	// whole-object answer without a Content-Length).
	Size int64
	// Length is Body's length, -1 when the answer does not say.
	Length int64
}

// HTTPAnswer reads an HTTP answer's Content-Range (empty for an answer with
// the whole object) and Content-Length (nil when absent) into a
// RangeAnswer, for a driver whose SDK hands over the headers.
func HTTPAnswer(body io.ReadCloser, token Token, contentRange string, contentLength *int64) (RangeAnswer, error) {
	a := RangeAnswer{Body: body, Token: token, Size: -1, Length: -1}
	if contentLength != nil && *contentLength >= 0 {
		a.Length = *contentLength
	}
	if contentRange == "" {
		a.Size = a.Length
		return a, nil
	}
	start, size, ok := ParseContentRange(contentRange)
	if !ok {
		return RangeAnswer{}, fmt.Errorf("the store answered a ranged GET with Content-Range %q, not bytes FIRST-LAST/SIZE", contentRange)
	}
	a.Start, a.Size = start, size
	return a, nil
}

// Explainer is implemented by a driver that can say why it does not offer a
// conditional call its store lacks (DeleteIfMatch without
// ConditionalDelete) and what an operator can do about it; the portable
// type puts the explanation in its ErrUnsupported refusal.
type Explainer interface {
	Unsupported(op Op) string
}

// Range resolves a ranged read of an object of size bytes: the end of the
// bytes to read, or an error wrapping invalidRange when offset is past the
// end. It is the one rule for every ranged read: the RangeReader drivers
// apply it to the size they know, the portable layer to the size a
// RangeGetter's store answered.
func Range(size, offset, length int64, invalidRange error) (end int64, err error) {
	if offset > size {
		return 0, fmt.Errorf("%w: offset %d is past the end of the %d-byte object", invalidRange, offset, size)
	}
	end = size
	if length >= 0 && length < size-offset {
		end = offset + length
	}
	return end, nil
}

// ParseContentRange reads the Content-Range of a ranged answer, "bytes
// FIRST-LAST/SIZE": the first byte and the whole object's size. LAST may be
// FIRST-1 (an empty range at the end, as Azurite answers); anything else
// that is not a range within SIZE is not ok.
func ParseContentRange(v string) (start, size int64, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, total, found := strings.Cut(spec, "/")
	if !found {
		return 0, 0, false
	}
	first, last, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	end, err2 := strconv.ParseInt(strings.TrimSpace(last), 10, 64)
	size, err3 := strconv.ParseInt(strings.TrimSpace(total), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || start < 0 || end < start-1 || end >= size {
		return 0, 0, false
	}
	return start, size, true
}

// ContextReader returns r as a stream whose Reads fail with ctx's error
// once ctx is done, for a driver whose reads do not watch the context
// themselves (a file, a buffer).
func ContextReader(ctx context.Context, r io.Reader, close func() error) io.ReadCloser {
	return &ctxReader{ctx: ctx, r: r, close: close}
}

type ctxReader struct {
	ctx   context.Context
	r     io.Reader
	close func() error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (c *ctxReader) Close() error {
	if c.close == nil {
		return nil
	}
	return c.close()
}
