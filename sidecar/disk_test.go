package sidecar

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// smallDisk is a real 4 MiB device for store-fault tests (see
// testservers.SmallDisk).
func smallDisk(t *testing.T) (string, error) {
	return testservers.SmallDisk(t, 4<<20)
}

func setReadOnly(dir string) (func() error, error) { return testservers.SetReadOnly(dir) }

func openFS(t *testing.T, dir string) *blobstore.Container {
	t.Helper()
	c, err := fs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fillDevice fills the device of dir with a file until it is full; the
// returned func removes the file.
func fillDevice(t *testing.T, dir string) func() {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, os.ErrClosed) {
				break
			}
			t.Fatal(err)
		}
	}
	// Small writes too, until not even a block is left.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	_ = f.Close()
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}
