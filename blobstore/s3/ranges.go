package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

var _ driver.RangeReader = (*bucket)(nil)

// rangeAttempts bounds how often an unpinned range is tried again when the
// object changes size between the GET that found the range empty and the
// HEAD that measured it (see NewRangeReader).
const rangeAttempts = 3

// NewRangeReader streams a range of one version of an object: one GET with
// Range: bytes=a-b (none for the whole object) and, when pinned, If-Match
// with the token, which is the ETag as Get, Stat and Write return it. The
// body is the HTTP response's, read as the caller reads; it is never held
// whole. A store answers a GET of one version, so the stream never mixes
// two.
//
// No HTTP Range names zero bytes or starts at the end of an object (S3
// answers 416 for a range starting at the size, an empty object included).
// So a zero-length range costs one HEAD instead of the GET, and a 416 costs
// one HEAD more, both with the same If-Match: the size it reports tells an
// empty range at the end (an empty stream) from a start past the end
// (ErrInvalidRange). If an unpinned object grew between the two requests,
// the GET is sent again, at most rangeAttempts times.
func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	if length == 0 {
		return b.emptyRange(ctx, key, offset, pre, false)
	}
	for attempt := 1; ; attempt++ {
		rc, attrs, err := b.getRange(ctx, key, offset, length, pre)
		if err == nil || !rangeNotSatisfiable(err) {
			return rc, attrs, err
		}
		rc, attrs, err = b.emptyRange(ctx, key, offset, pre, true)
		if !errors.Is(err, errRangeInside) {
			return rc, attrs, err
		}
		if attempt == rangeAttempts {
			return nil, driver.Attrs{}, blobstore.Unavailable(fmt.Errorf("the object kept changing size while a range of it was read (%d tries)", attempt))
		}
	}
}

// errRangeInside says that an offset the GET found past the end is inside
// the object the HEAD measured: the object changed between the two.
var errRangeInside = errors.New("offset inside the object")

// emptyRange answers a range that holds no bytes with a HEAD: an empty
// stream of the version found when offset is at most its size,
// ErrInvalidRange when it is past the end. atEnd says a GET found no byte
// at offset: an offset inside the object then means it changed since.
func (b *bucket) emptyRange(ctx context.Context, key string, offset int64, pre driver.Precondition, atEnd bool) (io.ReadCloser, driver.Attrs, error) {
	in := &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key}
	if pre.IfMatch != "" {
		in.IfMatch = aws.String(string(pre.IfMatch))
	}
	out, err := b.client.HeadObject(ctx, in)
	if err != nil {
		return nil, driver.Attrs{}, err
	}
	attrs := driver.Attrs{Size: aws.ToInt64(out.ContentLength), Token: token(out.ETag)}
	if _, err := driver.Range(attrs.Size, offset, 0, blobstore.ErrInvalidRange); err != nil {
		return nil, driver.Attrs{}, err
	}
	if atEnd && offset < attrs.Size {
		return nil, driver.Attrs{}, errRangeInside
	}
	return io.NopCloser(strings.NewReader("")), attrs, nil
}

// rangeNotSatisfiable reports a 416 answer: the range starts at or past
// the end of the object.
func rangeNotSatisfiable(err error) bool {
	a := answer(err)
	return a.Status == http.StatusRequestedRangeNotSatisfiable || a.Code == "InvalidRange"
}

// getRange sends the GET of a range of at least one byte.
func (b *bucket) getRange(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	in := &s3.GetObjectInput{Bucket: &b.bucket, Key: &key}
	if pre.IfMatch != "" {
		in.IfMatch = aws.String(string(pre.IfMatch))
	}
	ranged := offset > 0 || length >= 0
	if ranged {
		in.Range = aws.String(httpRange(offset, length))
	}
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		return nil, driver.Attrs{}, err
	}
	attrs := driver.Attrs{Token: token(out.ETag)}
	var body io.Reader = out.Body
	start, total, ok := driver.ParseContentRange(aws.ToString(out.ContentRange))
	switch {
	case ok:
		if start != offset {
			out.Body.Close()
			return nil, driver.Attrs{}, fmt.Errorf("store answered the range from byte %d with bytes from %d", offset, start)
		}
		attrs.Size = total
	case out.ContentRange != nil:
		out.Body.Close()
		return nil, driver.Attrs{}, fmt.Errorf("store answered a ranged GET with Content-Range %q, which names no object size", aws.ToString(out.ContentRange))
	default:
		// The whole object: asked for, or a store that ignored the Range
		// header, whose bytes before offset are then read and dropped.
		attrs.Size = aws.ToInt64(out.ContentLength)
		if out.ContentLength == nil {
			out.Body.Close()
			return nil, driver.Attrs{}, errors.New("store answered the GET without a Content-Length")
		}
		if ranged {
			if _, err := driver.Range(attrs.Size, offset, length, blobstore.ErrInvalidRange); err != nil {
				out.Body.Close()
				return nil, driver.Attrs{}, err
			}
			if _, err := io.CopyN(io.Discard, out.Body, offset); err != nil {
				out.Body.Close()
				return nil, driver.Attrs{}, err
			}
		}
	}
	if end, err := driver.Range(attrs.Size, offset, length, blobstore.ErrInvalidRange); err == nil {
		// Never more than the range, whatever the store sends.
		body = io.LimitReader(body, end-offset)
	}
	return driver.ContextReader(ctx, body, out.Body.Close), attrs, nil
}

// httpRange is the Range header of length bytes from offset (length -1:
// to the end); S3 cuts a range that runs past the end.
func httpRange(offset, length int64) string {
	if length < 0 || length > math.MaxInt64-offset {
		return fmt.Sprintf("bytes=%d-", offset)
	}
	return fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
}
