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
// with s's length, with invalid UTF-8 replaced.
func ClipN(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + fmt.Sprintf("...(%d bytes)", len(s))
}
