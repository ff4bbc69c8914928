//go:build unix

package fs

import "os"

// linkNoReplace publishes oldpath at newpath with link(2), which fails with
// EEXIST on an existing target, then drops the old name. If dropping it
// fails, the leftover name is an unlocked temporary file that
// RemoveStaleTemp removes later.
func linkNoReplace(oldpath, newpath string) error {
	if err := os.Link(oldpath, newpath); err != nil {
		return err
	}
	_ = os.Remove(oldpath)
	return nil
}
