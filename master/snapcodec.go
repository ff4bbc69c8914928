package master

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The snapshot payloads are MessagePack. They are written and read here
// directly on byte slices, with the same encodings the msgpack library
// chose (the smallest integer and length forms), so the bytes are those
// of earlier releases and their snapshots read back unchanged: a value at
// a time through the library's Decoder cost a peek, a call and often an
// allocation per field, which was most of a large restore's decoding.

// MessagePack codes the payloads use.
const (
	mpPosFixMax  = 0x7f
	mpFixArray   = 0x90
	mpFixArrMax  = 0x9f
	mpFixStr     = 0xa0
	mpFixStrMax  = 0xbf
	mpNil        = 0xc0
	mpFalse      = 0xc2
	mpTrue       = 0xc3
	mpBin8       = 0xc4
	mpBin16      = 0xc5
	mpBin32      = 0xc6
	mpUint8      = 0xcc
	mpUint16     = 0xcd
	mpUint32     = 0xce
	mpUint64     = 0xcf
	mpInt8       = 0xd0
	mpInt16      = 0xd1
	mpInt32      = 0xd2
	mpInt64      = 0xd3
	mpStr8       = 0xd9
	mpStr16      = 0xda
	mpStr32      = 0xdb
	mpArray16    = 0xdc
	mpArray32    = 0xdd
	mpNegFixLow  = 0xe0
	maxRecordLen = math.MaxInt32
)

// encoder appends MessagePack values to b.
type encoder struct {
	b []byte
}

func (w *encoder) arr(n int) {
	switch {
	case n < 16:
		w.b = append(w.b, mpFixArray|byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, mpArray16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, mpArray32), uint32(n))
	}
}

func (w *encoder) str(s string) {
	n := len(s)
	switch {
	case n < 32:
		w.b = append(w.b, mpFixStr|byte(n))
	case n < 256:
		w.b = append(w.b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, mpStr16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, mpStr32), uint32(n))
	}
	w.b = append(w.b, s...)
}

func (w *encoder) bytes(p []byte) {
	n := len(p)
	switch {
	case n < 256:
		w.b = append(w.b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, mpBin16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, mpBin32), uint32(n))
	}
	w.b = append(w.b, p...)
}

func (w *encoder) uint(v uint64) {
	switch {
	case v <= mpPosFixMax:
		w.b = append(w.b, byte(v))
	case v <= math.MaxUint8:
		w.b = append(w.b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, mpUint16), uint16(v))
	case v <= math.MaxUint32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, mpUint32), uint32(v))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, mpUint64), v)
	}
}

func (w *encoder) int(v int64) {
	switch {
	case v >= 0:
		w.uint(uint64(v))
	case v >= -32:
		w.b = append(w.b, byte(v))
	case v >= math.MinInt8:
		w.b = append(w.b, mpInt8, byte(v))
	case v >= math.MinInt16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, mpInt16), uint16(v))
	case v >= math.MinInt32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, mpInt32), uint32(v))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, mpInt64), uint64(v))
	}
}

func (w *encoder) bool(v bool) {
	if v {
		w.b = append(w.b, mpTrue)
	} else {
		w.b = append(w.b, mpFalse)
	}
}

func (w *encoder) nil() { w.b = append(w.b, mpNil) }

// decoder reads MessagePack strictly from b: a nil where a value must be,
// a negative number where a count or size must be, a value of another
// type, or a length past the end is an error, never a zero. The first
// error sticks; every read after it returns a zero value.
type decoder struct {
	b   []byte
	p   int
	err error
}

var errTruncated = errors.New("truncated: unexpected EOF")

func (r *decoder) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

// code peeks the next value's code; a nil or the end fails.
func (r *decoder) code() (byte, bool) {
	if r.err != nil {
		return 0, false
	}
	if r.p >= len(r.b) {
		r.err = errTruncated
		return 0, false
	}
	c := r.b[r.p]
	if c == mpNil {
		r.fail("nil where a value is required")
		return 0, false
	}
	return c, true
}

// take consumes n bytes.
func (r *decoder) take(n int) []byte {
	if n < 0 || len(r.b)-r.p < n {
		if r.err == nil {
			r.err = errTruncated
		}
		r.p = len(r.b)
		return nil
	}
	s := r.b[r.p : r.p+n]
	r.p += n
	return s
}

func (r *decoder) u8() uint64 {
	if s := r.take(1); s != nil {
		return uint64(s[0])
	}
	return 0
}

func (r *decoder) u16() uint64 {
	if s := r.take(2); s != nil {
		return uint64(binary.BigEndian.Uint16(s))
	}
	return 0
}

func (r *decoder) u32() uint64 {
	if s := r.take(4); s != nil {
		return uint64(binary.BigEndian.Uint32(s))
	}
	return 0
}

func (r *decoder) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

func (r *decoder) arrLen() int {
	c, ok := r.code()
	if !ok {
		return 0
	}
	r.p++
	switch {
	case c >= mpFixArray && c <= mpFixArrMax:
		return int(c & 0x0f)
	case c == mpArray16:
		return int(r.u16())
	case c == mpArray32:
		return int(r.u32())
	}
	r.fail("msgpack: invalid code=%x decoding array length", c)
	return 0
}

func (r *decoder) arr(want int) {
	if n := r.arrLen(); r.err == nil && n != want {
		r.fail("a record of %d fields, want %d", n, want)
	}
}

// strBytes reads a string's bytes without copying them.
func (r *decoder) strBytes() []byte {
	c, ok := r.code()
	if !ok {
		return nil
	}
	var n uint64
	switch {
	case c >= mpFixStr && c <= mpFixStrMax:
		r.p++
		n = uint64(c & 0x1f)
	case c == mpStr8:
		r.p++
		n = r.u8()
	case c == mpStr16:
		r.p++
		n = r.u16()
	case c == mpStr32:
		r.p++
		n = r.u32()
	default:
		r.fail("code %#x where a string is required", c)
		return nil
	}
	if r.err != nil {
		return nil
	}
	return r.take(int(n))
}

func (r *decoder) str() string { return string(r.strBytes()) }

func (r *decoder) uint() uint64 {
	c, ok := r.code()
	if !ok {
		return 0
	}
	if c == mpUint64 {
		r.p++
		return r.u64()
	}
	v := r.int()
	if r.err == nil && v < 0 {
		r.fail("negative value %d where a count or size is required", v)
	}
	return uint64(v)
}

func (r *decoder) int() int64 {
	c, ok := r.code()
	if !ok {
		return 0
	}
	switch {
	case c <= mpPosFixMax:
		r.p++
		return int64(c)
	case c >= mpNegFixLow:
		r.p++
		return int64(int8(c))
	}
	r.p++
	switch c {
	case mpUint8:
		return int64(r.u8())
	case mpUint16:
		return int64(r.u16())
	case mpUint32:
		return int64(r.u32())
	case mpUint64:
		v := r.u64()
		if r.err == nil && v > math.MaxInt64 {
			r.fail("%d does not fit a signed 64-bit integer", v)
		}
		return int64(v)
	case mpInt8:
		return int64(int8(r.u8()))
	case mpInt16:
		return int64(int16(r.u16()))
	case mpInt32:
		return int64(int32(r.u32()))
	case mpInt64:
		return int64(r.u64())
	}
	r.p--
	r.fail("code %#x where an integer is required", c)
	return 0
}

// optInt reads an integer or nil (absent).
func (r *decoder) optInt() (int64, bool) {
	if r.err != nil {
		return 0, false
	}
	if r.p >= len(r.b) {
		r.err = errTruncated
		return 0, false
	}
	if r.b[r.p] == mpNil {
		r.p++
		return 0, false
	}
	return r.int(), true
}

func (r *decoder) bytes() []byte {
	c, ok := r.code()
	if !ok {
		return nil
	}
	var n uint64
	r.p++
	switch c {
	case mpBin8:
		n = r.u8()
	case mpBin16:
		n = r.u16()
	case mpBin32:
		n = r.u32()
	default:
		r.p--
		r.fail("code %#x where bytes are required", c)
		return nil
	}
	if r.err != nil {
		return nil
	}
	return r.take(int(n))
}

func (r *decoder) bool() bool {
	c, ok := r.code()
	if !ok {
		return false
	}
	if c != mpTrue && c != mpFalse {
		r.fail("code %#x where a boolean is required", c)
		return false
	}
	r.p++
	return c == mpTrue
}

// header checks a payload file's header against the manifest and returns
// its record count.
func (r *decoder) header(m SnapshotManifest, part string) int {
	r.arr(5)
	format, version, id, got := r.strBytes(), r.strBytes(), r.strBytes(), r.strBytes()
	n := r.uint()
	switch {
	case r.err != nil:
	case string(format) != payloadFormat:
		r.fail("not a master snapshot payload (%q)", trunc(string(format)))
	case string(version) != m.Version:
		r.fail("payload of version %q under a %s manifest: its time fields are in another domain", trunc(string(version)), m.Version)
	case string(id) != m.ID:
		r.fail("payload of snapshot %q under manifest %q", trunc(string(id)), m.ID)
	case string(got) != part:
		r.fail("payload says it is %q", trunc(string(got)))
	case n > maxRecordLen:
		r.fail("%d records", n)
	}
	return int(n)
}

// end checks nothing follows the last record.
func (r *decoder) end() {
	if r.err == nil && r.p < len(r.b) {
		r.fail("bytes after the last record")
	}
}
