package master

import (
	"bytes"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The encoder writes what the msgpack library wrote for the same calls
// (the smallest forms), so snapshots keep their bytes across the change
// of encoder.
func TestSnapshotEncoderMatchesMsgpackLibrary(t *testing.T) {
	var lib bytes.Buffer
	e := msgpack.NewEncoder(&lib)
	var w encoder
	ints := []int64{0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	for _, v := range ints {
		_ = e.EncodeInt(v)
		w.int(v)
		if v >= 0 {
			_ = e.EncodeUint(uint64(v))
			w.uint(uint64(v))
		}
	}
	_ = e.EncodeUint(math.MaxUint64)
	w.uint(math.MaxUint64)
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("k", n)
		_ = e.EncodeString(s)
		w.str(s)
		_ = e.EncodeBytes([]byte(s))
		w.bytes([]byte(s))
		_ = e.EncodeArrayLen(n)
		w.arr(n)
	}
	_ = e.EncodeBool(true)
	_ = e.EncodeBool(false)
	_ = e.EncodeNil()
	w.bool(true)
	w.bool(false)
	w.nil()
	if !bytes.Equal(lib.Bytes(), w.b) {
		t.Fatalf("encodings differ:\nlibrary %x\nencoder %x", lib.Bytes(), w.b)
	}
}

// The decoder reads every integer form (also the fixed-width ones the
// library writes when asked) and refuses what the library-based decoder
// refused: nil for a value, a negative count, a value of another type,
// a length past the end.
func TestSnapshotDecoderForms(t *testing.T) {
	var lib bytes.Buffer
	e := msgpack.NewEncoder(&lib)
	_ = e.EncodeInt8(-5)
	_ = e.EncodeInt16(-300)
	_ = e.EncodeInt32(-70000)
	_ = e.EncodeInt64(-1 << 40)
	_ = e.EncodeUint8(7)
	_ = e.EncodeUint16(7)
	_ = e.EncodeUint32(7)
	_ = e.EncodeUint64(7)
	_ = e.EncodeInt64(7)
	r := decoder{b: lib.Bytes()}
	got := []int64{r.int(), r.int(), r.int(), r.int(), int64(r.uint()), int64(r.uint()), int64(r.uint()), int64(r.uint()), int64(r.uint())}
	want := []int64{-5, -300, -70000, -1 << 40, 7, 7, 7, 7, 7}
	r.end()
	if r.err != nil || !slicesEqual(got, want) {
		t.Fatalf("decoded %v (%v), want %v", got, r.err, want)
	}
	for name, c := range map[string]struct {
		b    []byte
		read func(r *decoder)
	}{
		"nil for a value":        {[]byte{mpNil}, func(r *decoder) { r.int() }},
		"negative count":         {[]byte{0xff}, func(r *decoder) { r.uint() }},
		"string for an integer":  {[]byte{0xa1, 'x'}, func(r *decoder) { r.int() }},
		"integer for a string":   {[]byte{0x01}, func(r *decoder) { r.str() }},
		"bytes for a string":     {[]byte{mpBin8, 1, 'x'}, func(r *decoder) { r.str() }},
		"string past the end":    {[]byte{0xa5, 'x'}, func(r *decoder) { r.str() }},
		"uint64 past int64":      {[]byte{mpUint64, 0x80, 0, 0, 0, 0, 0, 0, 0}, func(r *decoder) { r.int() }},
		"truncated integer":      {[]byte{mpUint32, 1}, func(r *decoder) { r.uint() }},
		"map for an array":       {[]byte{0x80}, func(r *decoder) { r.arrLen() }},
		"integer for a boolean":  {[]byte{0x01}, func(r *decoder) { r.bool() }},
		"string for bytes":       {[]byte{0xa1, 'x'}, func(r *decoder) { r.bytes() }},
		"empty for an optional":  {nil, func(r *decoder) { r.optInt() }},
		"float for an integer":   {[]byte{0xca, 0, 0, 0, 0}, func(r *decoder) { r.int() }},
		"array of a wrong width": {[]byte{0x92, 1, 2}, func(r *decoder) { r.arr(3) }},
	} {
		r := decoder{b: c.b}
		c.read(&r)
		if r.err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	trailing := decoder{b: []byte{1, 2}}
	trailing.int()
	if trailing.end(); trailing.err == nil {
		t.Error("a byte after the last record accepted")
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// skip consumes one value of the kinds the payloads use.
func skip(r *decoder) {
	if r.err != nil || r.p >= len(r.b) {
		r.err = errTruncated
		return
	}
	c := r.b[r.p]
	switch {
	case c == mpNil:
		r.p++
	case c == mpTrue || c == mpFalse:
		r.bool()
	case (c >= mpFixArray && c <= mpFixArrMax) || c == mpArray16 || c == mpArray32:
		for range r.arrLen() {
			skip(r)
		}
	case (c >= mpFixStr && c <= mpFixStrMax) || c == mpStr8 || c == mpStr16 || c == mpStr32:
		r.strBytes()
	case c == mpBin8 || c == mpBin16 || c == mpBin32:
		r.bytes()
	default:
		r.int()
	}
}

// records splits a payload into its header and its records, sorted.
func records(t *testing.T, b []byte) (string, []string) {
	t.Helper()
	r := decoder{b: b}
	skip(&r)
	head := string(b[:r.p])
	var out []string
	for r.err == nil && r.p < len(r.b) {
		at := r.p
		skip(&r)
		out = append(out, string(b[at:r.p]))
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	sort.Strings(out)
	return head, out
}

// A snapshot written now holds, byte for byte, the header and records of
// the fixture of its format for the state the fixture was taken from (in
// another order: objects follow the stripes, whose hash seed is random).
func TestSnapshotWriteMatchesFixtures(t *testing.T) {
	m, _ := snapMaster(t, Config{})
	for _, f := range []SnapshotFormat{SnapshotV1, SnapshotV2} {
		files, err := m.Freeze(nil, f).WriteFiles(t.TempDir(), "fixture-"+f.version())
		if err != nil {
			t.Fatal(err)
		}
		for _, fl := range files {
			got, err := os.ReadFile(fl.Path)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile("testdata/snapshot-" + f.version() + "/" + fl.Name)
			if err != nil {
				t.Fatal(err)
			}
			if fl.Name == SnapshotManifestFile {
				if !bytes.Equal(got, want) {
					t.Errorf("%s manifest %q, fixture %q", f.version(), got, want)
				}
				continue
			}
			gh, gr := records(t, got)
			wh, wr := records(t, want)
			if gh != wh || strings.Join(gr, "|") != strings.Join(wr, "|") {
				t.Errorf("%s %s: %x, fixture %x", f.version(), fl.Name, got, want)
			}
		}
	}
}
