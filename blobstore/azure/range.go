package azure

import (
	"context"
	"io"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/shardfence/shardfence/blobstore/driver"
)

var _ driver.RangeGetter = (*bucket)(nil)

// GetRange is one Get Blob with x-ms-range and, when pinned, If-Match on
// the token (the ETag). The body is read through the SDK's retry reader,
// which resumes a broken download from where it stopped with If-Match on
// the ETag of the first answer, so a resumed stream is of the same version
// or fails with 412 (ErrPreconditionFailed), never a mix of two. Azure's
// range has no empty form and a count of 0 means "to the end", which is
// what a range to the end asks (offset 0 and count 0 send no range at
// all). The portable layer (blobstore/ranges.go) settles what else a range
// HTTP cannot say costs: a 416 at the end (Azurite answers offset == size
// itself, with an empty 206, "bytes N-(N-1)/N"), and a pinned read refused
// with 412 ConditionNotMet, which Azure also answers for a missing blob.
func (b *bucket) GetRange(ctx context.Context, key string, r driver.ByteRange, pre driver.Precondition) (driver.RangeAnswer, error) {
	opts := &blob.DownloadStreamOptions{
		Range:            blob.HTTPRange{Offset: r.Offset, Count: max(r.Length, 0)},
		AccessConditions: access(pre),
	}
	resp, err := b.client.NewBlobClient(key).DownloadStream(ctx, opts)
	if err != nil {
		return driver.RangeAnswer{}, err
	}
	// The retry reader's context ends with Close, so a Read racing a
	// Close never opens a new download that nobody would close.
	rctx, cancel := context.WithCancel(ctx)
	body := &cancelOnClose{ReadCloser: resp.NewRetryReader(rctx, &blob.RetryReaderOptions{EarlyCloseAsError: true}), cancel: cancel}
	contentRange := ""
	if resp.ContentRange != nil {
		contentRange = *resp.ContentRange
	}
	a, err := driver.HTTPAnswer(body, token(resp.ETag), contentRange, resp.ContentLength)
	if err != nil {
		_ = body.Close()
	}
	return a, err
}

// cancelOnClose ends the retry reader's context when the stream is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	c.cancel()
	return c.ReadCloser.Close()
}
