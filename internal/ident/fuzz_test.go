package ident

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzValidate: Validate accepts exactly the identifiers its rule names
// (non-empty unless optional, at most MaxLen bytes, UTF-8, no '|' and no
// control character), refuses the rest with ErrInvalidArgument, and its
// message stays bounded whatever the identifier.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"", "a1", "shard|1", "tab\there", "\x7f", "\xff\xfe", "日本語", "\u202eevil", strings.Repeat("x", MaxLen), strings.Repeat("x", MaxLen+1), strings.Repeat("\xff", MaxLen)} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, optional bool) {
		err := Validate("allocation", s, optional)
		want := (s != "" || optional) && len(s) <= MaxLen && utf8.ValidString(s) &&
			!strings.ContainsFunc(s, func(r rune) bool { return r == '|' || r < 0x20 || r == 0x7f })
		if (err == nil) != want {
			t.Fatalf("Validate(%q, optional %v) = %v, want valid %v", s, optional, err, want)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Validate(%q) = %v: not ErrInvalidArgument", s, err)
		}
		// %q shows a byte as at most 10 characters (\U0010ffff).
		if n := len(err.Error()); n > 10*MaxLen+200 {
			t.Fatalf("Validate(%.64q): a message of %d bytes", s, n)
		}
	})
}
