package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// pattern is n bytes that differ at every offset modulo 251, filled from
// seed, so a range read at the wrong offset or of another version shows.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ seed
	}
	return b
}

// readRange reads a whole range stream and closes it.
func readRange(ctx context.Context, c *blobstore.Container, key string, off, n int64, pin blobstore.Token) ([]byte, blobstore.Attrs, error) {
	rc, attrs, err := c.NewRangeReader(ctx, key, off, n, pin)
	if err != nil {
		return nil, attrs, err
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	return body, attrs, err
}

func checkRangeReads(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "range/object"
	body := pattern(300<<10, 7)
	tok, err := c.Put(ctx, key, body)
	mustOK(t, err, "Put")
	size := int64(len(body))

	rc, attrs, err := c.NewReader(ctx, key)
	mustOK(t, err, "NewReader")
	got, err := io.ReadAll(rc)
	mustOK(t, err, "reading the whole stream")
	mustOK(t, rc.Close(), "Close")
	if !bytes.Equal(got, body) {
		t.Errorf("NewReader: %s, want %s", describeBody(got), describeBody(body))
	}
	if attrs.Size != size || attrs.Token != tok {
		t.Errorf("NewReader attrs: size %d token %q, want %d and the Put's %q", attrs.Size, attrs.Token, size, tok)
	}

	for _, r := range []struct {
		off, n   int64
		from, to int64 // the bytes of body expected
	}{
		{0, 10, 0, 10},
		{100, 1000, 100, 1100},
		{size - 5, 100, size - 5, size}, // runs past the end: cut there
		{size - 5, -1, size - 5, size},
		{1 << 10, -1, 1 << 10, size},
		{size, -1, size, size}, // at the end: empty
		{size, 10, size, size},
		{7, 0, 7, 7}, // zero length
	} {
		what := fmt.Sprintf("range offset %d length %d of a %d-byte object", r.off, r.n, size)
		got, attrs, err := readRange(ctx, c, key, r.off, r.n, "")
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if !bytes.Equal(got, body[r.from:r.to]) {
			t.Errorf("%s: %s, want bytes %d..%d (%s)", what, describeBody(got), r.from, r.to, describeBody(body[r.from:r.to]))
		}
		if attrs.Size != size || attrs.Token != tok {
			t.Errorf("%s: attrs size %d token %q, want the whole object's %d and %q", what, attrs.Size, attrs.Token, size, tok)
		}
	}

	_, _, err = c.NewRangeReader(ctx, key, size+1, 1, "")
	expectErr(t, err, blobstore.ErrInvalidRange, "GetRange", key, "a range starting past the end")
	_, _, err = c.NewRangeReader(ctx, key, -1, 1, "")
	expectErr(t, err, blobstore.ErrInvalidRange, "GetRange", key, "a negative offset")
	_, _, err = c.NewRangeReader(ctx, "range/missing", 0, -1, "")
	expectErr(t, err, blobstore.ErrNotFound, "GetRange", "range/missing", "a stream of a missing key")
	_, _, err = c.NewRangeReader(ctx, "range/missing", 0, -1, tok)
	expectErr(t, err, blobstore.ErrNotFound, "GetRange", "range/missing", "a pinned stream of a missing key")

	empty := "range/empty"
	etok, err := c.Put(ctx, empty, nil)
	mustOK(t, err, "Put of an empty object")
	for _, r := range [][2]int64{{0, -1}, {0, 10}, {0, 0}} {
		got, attrs, err := readRange(ctx, c, empty, r[0], r[1], etok)
		if err != nil || len(got) != 0 || attrs.Size != 0 || attrs.Token != etok {
			t.Errorf("range %d/%d of an empty object: %d bytes, attrs %+v, %v; want nothing, size 0, the Put's token", r[0], r[1], len(got), attrs, err)
		}
	}
	_, _, err = c.NewRangeReader(ctx, empty, 1, -1, "")
	expectErr(t, err, blobstore.ErrInvalidRange, "GetRange", empty, "a range past the end of an empty object")
}

func checkRangePinned(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "range/pinned"
	v1 := pattern(4<<20, 1)
	t1, err := c.Put(ctx, key, v1)
	mustOK(t, err, "Put v1")
	st, err := c.Stat(ctx, key)
	mustOK(t, err, "Stat")
	if st.Token != t1 {
		t.Errorf("Stat token %q, Put returned %q", st.Token, t1)
	}
	got, _, err := readRange(ctx, c, key, 10, 20, t1)
	mustOK(t, err, "a range pinned to the current version")
	if !bytes.Equal(got, v1[10:30]) {
		t.Errorf("pinned range: %s", describeBody(got))
	}

	// A stream opened on v1 while v2 replaces it: v1's bytes or an error,
	// never a mix.
	rc, _, err := c.NewRangeReader(ctx, key, 0, -1, t1)
	mustOK(t, err, "open a pinned stream of v1")
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(rc, head)
	mustOK(t, err, "read the first MiB of v1")
	v2 := pattern(4<<20, 2)
	t2, err := c.Put(ctx, key, v2)
	mustOK(t, err, "Put v2 while a stream of v1 is open")
	rest, rerr := io.ReadAll(rc)
	_ = rc.Close()
	if rerr == nil {
		if whole := append(head, rest...); !bytes.Equal(whole, v1) {
			t.Errorf("a stream of v1 replaced mid-read by v2 returned %s: bytes of another version, not v1's", describeBody(whole))
		}
	} else if !errors.Is(rerr, blobstore.ErrPreconditionFailed) && !errors.Is(rerr, blobstore.ErrNotFound) && !errors.Is(rerr, blobstore.ErrUnavailable) {
		t.Errorf("a stream of v1 replaced mid-read failed with %q: want v1's bytes, or ErrPreconditionFailed, ErrNotFound or ErrUnavailable", rerr)
	}

	_, _, err = c.NewRangeReader(ctx, key, 0, 10, t1)
	expectErr(t, err, blobstore.ErrPreconditionFailed, "GetRange", key, "a range pinned to a replaced version")
	got, attrs, err := readRange(ctx, c, key, 5, 10, "")
	mustOK(t, err, "an unpinned range after the replace")
	if !bytes.Equal(got, v2[5:15]) || attrs.Token != t2 {
		t.Errorf("unpinned range after the replace: %s token %q, want v2's bytes and %q", describeBody(got), attrs.Token, t2)
	}
	got, _, err = readRange(ctx, c, key, 5, 10, t2)
	mustOK(t, err, "a range pinned to the new version")
	if !bytes.Equal(got, v2[5:15]) {
		t.Errorf("range pinned to v2: %s", describeBody(got))
	}
	_, _, err = c.NewRangeReader(ctx, key, 0, 10, "*")
	expectErr(t, err, blobstore.ErrPreconditionFailed, "GetRange", key, `a range pinned to "*"`)

	mustOK(t, c.Delete(ctx, key), "Delete")
	_, _, err = c.NewRangeReader(ctx, key, 0, 10, t2)
	expectErr(t, err, blobstore.ErrNotFound, "GetRange", key, "a range pinned to a deleted version")
}

func checkRangeCancel(t T, c *blobstore.Container) {
	key := "range/cancel"
	body := pattern(32<<20, 3)
	_, err := c.Put(t.Context(), key, body)
	mustOK(t, err, "Put 32 MiB")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rc, _, err := c.NewReader(ctx, key)
	mustOK(t, err, "NewReader")
	defer rc.Close()
	buf := make([]byte, 64<<10)
	_, err = io.ReadFull(rc, buf)
	mustOK(t, err, "read the first 64 KiB")
	cancel()
	done := make(chan error, 1)
	go func() {
		n, err := io.Copy(io.Discard, rc)
		if err == nil && n+int64(len(buf)) == int64(len(body)) {
			err = io.EOF // the whole body arrived: the cancel was not seen
		}
		done <- err
	}()
	select {
	case err := <-done:
		switch {
		case err == io.EOF:
			t.Errorf("a stream whose context was cancelled after 64 KiB of 32 MiB returned the whole body")
		case err == nil:
			t.Errorf("a stream whose context was cancelled ended without an error and short of the body")
		default:
			expectErr(t, err, context.Canceled, "GetRange", key, "reading a stream after its context was cancelled")
		}
	case <-time.After(30 * time.Second):
		t.Errorf("reading a stream whose context was cancelled did not end in 30 s")
	}
}

// heapMeasure serializes the checks that measure the process's heap:
// suites run in parallel in one test process (one per store, or several
// over one directory), and another suite's 128 MiB body counted against
// this stream's.
var heapMeasure sync.Mutex

func checkRangeLarge(t T, c *blobstore.Container) {
	heapMeasure.Lock()
	defer heapMeasure.Unlock()
	ctx := t.Context()
	key := "range/large"
	const size = 128 << 20
	body := pattern(size, 9)
	want := sha256.Sum256(body)
	tok, err := c.Put(ctx, key, body)
	mustOK(t, err, "Put 128 MiB")
	body = nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc

	rc, attrs, err := c.NewRangeReader(ctx, key, 0, -1, tok)
	mustOK(t, err, "NewRangeReader over 128 MiB")
	defer rc.Close()
	if attrs.Size != size {
		t.Errorf("attrs size %d, want %d", attrs.Size, size)
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := rc.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if n%(8<<20) < int64(k) {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		if err == io.EOF {
			break
		}
		mustOK(t, err, fmt.Sprintf("reading at %d", n))
	}
	if n != size || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("streamed %d bytes with sha256 %x, want %d bytes with %x", n, h.Sum(nil), size, want)
	}
	if grew := int64(peak) - int64(base); grew > size/2 {
		t.Errorf("the heap grew by %d MiB while streaming a %d MiB object: the stream holds the body", grew>>20, size>>20)
	} else {
		t.Logf("heap grew by at most %d MiB while streaming %d MiB", max(grew, 0)>>20, size>>20)
	}
}

// rangeCase is one ranged read and what it must give: the bytes from..to
// of the current version, or an error of the kind want.
type rangeCase struct {
	off, n   int64
	pin      blobstore.Token
	from, to int64
	want     error
}

// checkRangeEdges reads the corners of the range contract, the ones a
// driver cannot send to its store as asked (no HTTP Range names zero bytes
// or starts at the end), against an object replaced once: every answer must
// be the current version's, or the kind of error the contract names, with
// the pin weighed before the range.
func checkRangeEdges(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "range/edges"
	old, err := c.Put(ctx, key, pattern(1200, 4))
	mustOK(t, err, "Put v1")
	body := pattern(1000, 5)
	cur, err := c.Put(ctx, key, body)
	mustOK(t, err, "Put v2")
	size := int64(len(body))
	cases := []rangeCase{
		{off: 0, n: 1, to: 1},                                  // the first byte alone
		{off: size - 5, n: 5, from: size - 5, to: size},        // up to the last byte exactly
		{off: 3, n: math.MaxInt64, from: 3, to: size},          // a length whose end overflows
		{off: 0, n: math.MaxInt64, to: size},                   // the same from the start
		{off: size, n: -1, pin: cur, from: size, to: size},     // at the end, pinned
		{off: size, n: 0, from: size, to: size},                // nothing, at the end
		{off: 3, n: 0, pin: cur, from: 3, to: 3},               // nothing, pinned
		{off: size + 1, n: 0, want: blobstore.ErrInvalidRange}, // nothing, past the end
		{off: size + 1, n: -1, pin: cur, want: blobstore.ErrInvalidRange},
		{off: size + 1, n: math.MaxInt64, want: blobstore.ErrInvalidRange},
		{off: size, n: -1, pin: old, want: blobstore.ErrPreconditionFailed},
		{off: 3, n: 0, pin: old, want: blobstore.ErrPreconditionFailed},
		{off: size + 2, n: 5, pin: old, want: blobstore.ErrPreconditionFailed}, // inside v1, past v2's end
		{off: size + 1, n: 0, pin: old, want: blobstore.ErrPreconditionFailed},
	}
	for _, r := range cases {
		checkRangeCase(t, c, key, r, body, cur)
	}
	for _, r := range []rangeCase{
		{n: 0, want: blobstore.ErrNotFound},
		{n: 0, pin: cur, want: blobstore.ErrNotFound},
		{off: 5, n: -1, pin: cur, want: blobstore.ErrNotFound},
		{off: 5, n: 1, want: blobstore.ErrNotFound},
	} {
		checkRangeCase(t, c, "range/edges-missing", r, nil, "")
	}

	empty := "range/edges-empty"
	etok, err := c.Put(ctx, empty, nil)
	mustOK(t, err, "Put of an empty object")
	for _, r := range []rangeCase{
		{n: -1},
		{n: 1},
		{n: math.MaxInt64},
		{n: 0, pin: etok},
		{off: 1, n: 0, want: blobstore.ErrInvalidRange},
		{off: 1, n: 1, pin: etok, want: blobstore.ErrInvalidRange},
		{n: -1, pin: cur, want: blobstore.ErrPreconditionFailed},
		{n: 0, pin: cur, want: blobstore.ErrPreconditionFailed},
	} {
		checkRangeCase(t, c, empty, r, nil, etok)
	}
}

// checkRangeCase reads one range of key, whose current version is body
// with token tok, and checks the answer against r.
func checkRangeCase(t T, c *blobstore.Container, key string, r rangeCase, body []byte, tok blobstore.Token) {
	t.Helper()
	what := fmt.Sprintf("range offset %d length %d of %s pinned to %q", r.off, r.n, key, r.pin)
	got, attrs, err := readRange(t.Context(), c, key, r.off, r.n, r.pin)
	if r.want != nil {
		expectErr(t, err, r.want, "GetRange", key, what)
		return
	}
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if want := body[r.from:r.to]; !bytes.Equal(got, want) {
		t.Errorf("%s: %s, want bytes %d..%d (%s)", what, describeBody(got), r.from, r.to, describeBody(want))
	}
	if attrs.Size != int64(len(body)) || attrs.Token != tok {
		t.Errorf("%s: attrs size %d token %q, want the current version's %d and %q", what, attrs.Size, attrs.Token, len(body), tok)
	}
}
