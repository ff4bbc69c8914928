//go:build unix

package fs

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// On a full device every write fails before any effect, as a retryable
// outage that says the store is full; reads still work.
func TestFullDeviceSaysStoreFull(t *testing.T) {
	dir, err := testservers.SmallDisk(t, 256<<10)
	if err != nil {
		t.Skipf("no real full device here: %v (the sidecar and seal tests inject the same fault)", err)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.CreateIfAbsent(ctx, "settings/fencing", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	// Fill it with large objects, then small ones, until not even a
	// small one fits.
	var werr error
	n := 0
	for _, size := range []int{16 << 10, 1} {
		werr = nil
		for i := 0; i < 100000 && werr == nil; i++ {
			n++
			_, werr = c.Put(ctx, "fill/"+strconv.Itoa(n), make([]byte, size))
		}
	}
	if werr == nil {
		t.Fatal("the 256 KiB device never filled up")
	}
	if !errors.Is(werr, blobstore.ErrUnavailable) || !strings.Contains(werr.Error(), "store full") {
		t.Fatalf("write on a full device: %v, want unavailable naming a full store", werr)
	}
	_, err = c.CreateIfAbsent(ctx, "fence/k", []byte("x"))
	if !errors.Is(err, blobstore.ErrUnavailable) || !strings.Contains(err.Error(), "store full") {
		t.Fatalf("create on a full device: %v", err)
	}
	if o, err := c.Get(ctx, "settings/fencing"); err != nil || string(o.Body) != "kept" {
		t.Fatalf("read on a full device: %v", err)
	}
}
