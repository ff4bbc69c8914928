package echo

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzClipN: what a server repeats of a client's input is valid UTF-8 and
// at most n bytes and the length note, whatever the input; input within
// the bound comes back whole.
func FuzzClipN(f *testing.F) {
	f.Add("shard-1", 128)
	f.Add(strings.Repeat("日本語", 100), 128)
	f.Add("\xff\xfe\xfd", 2)
	f.Add(strings.Repeat("\xff", 5000), MaxMessage)
	f.Add("\U0001F600\U0001F600", 5)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 1<<20 {
			n = Len
		}
		out := ClipN(s, n)
		if !utf8.ValidString(out) {
			t.Fatalf("ClipN(%q, %d) = %q: not valid UTF-8", s, n, out)
		}
		if max := n + len(fmt.Sprintf("...(%d bytes)", len(s))); len(out) > max {
			t.Fatalf("ClipN(%.64q (%d bytes), %d) is %d bytes, more than %d", s, len(s), n, len(out), max)
		}
		if utf8.ValidString(s) && len(s) <= n && out != s {
			t.Fatalf("ClipN(%q, %d) = %q: a valid input within the bound changed", s, n, out)
		}
	})
}

// Invalid UTF-8 is replaced by three-byte U+FFFD characters: the bound
// holds after that (4 KiB of lone invalid bytes came back as 12 KiB).
func TestClipNBoundsInvalidUTF8(t *testing.T) {
	s := strings.Repeat("\xffa", MaxMessage)
	out := ClipN(s, MaxMessage)
	if max := MaxMessage + len("...(8192 bytes)"); len(out) > max || !utf8.ValidString(out) {
		t.Fatalf("ClipN of %d bytes of alternating invalid bytes: %d bytes (bound %d), valid UTF-8 %v", len(s), len(out), max, utf8.ValidString(out))
	}
	if out := ClipN("\xff\xfe", 2); len(out) > 2+len("...(2 bytes)") {
		t.Fatalf("ClipN of 2 invalid bytes within the bound: %q", out)
	}
}
