package verify

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// deliverNext waits for the one pending request and delivers it.
func deliverNext(t *testing.T, s *Store) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		if len(s.pending) == 1 {
			req := s.pending[0]
			s.pending = nil
			summary, answer := s.perform(req, Deliver)
			s.mu.Unlock()
			answer()
			return req.Label() + " -> " + summary
		}
		s.mu.Unlock()
	}
	t.Fatal("no request arrived")
	return ""
}

// The checker's store serves ranged reads as one scheduled request, with
// the contract's answers for pins and ranges.
func TestStoreRangeReads(t *testing.T) {
	s := newStore(false)
	c := s.As("a")
	s.objects["k"] = object{body: []byte("0123456789"), token: "t1"}
	type out struct {
		body  string
		attrs blobstore.Attrs
		err   error
	}
	read := func(off, n int64, pin blobstore.Token) (out, string) {
		ch := make(chan out, 1)
		go func() {
			rc, attrs, err := c.NewRangeReader(context.Background(), "k", off, n, pin)
			if err != nil {
				ch <- out{err: err}
				return
			}
			b, err := io.ReadAll(rc)
			ch <- out{string(b), attrs, err}
		}()
		line := deliverNext(t, s)
		return <-ch, line
	}
	if o, line := read(3, 4, "t1"); o.err != nil || o.body != "3456" || o.attrs.Size != 10 || o.attrs.Token != "t1" {
		t.Fatalf("pinned range: %+v (%s)", o, line)
	} else if line != `a GetRange k @3+4 pinned t1 -> token t1 4 bytes` {
		t.Errorf("trace line %q", line)
	}
	if o, _ := read(8, -1, ""); o.err != nil || o.body != "89" {
		t.Fatalf("range to the end: %+v", o)
	}
	if o, _ := read(0, 1, "t0"); !errors.Is(o.err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("stale pin: %+v", o)
	}
	if o, _ := read(11, 1, ""); !errors.Is(o.err, blobstore.ErrInvalidRange) {
		t.Fatalf("past the end: %+v", o)
	}
}
