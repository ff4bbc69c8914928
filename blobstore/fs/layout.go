//go:build unix

package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/shardfence/shardfence/blobstore"
)

// Entry names in the object tree. Every entry carries one of these prefixes,
// so no key segment can name "." or "..", a key's file never collides with
// another key's directory, and nothing else in the tree is taken for a key.
const (
	objPrefix = "o."
	dirPrefix = "d."
)

// defaultNameMax is the longest directory entry name on the filesystems
// this driver targets (ext4, xfs, btrfs, tmpfs, overlayfs); Open asks the
// filesystem where it can, since some allow less (eCryptfs: 143).
const defaultNameMax = 255

// objectPath is where one key lives.
type objectPath struct {
	dirs []string // the key's directories, outermost first (may be empty)
	dir  string   // the directory holding the file
	file string
}

// pathOf maps a validated key to its file. Segments too long for one
// directory entry are refused with ErrInvalidKey.
func (c *Bucket) pathOf(key string) (objectPath, error) {
	segs := strings.Split(key, "/")
	p := objectPath{dir: c.objects}
	for i, s := range segs {
		if len(s) > c.maxSegment {
			return objectPath{}, fmt.Errorf("%w: segment %d is %d bytes; this filesystem store allows at most %d bytes per '/'-separated segment", blobstore.ErrInvalidKey, i+1, len(s), c.maxSegment)
		}
		if i < len(segs)-1 {
			p.dir = filepath.Join(p.dir, dirPrefix+s)
			p.dirs = append(p.dirs, p.dir)
		}
	}
	p.file = filepath.Join(p.dir, objPrefix+segs[len(segs)-1])
	return p, nil
}

// ensureDirs creates the key's directories and makes each one's entry
// durable in its parent before any object is published inside it: a file
// fsynced into a directory whose own entry is lost in a crash is lost too.
func (c *Bucket) ensureDirs(dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	if _, ok := c.durableDirs.Load(dirs[len(dirs)-1]); ok {
		return nil
	}
	for _, d := range dirs {
		if _, ok := c.durableDirs.Load(d); ok {
			continue
		}
		if err := c.fsys.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return mapNameErr(err)
		}
	}
	// Another process may have created a directory and not yet fsynced its
	// parent, so the parent is fsynced whoever created the entry.
	for _, d := range dirs {
		if _, ok := c.durableDirs.Load(d); ok {
			continue
		}
		if err := c.fsys.SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
		c.durableDirs.Store(d, struct{}{})
	}
	return nil
}

// mapNameErr turns a name the filesystem refuses into ErrInvalidKey.
func mapNameErr(err error) error {
	if isNameTooLong(err) {
		return fmt.Errorf("%w: path too long for the filesystem: %w", blobstore.ErrInvalidKey, err)
	}
	return err
}

// syncDir fsyncs a directory, making its entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkdirAllDurable creates dir and any missing ancestors, fsyncing the parent
// of each directory it creates.
func mkdirAllDurable(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory", ErrBadLayout, dir)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func isNameTooLong(err error) bool { return errors.Is(err, syscall.ENAMETOOLONG) }
