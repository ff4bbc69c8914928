//go:build !linux

package testservers

import (
	"errors"
	"os"
	"testing"
)

// SmallDisk needs Linux; see disk_linux.go.
func SmallDisk(t testing.TB, size int64) (string, error) {
	return "", errors.ErrUnsupported
}

// MountSmallDisk needs Linux's tmpfs.
func MountSmallDisk(t testing.TB, dir string, size int64) error { return errors.ErrUnsupported }

// SetReadOnly removes the write permission of every folder under dir
// (effective for a non-root user); undo restores it.
func SetReadOnly(dir string) (undo func() error, err error) {
	if os.Geteuid() == 0 {
		return nil, errors.New("root ignores permissions")
	}
	return chmodTree(dir)
}
