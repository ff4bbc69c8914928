package snapcodec

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The encoder writes what the msgpack library wrote for the same calls
// (the smallest forms), so snapshots keep their bytes across the change
// of encoder.
func TestEncoderMatchesLibrary(t *testing.T) {
	var lib bytes.Buffer
	e := msgpack.NewEncoder(&lib)
	var w Encoder
	ints := []int64{0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	for _, v := range ints {
		_ = e.EncodeInt(v)
		w.Int(v)
		if v >= 0 {
			_ = e.EncodeUint(uint64(v))
			w.Uint(uint64(v))
		}
	}
	_ = e.EncodeUint(math.MaxUint64)
	w.Uint(math.MaxUint64)
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("k", n)
		_ = e.EncodeString(s)
		w.Str(s)
		_ = e.EncodeBytes([]byte(s))
		w.Bytes([]byte(s))
		_ = e.EncodeArrayLen(n)
		w.Arr(n)
	}
	_ = e.EncodeBool(true)
	_ = e.EncodeBool(false)
	_ = e.EncodeNil()
	w.Bool(true)
	w.Bool(false)
	w.Nil()
	if !bytes.Equal(lib.Bytes(), w.B) {
		t.Fatalf("encodings differ:\nlibrary %x\nencoder %x", lib.Bytes(), w.B)
	}
}

// The decoder reads every integer form (also the fixed-width ones the
// library writes when asked) and refuses what the library-based decoder
// refused: nil for a value, a negative count, a value of another type,
// a length past the end.
func TestDecoderForms(t *testing.T) {
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
	r := NewDecoder(lib.Bytes())
	got := []int64{r.Int(), r.Int(), r.Int(), r.Int(), int64(r.Uint()), int64(r.Uint()), int64(r.Uint()), int64(r.Uint()), int64(r.Uint())}
	want := []int64{-5, -300, -70000, -1 << 40, 7, 7, 7, 7, 7}
	r.End()
	if r.Err != nil || !slicesEqual(got, want) {
		t.Fatalf("decoded %v (%v), want %v", got, r.Err, want)
	}
	for name, c := range map[string]struct {
		b    []byte
		read func(r *Decoder)
	}{
		"nil for a value":        {[]byte{mpNil}, func(r *Decoder) { r.Int() }},
		"negative count":         {[]byte{0xff}, func(r *Decoder) { r.Uint() }},
		"string for an integer":  {[]byte{0xa1, 'x'}, func(r *Decoder) { r.Int() }},
		"integer for a string":   {[]byte{0x01}, func(r *Decoder) { r.Str() }},
		"bytes for a string":     {[]byte{mpBin8, 1, 'x'}, func(r *Decoder) { r.Str() }},
		"string past the end":    {[]byte{0xa5, 'x'}, func(r *Decoder) { r.Str() }},
		"uint64 past int64":      {[]byte{mpUint64, 0x80, 0, 0, 0, 0, 0, 0, 0}, func(r *Decoder) { r.Int() }},
		"truncated integer":      {[]byte{mpUint32, 1}, func(r *Decoder) { r.Uint() }},
		"map for an array":       {[]byte{0x80}, func(r *Decoder) { r.ArrLen() }},
		"integer for a boolean":  {[]byte{0x01}, func(r *Decoder) { r.Bool() }},
		"string for bytes":       {[]byte{0xa1, 'x'}, func(r *Decoder) { r.Bytes() }},
		"empty for an optional":  {nil, func(r *Decoder) { r.OptInt() }},
		"float for an integer":   {[]byte{0xca, 0, 0, 0, 0}, func(r *Decoder) { r.Int() }},
		"array of a wrong width": {[]byte{0x92, 1, 2}, func(r *Decoder) { r.Arr(3) }},
	} {
		r := NewDecoder(c.b)
		c.read(&r)
		if r.Err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	trailing := NewDecoder([]byte{1, 2})
	trailing.Int()
	if trailing.End(); trailing.Err == nil {
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
