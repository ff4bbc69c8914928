package testservers

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// chmodTree removes the write permission of every folder under dir, so no
// file can be created, renamed or removed there; undo puts it back.
func chmodTree(dir string) (func() error, error) {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o500); err != nil {
			return nil, err
		}
	}
	return func() error {
		for _, d := range slices.Backward(dirs) {
			if err := os.Chmod(d, 0o700); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
