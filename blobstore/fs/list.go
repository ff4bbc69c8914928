//go:build unix

package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

// List walks only the directory the prefix names (up to its last '/') and,
// inside it, only entries that can hold keys after startAfter. Entries are
// visited in key order: a file "o.s" sorts as s and a directory "d.s" as
// s+"/", because every key under it starts with s+"/".
func (c *Bucket) List(ctx context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	base, partial := "", prefix
	dir := c.objects
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base, partial = prefix[:i+1], prefix[i+1:]
		for _, s := range strings.Split(prefix[:i], "/") {
			if len(s) > c.maxSegment {
				// No directory can have this name, so no key has the prefix.
				return driver.ListPage{}, nil
			}
			dir = filepath.Join(dir, dirPrefix+s)
		}
	}
	w := lister{c: c, ctx: ctx, startAfter: startAfter, limit: limit}
	if _, err := w.walk(dir, base, partial); err != nil {
		return driver.ListPage{}, err
	}
	return w.page, nil
}

type lister struct {
	c          *Bucket
	ctx        context.Context
	startAfter string
	limit      int
	page       driver.ListPage
}

type listEntry struct {
	name  string // directory entry name
	seg   string // key segment
	isDir bool
	order string // seg for a file, seg+"/" for a directory
}

// walk lists dir, whose keys all start with base, restricted to segments
// starting with partial. It reports whether the page is full.
func (w *lister) walk(dir, base, partial string) (bool, error) {
	if err := w.ctx.Err(); err != nil {
		return false, err
	}
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, blobstore.Unavailable(err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return false, blobstore.Unavailable(err)
	}
	entries := make([]listEntry, 0, len(names))
	for _, n := range names {
		var e listEntry
		switch {
		case strings.HasPrefix(n, objPrefix):
			e = listEntry{name: n, seg: n[len(objPrefix):]}
			e.order = e.seg
		case strings.HasPrefix(n, dirPrefix):
			e = listEntry{name: n, seg: n[len(dirPrefix):], isDir: true}
			e.order = e.seg + "/"
		default:
			continue // not an entry of the key tree
		}
		if strings.HasPrefix(e.seg, partial) {
			entries = append(entries, e)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].order < entries[j].order })

	for _, e := range entries {
		full := base + e.order
		if e.isDir {
			// Every key below starts with full; if startAfter is past full
			// without extending it, the whole subtree is already listed.
			if full < w.startAfter && !strings.HasPrefix(w.startAfter, full) {
				continue
			}
			done, err := w.walk(filepath.Join(dir, e.name), full, "")
			if done || err != nil {
				return done, err
			}
			continue
		}
		if full <= w.startAfter {
			continue
		}
		if len(w.page.Items) == w.limit {
			w.page.More = true
			return true, nil
		}
		v, err := w.c.readVersion(w.ctx, filepath.Join(dir, e.name), false, false)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted since the directory was read, or a create that never completed
		}
		if err != nil {
			if !errors.Is(err, ErrCorruptObject) {
				err = blobstore.Unavailable(err)
			}
			return false, fmt.Errorf("reading object %q: %w", full, err)
		}
		w.page.Items = append(w.page.Items, driver.Attrs{Key: full, Size: v.size, Token: v.tok})
	}
	return false, nil
}
