//go:build unix

package fs

import (
	"io"
	"os"
)

// fileSystem is what the driver changes the store through: every call that
// creates, writes, syncs, renames or removes an entry of the store goes
// here, so a test can stand in a layer that remembers which writes and
// directory entries were made durable and builds the directory a power cut
// would leave. Reads open files directly. Production uses osFS.
type fileSystem interface {
	OpenFile(name string, flag int, perm os.FileMode) (file, error)
	Rename(oldpath, newpath string) error
	// RenameNoReplace fails with an error matching os.ErrExist when
	// newpath exists.
	RenameNoReplace(oldpath, newpath string) error
	Remove(name string) error
	Mkdir(name string, perm os.FileMode) error
	// SyncDir makes the directory's entries durable.
	SyncDir(dir string) error
	// SyncFS makes everything written to the filesystem holding dir
	// durable, data and entries (syncfs(2)); errors.ErrUnsupported where
	// the system has no such call.
	SyncFS(dir string) error
	// OpenUnnamed makes a file with no name on the filesystem holding dir
	// (O_TMPFILE); errors.ErrUnsupported where the system has none.
	OpenUnnamed(dir string) (file, error)
	// LinkUnnamed gives an unnamed file the name newpath, failing with an
	// error matching unix.EEXIST when newpath exists.
	LinkUnnamed(f file, newpath string) error
}

// file is an open file of a fileSystem.
type file interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	// Datasync makes the file's data, and the metadata needed to read it
	// back, durable.
	Datasync() error
	Fd() uintptr
	Name() string
	Close() error
}

// osFS is the kernel's filesystem.
type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Datasync() error { return datasync(f.File) }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(oldpath, newpath string) error          { return os.Rename(oldpath, newpath) }
func (osFS) RenameNoReplace(oldpath, newpath string) error { return renameNoReplace(oldpath, newpath) }
func (osFS) Remove(name string) error                      { return os.Remove(name) }
func (osFS) Mkdir(name string, perm os.FileMode) error     { return os.Mkdir(name, perm) }
func (osFS) SyncDir(dir string) error                      { return syncDir(dir) }
func (osFS) SyncFS(dir string) error                       { return syncFS(dir) }

func (osFS) OpenUnnamed(dir string) (file, error) {
	f, err := openUnnamed(dir)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) LinkUnnamed(f file, newpath string) error { return linkUnnamed(f.Fd(), newpath) }
