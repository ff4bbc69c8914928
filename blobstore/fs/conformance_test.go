//go:build unix

package fs

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/conformance"
)

// Both suites wait on fsync most of the time, so they run side by side.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.RunContainer(t, func(t *testing.T) *blobstore.Container {
		c, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// The fencing suite on a directory, as serve on file://./data runs it.
func TestFencing(t *testing.T) {
	t.Parallel()
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunSuiteWithLimits(t, conformance.FencingSuite, c, nil)
}

// The same with every request alternating between two buckets on one
// directory, as two processes sharing it would.
func TestFencingSharedDirectory(t *testing.T) {
	t.Parallel()
	conformance.RunSuiteWithLimits(t, conformance.FencingSuite, sharedDirectory(t), nil)
}

// Two buckets on one directory behave as one store, as two processes
// sharing it would.
func TestConformanceSharedDirectory(t *testing.T) {
	t.Parallel()
	conformance.RunContainer(t, sharedDirectory)
}

// sharedDirectory is a store whose requests alternate between two buckets
// on one new directory.
func sharedDirectory(t *testing.T) *blobstore.Container {
	dir := t.TempDir()
	a, err := OpenBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	return blobstore.New(&alternating{Bucket: a, other: b})
}

// alternating sends each request to one of two buckets in turn, so reads
// see writes made through the other and racing writers contend on flock
// rather than on one process's key mutex.
type alternating struct {
	*Bucket
	other *Bucket
	n     atomic.Uint64
}

func (x *alternating) pick() *Bucket {
	if x.n.Add(1)%2 == 0 {
		return x.Bucket
	}
	return x.other
}

func (x *alternating) Get(ctx context.Context, key string) (driver.Object, error) {
	return x.pick().Get(ctx, key)
}

func (x *alternating) Stat(ctx context.Context, key string) (driver.Attrs, error) {
	return x.pick().Stat(ctx, key)
}

func (x *alternating) NewRangeReader(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	return x.pick().NewRangeReader(ctx, key, offset, length, pre)
}

func (x *alternating) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	return x.pick().Write(ctx, key, body, pre)
}

func (x *alternating) Delete(ctx context.Context, key string, pre driver.Precondition) error {
	return x.pick().Delete(ctx, key, pre)
}

func (x *alternating) List(ctx context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	return x.pick().List(ctx, prefix, startAfter, limit)
}
