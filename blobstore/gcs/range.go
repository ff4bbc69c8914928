package gcs

import (
	"context"

	"cloud.google.com/go/storage"

	"github.com/shardfence/shardfence/blobstore/driver"
)

var _ driver.RangeGetter = (*bucket)(nil)

// GetRange is one read through the client's ranged reader: a GET with a
// Range header, pinned with ifGenerationMatch when pre.IfMatch is set. The
// client records the generation of its first response and asks for that
// generation again when it resumes a broken body, so a stream never mixes
// two versions: a version replaced mid-stream ends it with an error (404 on
// a bucket without versioning). The portable layer (blobstore/ranges.go)
// decides what a range HTTP cannot say costs, and compares the generation
// served with the pin itself: fake-gcs-server ignores ifGenerationMatch on
// reads.
func (b *bucket) GetRange(ctx context.Context, key string, r driver.ByteRange, pre driver.Precondition) (driver.RangeAnswer, error) {
	obj := b.bucket.Object(key)
	if pre.IfMatch != "" {
		gen, err := generation(pre.IfMatch)
		if err != nil {
			return driver.RangeAnswer{}, err
		}
		obj = obj.If(storage.Conditions{GenerationMatch: gen})
	}
	rd, err := obj.NewRangeReader(ctx, r.Offset, r.Length)
	if err != nil {
		return driver.RangeAnswer{}, err
	}
	// The client read Content-Range itself: the first byte and the whole
	// size for a partial answer, the Content-Length (-1 when absent) as
	// the size of a whole one. A generation of 0 is none in the answer.
	a := driver.RangeAnswer{Body: rd, Start: rd.Attrs.StartOffset, Size: rd.Attrs.Size, Length: rd.Remain()}
	if rd.Attrs.Generation > 0 {
		a.Token = token(rd.Attrs.Generation)
	}
	return a, nil
}
