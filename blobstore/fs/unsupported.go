//go:build !unix

// Package fs is the filesystem blobstore driver. It needs flock and atomic
// rename/link semantics of a Unix kernel; on other systems the file scheme
// is registered only to say so.
package fs

import (
	"context"
	"fmt"
	"net/url"

	"github.com/shardfence/shardfence/blobstore"
)

func init() {
	blobstore.Register("file", func(_ context.Context, u *url.URL) (*blobstore.Container, error) {
		return nil, fmt.Errorf("%w: %s: the filesystem store runs on Linux and other Unix systems only", blobstore.ErrUnsupported, blobstore.RedactURL(u))
	})
}
