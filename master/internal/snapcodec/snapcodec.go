// Package snapcodec is the MessagePack codec of the master's snapshot
// payloads: values written and read directly on byte slices, with the
// encodings the msgpack library chose (the smallest integer and length
// forms), so the bytes are those of earlier releases. Reading is strict:
// a nil where a value must be, a negative count, a value of another type
// or a length past the end is an error, never a zero. It knows nothing of
// what the payloads hold (package master writes and reads the records).
package snapcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Why not the library: a value at a time through its Decoder cost a peek,
// a call and often an allocation per field, which was most of a large
// restore's decoding.

// MessagePack codes the payloads use.
const (
	mpPosFixMax = 0x7f
	mpFixArray  = 0x90
	mpFixArrMax = 0x9f
	mpFixStr    = 0xa0
	mpFixStrMax = 0xbf
	mpNil       = 0xc0
	mpFalse     = 0xc2
	mpTrue      = 0xc3
	mpBin8      = 0xc4
	mpBin16     = 0xc5
	mpBin32     = 0xc6
	mpUint8     = 0xcc
	mpUint16    = 0xcd
	mpUint32    = 0xce
	mpUint64    = 0xcf
	mpInt8      = 0xd0
	mpInt16     = 0xd1
	mpInt32     = 0xd2
	mpInt64     = 0xd3
	mpStr8      = 0xd9
	mpStr16     = 0xda
	mpStr32     = 0xdb
	mpArray16   = 0xdc
	mpArray32   = 0xdd
	mpNegFixLow = 0xe0
)

// MaxRecordLen bounds a payload's record count.
const MaxRecordLen = math.MaxInt32

// Encoder appends MessagePack values to b.
type Encoder struct {
	B []byte
}

// Arr opens an array of n values.
func (w *Encoder) Arr(n int) {
	switch {
	case n < 16:
		w.B = append(w.B, mpFixArray|byte(n))
	case n <= math.MaxUint16:
		w.B = binary.BigEndian.AppendUint16(append(w.B, mpArray16), uint16(n))
	default:
		w.B = binary.BigEndian.AppendUint32(append(w.B, mpArray32), uint32(n))
	}
}

// Str writes a string.
func (w *Encoder) Str(s string) {
	n := len(s)
	switch {
	case n < 32:
		w.B = append(w.B, mpFixStr|byte(n))
	case n < 256:
		w.B = append(w.B, mpStr8, byte(n))
	case n <= math.MaxUint16:
		w.B = binary.BigEndian.AppendUint16(append(w.B, mpStr16), uint16(n))
	default:
		w.B = binary.BigEndian.AppendUint32(append(w.B, mpStr32), uint32(n))
	}
	w.B = append(w.B, s...)
}

// Bytes writes a binary value.
func (w *Encoder) Bytes(p []byte) {
	n := len(p)
	switch {
	case n < 256:
		w.B = append(w.B, mpBin8, byte(n))
	case n <= math.MaxUint16:
		w.B = binary.BigEndian.AppendUint16(append(w.B, mpBin16), uint16(n))
	default:
		w.B = binary.BigEndian.AppendUint32(append(w.B, mpBin32), uint32(n))
	}
	w.B = append(w.B, p...)
}

// Uint writes an unsigned integer in its smallest form.
func (w *Encoder) Uint(v uint64) {
	switch {
	case v <= mpPosFixMax:
		w.B = append(w.B, byte(v))
	case v <= math.MaxUint8:
		w.B = append(w.B, mpUint8, byte(v))
	case v <= math.MaxUint16:
		w.B = binary.BigEndian.AppendUint16(append(w.B, mpUint16), uint16(v))
	case v <= math.MaxUint32:
		w.B = binary.BigEndian.AppendUint32(append(w.B, mpUint32), uint32(v))
	default:
		w.B = binary.BigEndian.AppendUint64(append(w.B, mpUint64), v)
	}
}

// Int writes a signed integer in its smallest form.
func (w *Encoder) Int(v int64) {
	switch {
	case v >= 0:
		w.Uint(uint64(v))
	case v >= -32:
		w.B = append(w.B, byte(v))
	case v >= math.MinInt8:
		w.B = append(w.B, mpInt8, byte(v))
	case v >= math.MinInt16:
		w.B = binary.BigEndian.AppendUint16(append(w.B, mpInt16), uint16(v))
	case v >= math.MinInt32:
		w.B = binary.BigEndian.AppendUint32(append(w.B, mpInt32), uint32(v))
	default:
		w.B = binary.BigEndian.AppendUint64(append(w.B, mpInt64), uint64(v))
	}
}

// Bool writes a boolean.
func (w *Encoder) Bool(v bool) {
	if v {
		w.B = append(w.B, mpTrue)
	} else {
		w.B = append(w.B, mpFalse)
	}
}

// Nil writes a nil.
func (w *Encoder) Nil() { w.B = append(w.B, mpNil) }

// Decoder reads MessagePack strictly from b: a nil where a value must be,
// a negative number where a count or size must be, a value of another
// type, or a length past the end is an error, never a zero. The first
// error sticks; every read after it returns a zero value.
type Decoder struct {
	b []byte
	p int
	// Err is the first error; every read after it returns a zero value.
	Err error
}

// NewDecoder reads b.
func NewDecoder(b []byte) Decoder { return Decoder{b: b} }

// Pos is the offset of the next value in b.
func (r *Decoder) Pos() int { return r.p }

// ErrTruncated: a value runs past the end of the bytes.
var ErrTruncated = errors.New("truncated: unexpected EOF")

// Fail records an error unless one is recorded already.
func (r *Decoder) Fail(format string, args ...any) {
	if r.Err == nil {
		r.Err = fmt.Errorf(format, args...)
	}
}

// code peeks the next value's code; a nil or the end fails.
func (r *Decoder) code() (byte, bool) {
	if r.Err != nil {
		return 0, false
	}
	if r.p >= len(r.b) {
		r.Err = ErrTruncated
		return 0, false
	}
	c := r.b[r.p]
	if c == mpNil {
		r.Fail("nil where a value is required")
		return 0, false
	}
	return c, true
}

// take consumes n bytes.
func (r *Decoder) take(n int) []byte {
	if n < 0 || len(r.b)-r.p < n {
		if r.Err == nil {
			r.Err = ErrTruncated
		}
		r.p = len(r.b)
		return nil
	}
	s := r.b[r.p : r.p+n]
	r.p += n
	return s
}

func (r *Decoder) u8() uint64 {
	if s := r.take(1); s != nil {
		return uint64(s[0])
	}
	return 0
}

func (r *Decoder) u16() uint64 {
	if s := r.take(2); s != nil {
		return uint64(binary.BigEndian.Uint16(s))
	}
	return 0
}

func (r *Decoder) u32() uint64 {
	if s := r.take(4); s != nil {
		return uint64(binary.BigEndian.Uint32(s))
	}
	return 0
}

func (r *Decoder) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

// ArrLen reads an array header: its length.
func (r *Decoder) ArrLen() int {
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
	r.Fail("msgpack: invalid code=%x decoding array length", c)
	return 0
}

// Arr reads an array header of want values.
func (r *Decoder) Arr(want int) {
	if n := r.ArrLen(); r.Err == nil && n != want {
		r.Fail("a record of %d fields, want %d", n, want)
	}
}

// StrBytes reads a string's bytes without copying them.
func (r *Decoder) StrBytes() []byte {
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
		r.Fail("code %#x where a string is required", c)
		return nil
	}
	if r.Err != nil {
		return nil
	}
	return r.take(int(n))
}

// Str reads a string.
func (r *Decoder) Str() string { return string(r.StrBytes()) }

// Uint reads a non-negative integer.
func (r *Decoder) Uint() uint64 {
	c, ok := r.code()
	if !ok {
		return 0
	}
	if c == mpUint64 {
		r.p++
		return r.u64()
	}
	v := r.Int()
	if r.Err == nil && v < 0 {
		r.Fail("negative value %d where a count or size is required", v)
	}
	return uint64(v)
}

// Int reads an integer that fits an int64.
func (r *Decoder) Int() int64 {
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
		if r.Err == nil && v > math.MaxInt64 {
			r.Fail("%d does not fit a signed 64-bit integer", v)
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
	r.Fail("code %#x where an integer is required", c)
	return 0
}

// OptInt reads an integer or nil (absent).
func (r *Decoder) OptInt() (int64, bool) {
	if r.Err != nil {
		return 0, false
	}
	if r.p >= len(r.b) {
		r.Err = ErrTruncated
		return 0, false
	}
	if r.b[r.p] == mpNil {
		r.p++
		return 0, false
	}
	return r.Int(), true
}

// Bytes reads a binary value.
func (r *Decoder) Bytes() []byte {
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
		r.Fail("code %#x where bytes are required", c)
		return nil
	}
	if r.Err != nil {
		return nil
	}
	return r.take(int(n))
}

// Bool reads a boolean.
func (r *Decoder) Bool() bool {
	c, ok := r.code()
	if !ok {
		return false
	}
	if c != mpTrue && c != mpFalse {
		r.Fail("code %#x where a boolean is required", c)
		return false
	}
	r.p++
	return c == mpTrue
}

// End checks nothing follows the last record.
func (r *Decoder) End() {
	if r.Err == nil && r.p < len(r.b) {
		r.Fail("bytes after the last record")
	}
}

// Skip consumes one value of the kinds the payloads use, whatever it is.
func (r *Decoder) Skip() {
	if r.Err != nil || r.p >= len(r.b) {
		r.Err = ErrTruncated
		return
	}
	c := r.b[r.p]
	switch {
	case c == mpNil:
		r.p++
	case c == mpTrue || c == mpFalse:
		r.Bool()
	case (c >= mpFixArray && c <= mpFixArrMax) || c == mpArray16 || c == mpArray32:
		for range r.ArrLen() {
			r.Skip()
		}
	case (c >= mpFixStr && c <= mpFixStrMax) || c == mpStr8 || c == mpStr16 || c == mpStr32:
		r.StrBytes()
	case c == mpBin8 || c == mpBin16 || c == mpBin32:
		r.Bytes()
	default:
		r.Int()
	}
}
