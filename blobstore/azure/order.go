package azure

import (
	"slices"
	"strings"
)

// Azure lists blob names in UTF-16 code-unit order; the contract is UTF-8
// byte order. The two agree except where, at the first code point two names
// differ in, one has a supplementary character (U+10000 and up, a surrogate
// pair in UTF-16, sorting below U+E000) and the other a character in
// U+E000..U+FFFF. So a name's order can be wrong only against names that
// share its text up to its first supplementary character, and in UTF-16
// order all names sharing that text arrive together. byteOrder buffers each
// such run and releases it sorted; everything else passes straight through.

// firstSupplementary returns the byte offset of the first character at or
// above U+10000 in s, or -1.
func firstSupplementary(s string) int {
	for i, r := range s {
		if r >= 0x10000 {
			return i
		}
	}
	return -1
}

// lowerBoundUTF16 returns the longest prefix of s before its first character
// at or above U+E000. Every name after s in byte order is at or after it in
// UTF-16 order too, so it is a safe inclusive startFrom for listing after s.
func lowerBoundUTF16(s string) string {
	for i, r := range s {
		if r >= 0xE000 {
			return s[:i]
		}
	}
	return s
}

// byteOrder turns a stream in UTF-16 order into one in byte order.
type byteOrder[T any] struct {
	name   func(T) string
	group  string // shared text of the buffered run
	active bool
	buf    []T
}

// push takes the next item in UTF-16 order and returns the items now known
// to be next in byte order.
func (o *byteOrder[T]) push(it T) []T {
	n := o.name(it)
	var out []T
	if o.active {
		if strings.HasPrefix(n, o.group) {
			o.buf = append(o.buf, it)
			return nil
		}
		out = o.flush()
	}
	if i := firstSupplementary(n); i >= 0 {
		o.group, o.active, o.buf = n[:i], true, append(o.buf[:0], it)
		return out
	}
	return append(out, it)
}

// flush releases the buffered run, sorted; call it at the end of the stream.
func (o *byteOrder[T]) flush() []T {
	if !o.active {
		return nil
	}
	out := slices.Clone(o.buf)
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(o.name(a), o.name(b)) })
	o.active, o.buf = false, o.buf[:0]
	return out
}
