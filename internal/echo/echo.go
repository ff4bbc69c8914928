// Package echo bounds what a server repeats of its clients' input: a name
// of any size a client sent comes back in an error, a detail or a log line
// cut to a few bytes, with its length noted, so no request can make an
// answer or a log line large.
package echo

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Len bounds one name or other piece of client input repeated in an error
// or its detail.
const Len = 128

// MaxMessage bounds the message of one API error.
const MaxMessage = 4096

// Clip is at most Len bytes of s: see ClipN.
func Clip(s string) string { return ClipN(s, Len) }

// ClipN is at most n bytes of s, cut at a character boundary and marked
// with s's length, with invalid UTF-8 replaced. The bound holds after the
// replacement: a lone invalid byte becomes three bytes of U+FFFD, so
// replacing after the cut let n bytes of input come back three times as
// long.
func ClipN(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	// Only what can come back is looked at: n bytes, and a character
	// that the cut may end inside.
	p := s
	if len(p) > n+utf8.UTFMax {
		p = p[:n+utf8.UTFMax]
	}
	v := strings.ToValidUTF8(p, "\uFFFD")
	if len(p) == len(s) && len(v) <= n {
		return v
	}
	cut := min(n, len(v))
	for cut > 0 && cut < len(v) && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + fmt.Sprintf("...(%d bytes)", len(s))
}
