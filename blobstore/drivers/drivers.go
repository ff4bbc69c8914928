// Package drivers registers every blobstore driver with blobstore.Open.
// Import it for its side effect: import _ "github.com/shardfence/shardfence/blobstore/drivers".
package drivers

import (
	_ "github.com/shardfence/shardfence/blobstore/azure"
	_ "github.com/shardfence/shardfence/blobstore/fs"
	_ "github.com/shardfence/shardfence/blobstore/gcs"
	_ "github.com/shardfence/shardfence/blobstore/mem"
	_ "github.com/shardfence/shardfence/blobstore/minio"
	_ "github.com/shardfence/shardfence/blobstore/s3"
)
