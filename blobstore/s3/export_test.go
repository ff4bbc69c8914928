package s3

import (
	"context"
	"net/url"

	"github.com/shardfence/shardfence/blobstore"
)

// OpenBroken opens rawURL (an s3:// URL) with a driver that forgets a
// precondition header on every conditional write: without If-Match on a
// CAS (dropIfMatch) and/or without If-None-Match on a create
// (dropIfNoneMatch), while its capabilities still claim enforcement. The
// store then applies those writes unconditionally. Only tests can build it:
// they prove the fencing suite refuses such a driver.
func OpenBroken(ctx context.Context, rawURL string, dropIfMatch, dropIfNoneMatch bool) (*blobstore.Container, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	b, err := newBucket(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b.broken = brokenPreconditions{ifMatch: dropIfMatch, ifNoneMatch: dropIfNoneMatch}
	return blobstore.NewAt(b, cfg.Prefix)
}
