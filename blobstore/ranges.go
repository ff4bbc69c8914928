package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/shardfence/shardfence/blobstore/driver"
)

// The range policy: what a ranged read (NewRangeReader, OpGetRange) asks a
// store that reads over HTTP (driver.RangeGetter) and what its answers
// mean, decided here once for S3, MinIO, GCS and Azure alike. The decisions
// are a plan (rangePlan: pure, table-tested) that says which request comes
// next; readRange is the thin loop that sends them.
//
// HTTP cannot say every range of the contract: no Range names zero bytes,
// and a range that starts at the end of an object (an empty object's range
// from 0 included) is answered 416 like one past the end. So:
//   - a zero length is a Stat instead of the GET (one request either way):
//     an empty stream at an offset up to the size, ErrInvalidRange past it;
//   - a 416 costs one Stat to tell the empty stream at the end (offset ==
//     size) from ErrInvalidRange (offset > size); an offset the Stat finds
//     inside the object means it changed since the GET, which is sent again
//     (maxRangeGets in all);
//   - a pinned GET refused as a stale version costs one Stat, since some
//     stores (Azure, GCS) refuse a version condition on a missing object
//     the same way: ErrNotFound if the Stat finds nothing, else the refusal;
//   - the whole object is asked with no Range header (offset 0, to the
//     end), and a length whose end would not fit an int64 as "to the end".
//
// Every answer is checked before its bytes are served: a pinned read must
// have been served the pinned version (fake-gcs-server ignores read
// conditions); a store that ignored the Range and sent the whole object has
// the bytes before the offset dropped; a Stat after the GET gives the size
// an answer left out; the stream ends after exactly the range's bytes, and
// a body that ends short is io.ErrUnexpectedEOF, never a quiet short read.

// maxRangeGets bounds the GETs of one ranged read whose object keeps
// changing between a GET and the Stat after it.
const maxRangeGets = 3

// rangeRefusal is why a ranged read must not reach the store, or nil.
func (c *Container) rangeRefusal(call Call) error {
	if call.Offset < 0 || call.Length < -1 {
		return fmt.Errorf("%w: offset %d, length %d (offset 0 or more, length 0 or more, or -1 for the rest)", ErrInvalidRange, call.Offset, call.Length)
	}
	if !readsRanges(c.drv) {
		return fmt.Errorf("%w: %s offers no streaming reads", ErrUnsupported, c.drv)
	}
	if t := strings.Trim(string(call.Expected), `" `); call.Expected != "" && (t == "" || t == "*") {
		return fmt.Errorf("%w: pinned token %q names no version", ErrPreconditionFailed, string(call.Expected))
	}
	return nil
}

// readsRanges reports whether a driver serves OpGetRange.
func readsRanges(d driver.Bucket) bool {
	switch d.(type) {
	case driver.RangeReader, driver.RangeGetter:
		return true
	}
	return false
}

// getRange carries out OpGetRange on the driver: natively for a
// RangeReader, through the range policy for a RangeGetter. Errors come back
// classified (the driver's Classify has seen each once).
func getRange(ctx context.Context, d driver.Bucket, call Call) (io.ReadCloser, Attrs, error) {
	switch g := d.(type) {
	case driver.RangeReader:
		rc, a, err := g.NewRangeReader(ctx, call.Key, call.Offset, call.Length, driver.Precondition{IfMatch: call.Expected})
		return rc, a, classified(d, OpGetRange, err)
	case driver.RangeGetter:
		return readRange(ctx, d, g, call.Key, call.Offset, call.Length, call.Expected)
	}
	return nil, Attrs{}, fmt.Errorf("%w: %s offers no streaming reads", ErrUnsupported, d)
}

// readRange is the I/O of a ranged read on d, whose GETs g sends: it sends
// the requests rangePlan asks for and opens the stream it settles on.
func readRange(ctx context.Context, d driver.Bucket, g driver.RangeGetter, key string, offset, length int64, pin Token) (io.ReadCloser, Attrs, error) {
	classify := func(err error) error { return classified(d, OpGetRange, err) }
	var body io.ReadCloser // the last GET's, until it is served or dropped
	drop := func() {
		if body != nil {
			_ = body.Close()
			body = nil
		}
	}
	p, step := newRangePlan(offset, length, pin)
	for {
		switch step.kind {
		case stepGet:
			drop()
			a, err := g.GetRange(ctx, key, step.rng, driver.Precondition{IfMatch: pin})
			if err == nil {
				body = a.Body
			}
			step = p.afterGet(a, classify(err))
		case stepStat:
			a, err := d.Stat(ctx, key)
			step = p.afterStat(a, classify(err))
		case stepStream:
			// The bytes before the range, from a store that ignored it.
			if _, err := io.CopyN(io.Discard, body, step.skip); err != nil {
				drop()
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, Attrs{}, classify(err)
			}
			return &exactReader{ctx: ctx, r: body, left: step.n}, step.attrs, nil
		case stepEmpty:
			drop()
			return driver.ContextReader(ctx, strings.NewReader(""), nil), step.attrs, nil
		default:
			drop()
			return nil, Attrs{}, step.err
		}
	}
}

// rangeStepKind is what a ranged read does next.
type rangeStepKind uint8

const (
	stepGet    rangeStepKind = iota // send the GET of rng
	stepStat                        // read the object's size and token
	stepStream                      // done: serve the last GET's body
	stepEmpty                       // done: an empty stream of attrs's version
	stepFail                        // done: fail with err
)

// rangeStep is the next request of a ranged read, or its outcome.
type rangeStep struct {
	kind rangeStepKind
	rng  driver.ByteRange // stepGet
	// attrs is the version served (stepStream, stepEmpty); skip and n
	// are the bytes of the GET's body to drop and then to serve
	// (stepStream).
	attrs   Attrs
	skip, n int64
	err     error // stepFail
}

// statReason is why a ranged read sent a Stat.
type statReason uint8

const (
	statEmpty      statReason = iota // a zero length: nothing to GET
	statRefused                      // the GET was refused as starting at or past the end (416)
	statPinRefused                   // a pinned GET was refused: a replaced object, or a missing one?
	statSize                         // the GET's answer did not say the object's size
)

// rangePlan decides a ranged read's requests from the answers to the ones
// before: pure, no I/O.
type rangePlan struct {
	offset, length int64
	pin            Token
	gets           int        // GETs sent
	why            statReason // why the Stat in flight was sent
	answer         driver.RangeAnswer
	refused        error // a pinned GET's refusal, while a Stat tells missing from replaced
}

// newRangePlan starts a ranged read of a call the container let through
// (offset 0 or more, length -1 or more): its first request.
func newRangePlan(offset, length int64, pin Token) (*rangePlan, rangeStep) {
	p := &rangePlan{offset: offset, length: length, pin: pin}
	if length == 0 {
		p.why = statEmpty
		return p, rangeStep{kind: stepStat}
	}
	return p, p.get()
}

// get is the GET of the plan's range: to the end for -1 or for a length
// whose end would not fit an int64.
func (p *rangePlan) get() rangeStep {
	r := driver.ByteRange{Offset: p.offset, Length: p.length}
	if r.Length > math.MaxInt64-r.Offset {
		r.Length = -1
	}
	return rangeStep{kind: stepGet, rng: r}
}

// afterGet decides on the GET's answer, or its error (in the blobstore
// kinds).
func (p *rangePlan) afterGet(a driver.RangeAnswer, err error) rangeStep {
	p.gets++
	switch {
	case err == nil:
		return p.serve(a)
	case errors.Is(err, ErrInvalidRange):
		p.why = statRefused
		return rangeStep{kind: stepStat}
	case p.pin != "" && errors.Is(err, ErrPreconditionFailed):
		p.why, p.refused = statPinRefused, err
		return rangeStep{kind: stepStat}
	}
	return fail(err)
}

// afterStat decides on the Stat's attributes, or its error.
func (p *rangePlan) afterStat(a Attrs, err error) rangeStep {
	if p.why == statPinRefused {
		if err != nil {
			return fail(err) // ErrNotFound: the pinned version is gone with its key
		}
		return fail(p.refused)
	}
	if err != nil {
		return fail(err)
	}
	if p.pin != "" && a.Token != p.pin {
		return fail(fmt.Errorf("%w: the object is at version %s, not the pinned %s", ErrPreconditionFailed, a.Token, p.pin))
	}
	switch p.why {
	case statSize:
		if a.Token != p.answer.Token {
			return p.again(fmt.Sprintf("the object was replaced between the GET (version %s) and the Stat that measured it (version %s)", p.answer.Token, a.Token))
		}
		ans := p.answer
		ans.Size = a.Size
		return p.serve(ans)
	case statRefused:
		if p.offset < a.Size {
			return p.again(fmt.Sprintf("the store refused a range from %d as past the end, and then measured the object at %d bytes", p.offset, a.Size))
		}
	}
	if _, err := driver.Range(a.Size, p.offset, 0, ErrInvalidRange); err != nil {
		return fail(err)
	}
	return rangeStep{kind: stepEmpty, attrs: Attrs{Size: a.Size, Token: a.Token}}
}

// again sends the GET once more, after an answer that the object changed
// under the read, unless it has been sent maxRangeGets times.
func (p *rangePlan) again(why string) rangeStep {
	if p.gets >= maxRangeGets {
		return fail(Unavailable(fmt.Errorf("the object kept changing during %d ranged reads: %s", p.gets, why)))
	}
	return p.get()
}

// serve checks a GET's answer and says which of its bytes are the range.
func (p *rangePlan) serve(a driver.RangeAnswer) rangeStep {
	switch {
	case a.Token == "":
		return fail(errors.New("the store's answer names no version (no ETag or generation)"))
	case p.pin != "" && a.Token != p.pin:
		return fail(fmt.Errorf("%w: the store served version %s, not the pinned %s (it ignored the version condition)", ErrPreconditionFailed, a.Token, p.pin))
	case a.Start < 0 || a.Start > p.offset:
		return fail(fmt.Errorf("the store answered the range from byte %d with bytes from %d", p.offset, a.Start))
	case a.Size < 0:
		p.why, p.answer = statSize, a
		return rangeStep{kind: stepStat}
	}
	// An offset past the end fails here only from a store that ignored
	// the Range header.
	end, err := driver.Range(a.Size, p.offset, p.length, ErrInvalidRange)
	if err != nil {
		return fail(err)
	}
	if a.Length >= 0 && a.Start+a.Length < end {
		return fail(fmt.Errorf("the store answered bytes %d..%d of a %d-byte object with %d bytes from %d", p.offset, end, a.Size, a.Length, a.Start))
	}
	return rangeStep{kind: stepStream, attrs: Attrs{Size: a.Size, Token: a.Token}, skip: p.offset - a.Start, n: end - p.offset}
}

func fail(err error) rangeStep { return rangeStep{kind: stepFail, err: err} }

// exactReader serves the n bytes of a range from a store's body and ends
// there, whatever more the store sends, so an SDK that resumes broken bodies
// is never asked to resume past the end; a body that ends short is
// io.ErrUnexpectedEOF. ctx governs the stream: a Read once it is done fails
// with its error, whatever the transport made of the cancel.
type exactReader struct {
	ctx  context.Context
	r    io.ReadCloser
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if err := e.ctx.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	switch {
	case err == io.EOF && e.left > 0:
		err = fmt.Errorf("the store's answer ended %d bytes short of the range: %w", e.left, io.ErrUnexpectedEOF)
	case err != nil && err != io.EOF && e.ctx.Err() != nil:
		err = e.ctx.Err()
	}
	return n, err
}

func (e *exactReader) Close() error { return e.r.Close() }
