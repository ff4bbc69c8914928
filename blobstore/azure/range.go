package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

var _ driver.RangeReader = (*bucket)(nil)

// NewRangeReader streams a range of one version of a blob: one Get Blob
// with x-ms-range and, when pinned, If-Match on the token (the ETag). The
// body is read through the SDK's retry reader, which resumes a broken
// download from where it stopped with If-Match on the ETag of the first
// answer, so a resumed stream is of the same version or fails with 412
// (ErrPreconditionFailed), never a mix of two.
//
// What one ranged GET cannot say costs a GetProperties (HEAD), on those
// paths only:
//   - a zero length: Azure's range has no empty form (a count of 0 means
//     "to the end"), so the HEAD, with the same If-Match, is the whole
//     call (one round trip, as the GET would be);
//   - a 416 InvalidRange: Azure answers it to a range that starts at or
//     past the end, and to any range of an empty blob; the HEAD tells the
//     empty stream at the end (offset == size) from ErrInvalidRange
//     (offset > size). Azurite answers offset == size itself, with an
//     empty 206 ("bytes N-(N-1)/N"), which needs nothing more;
//   - a pinned read refused with 412 ConditionNotMet: Azure and Azurite
//     answer If-Match on a missing blob with 412 too, and the contract
//     reports a missing object as ErrNotFound, so an unconditional HEAD
//     tells a replaced blob from a missing one.
func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	bc := b.client.NewBlobClient(key)
	if length == 0 {
		return emptyAt(ctx, bc, offset, pre)
	}
	// Count 0 is "to the end", which is what length -1 asks (offset 0 and
	// count 0 send no range at all: a whole-blob GET); so is a length
	// whose end would not fit in an int64.
	count := length
	if length < 0 || length > math.MaxInt64-offset {
		count = 0
	}
	opts := &blob.DownloadStreamOptions{
		Range:            blob.HTTPRange{Offset: offset, Count: count},
		AccessConditions: access(pre),
	}
	resp, err := bc.DownloadStream(ctx, opts)
	if err != nil {
		switch {
		case isService(err, http.StatusRequestedRangeNotSatisfiable, ""):
			return emptyAt(ctx, bc, offset, pre)
		case pre.IfMatch != "" && isService(err, http.StatusPreconditionFailed, "ConditionNotMet"):
			return nil, driver.Attrs{}, missingOr(ctx, bc, err)
		}
		return nil, driver.Attrs{}, err
	}
	attrs, n, err := rangeOf(resp.DownloadResponse, offset, length)
	if err != nil {
		_ = resp.Body.Close()
		return nil, driver.Attrs{}, err
	}
	// The retry reader's context ends with Close, so a Read racing a
	// Close never opens a new download that nobody would close.
	rctx, cancel := context.WithCancel(ctx)
	rr := resp.NewRetryReader(rctx, &blob.RetryReaderOptions{EarlyCloseAsError: true})
	return &exactReader{ctx: ctx, r: rr, cancel: cancel, left: n}, attrs, nil
}

// rangeOf reads the version, the whole size and the number of body bytes
// from a download's headers, and checks that the body is the range asked
// for: the bytes from offset, length of them (to the end for -1, cut at
// the end).
func rangeOf(resp blob.DownloadResponse, offset, length int64) (driver.Attrs, int64, error) {
	if resp.ETag == nil || *resp.ETag == "" {
		return driver.Attrs{}, 0, errors.New("the store's download answer carries no ETag")
	}
	if resp.ContentLength == nil || *resp.ContentLength < 0 {
		return driver.Attrs{}, 0, errors.New("the store's download answer carries no Content-Length")
	}
	attrs := driver.Attrs{Token: token(resp.ETag)}
	n := *resp.ContentLength
	if resp.ContentRange == nil {
		// A whole-blob answer: only right for a read from 0.
		if offset != 0 {
			return driver.Attrs{}, 0, fmt.Errorf("the store answered a range from %d with the whole blob", offset)
		}
		attrs.Size = n
	} else {
		start, size, ok := driver.ParseContentRange(*resp.ContentRange)
		if !ok {
			return driver.Attrs{}, 0, fmt.Errorf("the store's Content-Range %q cannot be read", *resp.ContentRange)
		}
		if start != offset {
			return driver.Attrs{}, 0, fmt.Errorf("the store answered a range from %d with %q", offset, *resp.ContentRange)
		}
		attrs.Size = size
	}
	end, err := driver.Range(attrs.Size, offset, length, blobstore.ErrInvalidRange)
	if err != nil {
		return driver.Attrs{}, 0, err
	}
	if n != end-offset {
		return driver.Attrs{}, 0, fmt.Errorf("the store answered bytes %d..%d of a %d-byte blob with %d bytes", offset, end, attrs.Size, n)
	}
	return attrs, n, nil
}

// emptyAt answers a read that has no bytes to return (a zero length, or a
// range the store refused as starting at or past the end) from the blob's
// properties, read with the same condition: an empty stream of that
// version when offset is within the blob or at its end, ErrInvalidRange
// past it.
func emptyAt(ctx context.Context, bc *blob.Client, offset int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	var opts *blob.GetPropertiesOptions
	if pre.IfMatch != "" {
		opts = &blob.GetPropertiesOptions{AccessConditions: access(pre)}
	}
	p, err := bc.GetProperties(ctx, opts)
	if err != nil {
		if pre.IfMatch != "" && isService(err, http.StatusPreconditionFailed, "ConditionNotMet") {
			err = missingOr(ctx, bc, err)
		}
		return nil, driver.Attrs{}, err
	}
	if p.ETag == nil || *p.ETag == "" || p.ContentLength == nil {
		return nil, driver.Attrs{}, errors.New("the store's properties answer carries no ETag or Content-Length")
	}
	attrs := driver.Attrs{Size: *p.ContentLength, Token: token(p.ETag)}
	if _, err := driver.Range(attrs.Size, offset, 0, blobstore.ErrInvalidRange); err != nil {
		return nil, driver.Attrs{}, err
	}
	return driver.ContextReader(ctx, http.NoBody, nil), attrs, nil
}

// missingOr settles a pinned read refused with 412 ConditionNotMet, which
// Azure also answers for a missing blob: the refusal
// (ErrPreconditionFailed) if an unconditional HEAD finds another version,
// else the HEAD's error (404 BlobNotFound: ErrNotFound).
func missingOr(ctx context.Context, bc *blob.Client, refused error) error {
	if _, err := bc.GetProperties(ctx, nil); err != nil {
		return err
	}
	return refused
}

// isService reports whether err is the service's answer with status and,
// when code is not empty, that error code.
func isService(err error, status int, code string) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == status && (code == "" || re.ErrorCode == code)
}

// exactReader ends a download after the n bytes its headers promised, so
// the retry reader is never asked to resume past the end (a range from the
// size is a 416), and reports a body that ends short as
// io.ErrUnexpectedEOF. A Read after ctx is done fails with ctx's error,
// whatever the transport made of the cancel.
type exactReader struct {
	ctx    context.Context
	r      io.ReadCloser
	cancel context.CancelFunc
	left   int64
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
		err = fmt.Errorf("the download ended %d bytes short: %w", e.left, io.ErrUnexpectedEOF)
	case err != nil && e.ctx.Err() != nil:
		err = e.ctx.Err()
	}
	return n, err
}

func (e *exactReader) Close() error {
	e.cancel()
	return e.r.Close()
}
