package testservers

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of size bytes on a temporary folder and
// unmounts it when the test ends: a real device that fills up. It needs
// root with CAP_SYS_ADMIN; otherwise it returns an error and the caller
// falls back to injected faults.
func SmallDisk(t testing.TB, size int64) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := MountSmallDisk(t, dir, size); err != nil {
		return "", err
	}
	return dir, nil
}

// MountSmallDisk mounts a tmpfs of size bytes on the existing folder dir,
// unmounted when the test ends.
func MountSmallDisk(t testing.TB, dir string, size int64) error {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return fmt.Errorf("mount a tmpfs (needs root with CAP_SYS_ADMIN): %w", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return nil
}

// SetReadOnly makes the device of a SmallDisk refuse writes (a read-only
// remount, EROFS) or, on a plain folder of a non-root user, removes the
// write permission of every folder under dir (EACCES). undo restores
// writes.
func SetReadOnly(dir string) (undo func() error, err error) {
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err == nil {
		return func() error { return syscall.Mount("", dir, "", syscall.MS_REMOUNT, "") }, nil
	}
	if os.Geteuid() == 0 {
		return nil, fmt.Errorf("cannot make %s read-only: not a SmallDisk mount, and root ignores permissions", dir)
	}
	return chmodTree(dir)
}
