//go:build unix

package fs

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/conformance"
)

// Both suites wait on fsync most of the time, so they run side by side.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container {
		c, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// Two containers on one directory behave as one store, as two processes
// sharing it would.
func TestConformanceSharedDirectory(t *testing.T) {
	t.Parallel()
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container {
		dir := t.TempDir()
		a, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return &alternating{a: a, b: b}
	})
}

// alternating sends each call to one of two containers in turn, so reads see
// writes made through the other and racing writers contend on flock rather
// than on one process's key mutex.
type alternating struct {
	a, b *Container
	n    atomic.Uint64
}

func (x *alternating) pick() *Container {
	if x.n.Add(1)%2 == 0 {
		return x.a
	}
	return x.b
}

func (x *alternating) Get(ctx context.Context, key string) (blobstore.Object, error) {
	return x.pick().Get(ctx, key)
}

func (x *alternating) Stat(ctx context.Context, key string) (blobstore.Attrs, error) {
	return x.pick().Stat(ctx, key)
}

func (x *alternating) Put(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	return x.pick().Put(ctx, key, body)
}

func (x *alternating) CreateIfAbsent(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	return x.pick().CreateIfAbsent(ctx, key, body)
}

func (x *alternating) CompareAndSwap(ctx context.Context, key string, expected blobstore.Token, body []byte) (blobstore.Token, error) {
	return x.pick().CompareAndSwap(ctx, key, expected, body)
}

func (x *alternating) Delete(ctx context.Context, key string) error {
	return x.pick().Delete(ctx, key)
}

func (x *alternating) DeleteIfMatch(ctx context.Context, key string, expected blobstore.Token) error {
	return x.pick().DeleteIfMatch(ctx, key, expected)
}

func (x *alternating) List(ctx context.Context, prefix, startAfter string, limit int) (blobstore.ListPage, error) {
	return x.pick().List(ctx, prefix, startAfter, limit)
}

func (x *alternating) Capabilities() blobstore.Capabilities { return x.a.Capabilities() }
func (x *alternating) String() string                       { return x.a.String() }
func (x *alternating) Close() error                         { return errors.Join(x.a.Close(), x.b.Close()) }
