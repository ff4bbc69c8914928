package sidecar

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzValidateName: an allocation id, node name or handoff target the
// sidecar takes is at most MaxNameLen bytes of printable UTF-8 without the
// '|' separator (non-empty unless optional); a refusal is
// ErrInvalidArgument with a bounded message.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"", "a1", "node|2", "\u202eevil", "\u0085", "\xff", "日本語", "tab\t", strings.Repeat("x", MaxNameLen), strings.Repeat("x", MaxNameLen+1)} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, optional bool) {
		err := validateName("allocation id", s, optional)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) || len(err.Error()) > 4096 {
				t.Fatalf("validateName(%.64q) = %.200v", s, err)
			}
			return
		}
		if s == "" && !optional || len(s) > MaxNameLen || !utf8.ValidString(s) ||
			strings.ContainsFunc(s, func(r rune) bool { return r == '|' || !unicode.IsPrint(r) }) {
			t.Fatalf("validateName took %q", s)
		}
	})
}
