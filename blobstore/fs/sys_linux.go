package fs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// renameNoReplace moves oldpath to newpath unless newpath exists (an error
// matching os.ErrExist). On success oldpath is gone.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// The filesystem lacks RENAME_NOREPLACE (NFS, some FUSE): link(2)
		// refuses an existing target just as atomically.
		return linkNoReplace(oldpath, newpath)
	}
	if err != nil {
		return &os.LinkError{Op: "renameat2", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// datasync flushes the file's data and the metadata needed to read it back.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// nameMaxOf asks the filesystem holding dir for its longest entry name.
func nameMaxOf(dir string) int {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Namelen <= 0 || st.Namelen > defaultNameMax {
		return defaultNameMax
	}
	return int(st.Namelen)
}

// syncFS makes everything written to the filesystem holding dir durable,
// with one device flush where the filesystem needs one. Before Linux 5.8
// syncfs(2) did not report writeback errors, so there it is unsupported
// and callers sync each file.
func syncFS(dir string) error {
	if !syncfsReportsErrors() {
		return errors.ErrUnsupported
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		err := unix.Syncfs(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// openUnnamed makes a file with no name in dir's filesystem.
func openUnnamed(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir+"/(unnamed)"), nil
}

// linkUnnamed names the unnamed file open as fd newpath: through
// /proc/self/fd, as open(2) documents for O_TMPFILE, or by AT_EMPTY_PATH
// where /proc is not mounted.
func linkUnnamed(fd uintptr, newpath string) error {
	err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(fd)), unix.AT_FDCWD, newpath, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		if _, serr := os.Stat("/proc/self/fd"); serr != nil {
			err = unix.Linkat(int(fd), "", unix.AT_FDCWD, newpath, unix.AT_EMPTY_PATH)
		}
	}
	if err != nil {
		return &os.LinkError{Op: "linkat", Old: "(unnamed)", New: newpath, Err: err}
	}
	return nil
}

var syncfsReportsErrors = sync.OnceValue(func() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 5 || major == 5 && minor >= 8
})
