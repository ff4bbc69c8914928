//go:build unix && !linux

package fs

import (
	"errors"
	"os"
)

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

// syncFS: no syncfs(2) here; the create log syncs each file instead.
func syncFS(string) error { return errors.ErrUnsupported }

// openUnnamed: no O_TMPFILE here; creates make their own files.
func openUnnamed(string) (*os.File, error) { return nil, errors.ErrUnsupported }

func linkUnnamed(uintptr, string) error { return errors.ErrUnsupported }
