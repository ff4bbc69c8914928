package azure

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

func utf16Compare(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// Names from an alphabet that straddles the disagreement (ASCII, BMP below
// and above U+E000, supplementary) arrive in the service's UTF-16 order and
// must leave in byte order, every item exactly once.
func TestByteOrderFromUTF16Order(t *testing.T) {
	alphabet := []string{"a", "z", "/", "é", "中", "\uE000", "Ａ", "\uFFFD", "😀", "𝄞", "\U0010FFFF"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		seen := map[string]bool{}
		var names []string
		for range rng.IntN(40) {
			var b strings.Builder
			for range 1 + rng.IntN(4) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			if n := b.String(); !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
		slices.SortFunc(names, utf16Compare)
		o := byteOrder[string]{name: func(s string) string { return s }}
		var got []string
		for _, n := range names {
			got = append(got, o.push(n)...)
		}
		got = append(got, o.flush()...)
		want := slices.Sorted(slices.Values(names))
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: from UTF-16 order %q\ngot  %q\nwant %q", round, names, got, want)
		}
	}
}

// The inclusive startFrom sent for startAfter must never skip a name that
// sorts after startAfter in byte order.
func TestLowerBoundUTF16(t *testing.T) {
	alphabet := []string{"a", "é", "Ａ", "😀", "/"}
	var names []string
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		if depth == 0 {
			return
		}
		for _, c := range alphabet {
			names = append(names, prefix+c)
			gen(prefix+c, depth-1)
		}
	}
	gen("", 3)
	for _, after := range names {
		from := lowerBoundUTF16(after)
		for _, n := range names {
			if n > after && utf16Compare(n, from) < 0 {
				t.Fatalf("startFrom %q for startAfter %q would skip %q", from, after, n)
			}
		}
	}
}
