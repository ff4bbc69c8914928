//go:build unix && !linux

package fs

import "os"

// renameNoReplace moves oldpath to newpath unless newpath exists (an error
// matching os.ErrExist). On success oldpath is gone.
func renameNoReplace(oldpath, newpath string) error {
	return linkNoReplace(oldpath, newpath)
}

// datasync flushes the file to stable storage (F_FULLFSYNC on macOS).
func datasync(f *os.File) error { return f.Sync() }

// nameMaxOf: the BSDs and macOS allow 255-byte names on their native
// filesystems.
func nameMaxOf(string) int { return defaultNameMax }
