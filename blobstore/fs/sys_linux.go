package fs

import (
	"errors"
	"os"

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
