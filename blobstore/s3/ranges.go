package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardfence/shardfence/blobstore/driver"
)

var _ driver.RangeGetter = (*bucket)(nil)

// GetRange is one GET with the range as its Range header (none for the
// whole object) and, when pinned, If-Match with the token, which is the
// ETag as Get, Stat and Write return it. The body is the HTTP response's,
// read as the caller reads. What a range HTTP cannot say costs is decided
// by the portable layer (blobstore/ranges.go).
func (b *bucket) GetRange(ctx context.Context, key string, r driver.ByteRange, pre driver.Precondition) (driver.RangeAnswer, error) {
	in := &s3.GetObjectInput{Bucket: &b.bucket, Key: &key}
	if pre.IfMatch != "" {
		in.IfMatch = aws.String(string(pre.IfMatch))
	}
	if h := r.Header(); h != "" {
		in.Range = aws.String(h)
	}
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		return driver.RangeAnswer{}, err
	}
	a, err := driver.HTTPAnswer(out.Body, token(out.ETag), aws.ToString(out.ContentRange), out.ContentLength)
	if err != nil {
		out.Body.Close()
	}
	return a, err
}
