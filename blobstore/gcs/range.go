package gcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

var _ driver.RangeReader = (*bucket)(nil)

// rangeAttempts bounds how often NewRangeReader opens a read whose 416 the
// following Stat contradicts (the object was replaced in between).
const rangeAttempts = 3

// NewRangeReader streams a range through the client's ranged reader: one
// GET with a Range header, pinned with ifGenerationMatch when pre.IfMatch is
// set. The client records the generation of its first response and asks for
// that generation again when it resumes a broken body, so a stream never
// mixes two versions: a version replaced mid-stream ends it with an error
// (404 on a bucket without versioning).
//
// Round trips: one GET for a range that starts inside the object. The
// corner cases HTTP cannot express cost one metadata request instead or in
// addition:
//   - length 0: no Range asks for zero bytes (the client sends a HEAD on XML
//     reads, a whole-object GET on JSON reads, and checks no offset), so a
//     Stat alone answers, in place of the read.
//   - offset at or past the end: GCS answers 416 for both (a non-empty
//     range of an empty object included); a Stat after the 416 tells the
//     empty stream at the end from ErrInvalidRange.
//   - a 412 on a pinned read: a Stat tells a missing object (ErrNotFound)
//     from a replaced one (ErrPreconditionFailed).
//
// The driver also compares the generation it was served with the pin
// itself: fake-gcs-server ignores ifGenerationMatch on reads and serves
// whatever is stored.
func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	var pin int64 // 0: not pinned (a real generation is positive)
	if pre.IfMatch != "" {
		g, err := generation(pre.IfMatch)
		if err != nil {
			return nil, driver.Attrs{}, err
		}
		pin = g
	}
	if length == 0 {
		a, err := b.rangeStat(ctx, key, offset, pin)
		if err != nil {
			return nil, driver.Attrs{}, err
		}
		return emptyStream(ctx), a, nil
	}
	obj := b.bucket.Object(key)
	if pin != 0 {
		obj = obj.If(storage.Conditions{GenerationMatch: pin})
	}
	for attempt := 1; ; attempt++ {
		r, err := obj.NewRangeReader(ctx, offset, length)
		var gerr *googleapi.Error
		switch {
		case err == nil:
			return b.served(ctx, key, r, pin)
		case errors.As(err, &gerr) && gerr.Code == http.StatusRequestedRangeNotSatisfiable:
			a, serr := b.rangeStat(ctx, key, offset, pin)
			if serr != nil {
				return nil, driver.Attrs{}, serr
			}
			if offset == a.Size {
				return emptyStream(ctx), a, nil
			}
			// The offset is inside the object the Stat found: it replaced
			// the one the GET was refused on. Only an unpinned read gets
			// here (a pinned Stat fails on another generation).
			if attempt == rangeAttempts {
				return nil, driver.Attrs{}, blobstore.Unavailable(fmt.Errorf("the object kept changing during %d ranged reads: %w", attempt, err))
			}
		case pin != 0 && errors.As(err, &gerr) && gerr.Code == http.StatusPreconditionFailed:
			if _, serr := b.Stat(ctx, key); errors.Is(serr, storage.ErrObjectNotExist) {
				return nil, driver.Attrs{}, serr
			}
			return nil, driver.Attrs{}, fmt.Errorf("%w: the object was replaced since the pinned generation %d: %w", blobstore.ErrPreconditionFailed, pin, err)
		default:
			return nil, driver.Attrs{}, err
		}
	}
}

// served checks the version a ranged GET was answered with and returns its
// stream.
func (b *bucket) served(ctx context.Context, key string, r *storage.Reader, pin int64) (io.ReadCloser, driver.Attrs, error) {
	gen, size := r.Attrs.Generation, r.Attrs.Size
	switch {
	case gen <= 0:
		_ = r.Close()
		return nil, driver.Attrs{}, fmt.Errorf("the store's answer names no object generation (no X-Goog-Generation header), so the version read is unknown")
	case pin != 0 && gen != pin:
		_ = r.Close()
		return nil, driver.Attrs{}, fmt.Errorf("%w: the store served generation %d, not the pinned %d (it ignored ifGenerationMatch)", blobstore.ErrPreconditionFailed, gen, pin)
	}
	if size < 0 {
		// A whole-object answer without a Content-Length (chunked, or
		// decompressed by the transport) does not give the size: ask for
		// that generation's metadata, one more request.
		a, err := b.bucket.Object(key).Generation(gen).Attrs(ctx)
		if err != nil {
			_ = r.Close()
			return nil, driver.Attrs{}, err
		}
		size = a.Size
	}
	return driver.ContextReader(ctx, r, r.Close), driver.Attrs{Size: size, Token: token(gen)}, nil
}

// rangeStat reads the attributes of the object at key for a read from
// offset pinned to pin (0: not pinned), failing as the read would: the
// client's not-found error, ErrPreconditionFailed for another generation,
// ErrInvalidRange for an offset past the end.
func (b *bucket) rangeStat(ctx context.Context, key string, offset, pin int64) (driver.Attrs, error) {
	a, err := b.Stat(ctx, key)
	if err != nil {
		return driver.Attrs{}, err
	}
	if pin != 0 && a.Token != token(pin) {
		return driver.Attrs{}, fmt.Errorf("%w: the object is at generation %s, not the pinned %d", blobstore.ErrPreconditionFailed, a.Token, pin)
	}
	if _, err := driver.Range(a.Size, offset, -1, blobstore.ErrInvalidRange); err != nil {
		return driver.Attrs{}, err
	}
	return a, nil
}

func emptyStream(ctx context.Context) io.ReadCloser {
	return driver.ContextReader(ctx, bytes.NewReader(nil), nil)
}
