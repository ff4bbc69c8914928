package seal

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// The combined checksum of two pieces is the checksum of the whole, for
// empty pieces, single bytes and splits anywhere in a longer body.
func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, 1<<16+13)
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	splits := []int{0, 1, 2, 7, 8, 4096, len(body) - 1, len(body)}
	for range 50 {
		splits = append(splits, rng.IntN(len(body)+1))
	}
	for _, at := range splits {
		a, b := body[:at], body[at:]
		got := crc32cCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), int64(len(b)))
		if want := crc32.Checksum(body, castagnoli); got != want {
			t.Fatalf("split at %d of %d: combined %08x, whole %08x", at, len(body), got, want)
		}
	}
	// Three pieces, combined left to right, as a chunked file is.
	x, y, z := body[:100], body[100:5000], body[5000:]
	c := crc32cCombine(crc32.Checksum(x, castagnoli), crc32.Checksum(y, castagnoli), int64(len(y)))
	c = crc32cCombine(c, crc32.Checksum(z, castagnoli), int64(len(z)))
	if want := crc32.Checksum(body, castagnoli); c != want {
		t.Fatalf("three pieces: combined %08x, whole %08x", c, want)
	}
}
