package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore/driver"
)

// answer is a scripted reply to one request of a ranged read: a GET's
// answer, a Stat's attributes, or the error either failed with.
type answer struct {
	get  driver.RangeAnswer
	stat Attrs
	err  error
}

// got is a GET's answer: version tok, a body of length bytes from start,
// of an object of size bytes.
func got(tok Token, start, size, length int64) answer {
	return answer{get: driver.RangeAnswer{Token: tok, Start: start, Size: size, Length: length}}
}

func stat(tok Token, size int64) answer { return answer{stat: Attrs{Size: size, Token: tok}} }

func failed(err error) answer { return answer{err: err} }

// describe is a step as the table spells it.
func describe(s rangeStep) string {
	switch s.kind {
	case stepGet:
		if s.rng.Whole() {
			return "GET whole"
		}
		return "GET " + s.rng.Header()
	case stepStat:
		return "STAT"
	case stepStream:
		return fmt.Sprintf("STREAM %s/%d skip %d serve %d", s.attrs.Token, s.attrs.Size, s.skip, s.n)
	case stepEmpty:
		return fmt.Sprintf("EMPTY %s/%d", s.attrs.Token, s.attrs.Size)
	}
	for _, k := range []error{ErrInvalidRange, ErrPreconditionFailed, ErrNotFound, ErrUnavailable} {
		if errors.Is(s.err, k) {
			return "FAIL " + k.Error()
		}
	}
	return "FAIL other: " + s.err.Error()
}

// TestRangePlan walks the range policy through scripted store answers: the
// requests it sends, in order, and what the read ends with.
func TestRangePlan(t *testing.T) {
	replaced := fmt.Errorf("%w: 412", ErrPreconditionFailed)
	for _, tc := range []struct {
		name           string
		offset, length int64
		pin            Token
		answers        []answer
		want           string
	}{
		{"the whole object, with no Range", 0, -1, "", []answer{got("v1", 0, 10, 10)},
			"GET whole, STREAM v1/10 skip 0 serve 10"},
		{"a range inside", 2, 3, "", []answer{got("v1", 2, 10, 3)},
			"GET bytes=2-4, STREAM v1/10 skip 0 serve 3"},
		{"a range past the end is cut there", 8, 100, "", []answer{got("v1", 8, 10, 2)},
			"GET bytes=8-107, STREAM v1/10 skip 0 serve 2"},
		{"to the end from inside", 4, -1, "", []answer{got("v1", 4, 10, 6)},
			"GET bytes=4-, STREAM v1/10 skip 0 serve 6"},
		{"a length whose end overflows is to the end", 3, math.MaxInt64, "", []answer{got("v1", 3, 10, 7)},
			"GET bytes=3-, STREAM v1/10 skip 0 serve 7"},
		{"the first byte", 0, 1, "", []answer{got("v1", 0, 10, 1)},
			"GET bytes=0-0, STREAM v1/10 skip 0 serve 1"},
		{"pinned to the version served", 2, 3, "v1", []answer{got("v1", 2, 10, 3)},
			"GET bytes=2-4, STREAM v1/10 skip 0 serve 3"},

		{"zero bytes: a Stat, no GET", 3, 0, "", []answer{stat("v1", 10)},
			"STAT, EMPTY v1/10"},
		{"zero bytes at the end", 10, 0, "", []answer{stat("v1", 10)},
			"STAT, EMPTY v1/10"},
		{"zero bytes past the end", 11, 0, "", []answer{stat("v1", 10)},
			"STAT, FAIL invalid range"},
		{"zero bytes pinned to a replaced version", 3, 0, "v0", []answer{stat("v1", 10)},
			"STAT, FAIL precondition failed"},
		{"zero bytes pinned past the end of a replaced version", 11, 0, "v0", []answer{stat("v1", 10)},
			"STAT, FAIL precondition failed"},
		{"zero bytes of a missing key", 0, 0, "v1", []answer{failed(ErrNotFound)},
			"STAT, FAIL object not found"},

		{"416 at the end: an empty stream", 10, -1, "", []answer{failed(ErrInvalidRange), stat("v1", 10)},
			"GET bytes=10-, STAT, EMPTY v1/10"},
		{"416 at the end, pinned", 10, 5, "v1", []answer{failed(ErrInvalidRange), stat("v1", 10)},
			"GET bytes=10-14, STAT, EMPTY v1/10"},
		{"416 on an empty object", 0, 10, "", []answer{failed(ErrInvalidRange), stat("v1", 0)},
			"GET bytes=0-9, STAT, EMPTY v1/0"},
		{"416 past the end", 11, 5, "", []answer{failed(ErrInvalidRange), stat("v1", 10)},
			"GET bytes=11-15, STAT, FAIL invalid range"},
		{"416 pinned to a replaced version", 10, -1, "v0", []answer{failed(ErrInvalidRange), stat("v1", 10)},
			"GET bytes=10-, STAT, FAIL precondition failed"},
		{"416, then the object grew: the GET again", 10, 2, "", []answer{failed(ErrInvalidRange), stat("v2", 20), got("v2", 10, 20, 2)},
			"GET bytes=10-11, STAT, GET bytes=10-11, STREAM v2/20 skip 0 serve 2"},
		{"416 while the object keeps changing", 10, 2, "", []answer{
			failed(ErrInvalidRange), stat("v2", 20), failed(ErrInvalidRange), stat("v3", 30), failed(ErrInvalidRange), stat("v4", 40)},
			"GET bytes=10-11, STAT, GET bytes=10-11, STAT, GET bytes=10-11, STAT, FAIL store unavailable"},
		{"416, then the key is gone", 10, -1, "", []answer{failed(ErrInvalidRange), failed(ErrNotFound)},
			"GET bytes=10-, STAT, FAIL object not found"},

		{"a pinned GET refused, the key missing", 0, 5, "v1", []answer{failed(replaced), failed(ErrNotFound)},
			"GET bytes=0-4, STAT, FAIL object not found"},
		{"a pinned GET refused, the object replaced", 0, 5, "v1", []answer{failed(replaced), stat("v2", 10)},
			"GET bytes=0-4, STAT, FAIL precondition failed"},
		{"an unpinned precondition failure is passed on", 0, 5, "", []answer{failed(replaced)},
			"GET bytes=0-4, FAIL precondition failed"},
		{"a pinned GET served another version", 0, 5, "v1", []answer{got("v2", 0, 10, 5)},
			"GET bytes=0-4, FAIL precondition failed"},
		{"a missing key", 0, -1, "", []answer{failed(ErrNotFound)},
			"GET whole, FAIL object not found"},
		{"an unavailable store", 0, -1, "", []answer{failed(Unavailable(errors.New("503")))},
			"GET whole, FAIL store unavailable"},

		{"a store that ignored the Range: the bytes before are dropped", 2, 3, "", []answer{got("v1", 0, 10, 10)},
			"GET bytes=2-4, STREAM v1/10 skip 2 serve 3"},
		{"a store that ignored the Range past the end", 11, 1, "", []answer{got("v1", 0, 10, 10)},
			"GET bytes=11-11, FAIL invalid range"},
		{"an answer without the size: a Stat gives it", 0, -1, "", []answer{got("v1", 0, -1, -1), stat("v1", 10)},
			"GET whole, STAT, STREAM v1/10 skip 0 serve 10"},
		{"an answer without the size, replaced before the Stat", 0, -1, "", []answer{got("v1", 0, -1, -1), stat("v2", 12), got("v2", 0, 12, 12)},
			"GET whole, STAT, GET whole, STREAM v2/12 skip 0 serve 12"},
		{"an answer from a later byte", 2, 3, "", []answer{got("v1", 5, 10, 3)},
			"GET bytes=2-4, FAIL other: the store answered the range from byte 2 with bytes from 5"},
		{"an answer shorter than the range", 2, 5, "", []answer{got("v1", 2, 10, 2)},
			"GET bytes=2-6, FAIL other: the store answered bytes 2..7 of a 10-byte object with 2 bytes from 2"},
		{"an answer without a version", 0, -1, "", []answer{got("", 0, 10, 10)},
			"GET whole, FAIL other: the store's answer names no version (no ETag or generation)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, step := newRangePlan(tc.offset, tc.length, tc.pin)
			var steps []string
			for i := 0; ; i++ {
				steps = append(steps, describe(step))
				if step.kind != stepGet && step.kind != stepStat {
					break
				}
				if i == len(tc.answers) {
					t.Fatalf("steps %s: the plan asks for more than the %d scripted answers", strings.Join(steps, ", "), len(tc.answers))
				}
				a := tc.answers[i]
				if step.kind == stepGet {
					step = p.afterGet(a.get, a.err)
				} else {
					step = p.afterStat(a.stat, a.err)
				}
			}
			if got := strings.Join(steps, ", "); got != tc.want {
				t.Errorf("range %d/%d pinned to %q:\n got %s\nwant %s", tc.offset, tc.length, tc.pin, got, tc.want)
			}
		})
	}
}

// httpStore is a driver whose ranged GETs answer with body as the store
// sends it (whole, or from the range's start), and which counts the
// requests and the bodies left open.
type httpStore struct {
	body       string
	ignore     bool  // answer every GET with the whole object
	promise    int64 // Content-Length to announce, when not -1
	cut        int   // when not 0, the body breaks off after this many bytes
	gets, open int
	stats      int
}

func (s *httpStore) GetRange(_ context.Context, _ string, r driver.ByteRange, _ driver.Precondition) (driver.RangeAnswer, error) {
	s.gets++
	s.open++
	a := driver.RangeAnswer{Token: "v1", Size: int64(len(s.body)), Length: s.promise}
	b := s.body
	if !s.ignore {
		a.Start = r.Offset
		b = s.body[r.Offset:]
	}
	if s.cut > 0 {
		b = b[:s.cut]
	}
	a.Body = &countedBody{Reader: strings.NewReader(b), s: s}
	return a, nil
}

type countedBody struct {
	*strings.Reader
	s *httpStore
}

func (b *countedBody) Close() error { b.s.open--; return nil }

func (s *httpStore) Stat(context.Context, string) (Attrs, error) {
	s.stats++
	return Attrs{Size: int64(len(s.body)), Token: "v1"}, nil
}
func (s *httpStore) Get(context.Context, string) (Object, error) { return Object{}, ErrUnsupported }
func (s *httpStore) Write(context.Context, string, []byte, driver.Precondition) (Token, error) {
	return "", ErrUnsupported
}
func (s *httpStore) Delete(context.Context, string, driver.Precondition) error { return ErrUnsupported }
func (s *httpStore) List(context.Context, string, string, int) (ListPage, error) {
	return ListPage{}, ErrUnsupported
}
func (s *httpStore) Classify(_ Op, err error) error { return err }
func (s *httpStore) Capabilities() Capabilities     { return Capabilities{} }
func (s *httpStore) String() string                 { return "http://store" }
func (s *httpStore) Close() error                   { return nil }

// TestRangeStreamsServeExactlyTheRange reads through the policy's I/O: the
// bytes of the range and no more whatever the store sends, an empty stream
// from one Stat, a body that ends short as io.ErrUnexpectedEOF, and no body
// left open.
func TestRangeStreamsServeExactlyTheRange(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name           string
		store          httpStore
		offset, length int64
		want           string
		gets, stats    int
		err            error
	}{
		{"a range", httpStore{body: "0123456789", promise: -1}, 2, 3, "234", 1, 0, nil},
		{"a store that ignored the Range", httpStore{body: "0123456789", ignore: true, promise: 10}, 2, 3, "234", 1, 0, nil},
		{"to the end", httpStore{body: "0123456789", promise: -1}, 7, -1, "789", 1, 0, nil},
		{"zero bytes", httpStore{body: "0123456789", promise: -1}, 4, 0, "", 0, 1, nil},
		{"a body that breaks off", httpStore{body: "0123456789", promise: 10, cut: 6}, 0, -1, "012345", 1, 0, io.ErrUnexpectedEOF},
		{"a body that breaks off before the range", httpStore{body: "0123456789", ignore: true, promise: 10, cut: 1}, 2, 3, "", 1, 0, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store
			c := New(&s)
			rc, attrs, err := c.NewRangeReader(ctx, "k", tc.offset, tc.length, "")
			if err != nil {
				// Only a body that breaks off before the range fails here.
				if tc.err == nil || !errors.Is(err, tc.err) || s.open != 0 {
					t.Fatalf("%v, %d bodies open; want a stream", err, s.open)
				}
				return
			}
			if attrs.Token != "v1" || attrs.Size != int64(len(s.body)) {
				t.Errorf("attrs %+v, want v1 of %d bytes", attrs, len(s.body))
			}
			b, err := io.ReadAll(rc)
			if string(b) != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("read %q, %v; want %q, %v", b, err, tc.want, tc.err)
			}
			if err := rc.Close(); err != nil {
				t.Error(err)
			}
			if s.gets != tc.gets || s.stats != tc.stats || s.open != 0 {
				t.Errorf("%d GETs, %d Stats, %d bodies open; want %d, %d, none", s.gets, s.stats, s.open, tc.gets, tc.stats)
			}
		})
	}
}

// A cancelled context fails the stream's next Read.
func TestRangeStreamStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	s := &httpStore{body: "0123456789", promise: -1}
	rc, _, err := New(s).NewRangeReader(ctx, "k", 0, -1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := make([]byte, 4)
	if _, err := rc.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if n, err := rc.Read(buf); n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("a Read after the cancel: %d bytes, %v; want none and context.Canceled", n, err)
	}
}
