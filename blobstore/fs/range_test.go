//go:build unix

package fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
)

// A stream keeps reading the inode it opened: a replace through another
// bucket on the directory (as another process would) and then a delete
// while it is open change nothing it returns, pinned or not. New streams
// see the new state.
func TestStreamOutlivesReplaceAndDelete(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	a, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	v1 := bytes.Repeat([]byte("version one "), 100_000)
	t1, err := a.Put(ctx, "k", v1)
	if err != nil {
		t.Fatal(err)
	}
	for _, pinned := range []bool{false, true} {
		var pin blobstore.Token
		if pinned {
			pin = t1
		}
		whole, attrs, err := a.NewRangeReader(ctx, "k", 0, -1, pin)
		if err != nil {
			t.Fatal(err)
		}
		if attrs.Token != t1 || attrs.Size != int64(len(v1)) {
			t.Fatalf("attrs %+v, want token %s size %d", attrs, t1, len(v1))
		}
		part, _, err := a.NewRangeReader(ctx, "k", 1000, 50_000, pin)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4096)
		if _, err := io.ReadFull(whole, head); err != nil {
			t.Fatal(err)
		}
		t2, err := b.Put(ctx, "k", bytes.Repeat([]byte("v2"), 300_000))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.NewRangeReader(ctx, "k", 0, 1, t1); !errors.Is(err, blobstore.ErrPreconditionFailed) {
			t.Fatalf("a new stream pinned to the replaced version: %v", err)
		}
		if err := b.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.NewRangeReader(ctx, "k", 0, 1, t2); !errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("a new stream pinned to a deleted version: %v", err)
		}
		rest, err := io.ReadAll(whole)
		if err != nil {
			t.Fatalf("pin %q: reading on after the replace and delete: %v", pin, err)
		}
		if got := append(head, rest...); !bytes.Equal(got, v1) {
			t.Fatalf("pin %q: the whole stream returned %d bytes that are not v1", pin, len(got))
		}
		got, err := io.ReadAll(part)
		if err != nil || !bytes.Equal(got, v1[1000:51000]) {
			t.Fatalf("pin %q: the range stream returned %d bytes (equal to v1's: %v), %v", pin, len(got), bytes.Equal(got, v1[1000:51000]), err)
		}
		if err := whole.Close(); err != nil {
			t.Fatal(err)
		}
		if err := part.Close(); err != nil {
			t.Fatal(err)
		}
		if t1, err = a.Put(ctx, "k", v1); err != nil {
			t.Fatal(err)
		}
	}
}

// A stream of a damaged file fails with ErrCorruptObject: a bad header or
// size when it opens, a body checksum mismatch at the end of a whole
// stream, a file cut after the stream opened when the range runs short.
func TestCorruptObjectStreams(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	// Large enough for a single-version file, whose streams pread the
	// open file (a slot file's are served from a consistent read).
	body := strings.Repeat("0123456789", 20000)
	mustPut(t, c, "k", body)
	p, err := c.b.pathOf("k")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p.file)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 0xff
	if err := os.WriteFile(p.file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rc, _, err := c.NewReader(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrCorruptObject) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("whole stream of a flipped byte: %v", err)
	}
	rc.Close()
	// A range that misses the damage cannot see it.
	got, _, err := readAll(ctx, c, "k", 10, 20)
	if err != nil || got != body[10:30] {
		t.Fatalf("range before the flipped byte: %q, %v", got, err)
	}

	// Cut in place while a stream is open (never done by the driver).
	rc, _, err = c.NewRangeReader(ctx, "k", 100, -1, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p.file, int64(len(raw)-500)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrCorruptObject) {
		t.Fatalf("range stream of a file cut while open: %v", err)
	}
	rc.Close()
	if _, _, err := c.NewRangeReader(ctx, "k", 0, 1, ""); !errors.Is(err, ErrCorruptObject) {
		t.Fatalf("opening a stream of a truncated file: %v", err)
	}
}

func readAll(ctx context.Context, c testStore, key string, off, n int64) (string, blobstore.Attrs, error) {
	rc, attrs, err := c.NewRangeReader(ctx, key, off, n, "")
	if err != nil {
		return "", attrs, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), attrs, err
}
