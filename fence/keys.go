package fence

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	// Dir is the folder of a shard's fence keys.
	Dir = "fence/"
	// KeyPrefix is the common prefix of every fence key.
	KeyPrefix = Dir + "fence__"
	invDigits = 19
)

// Inv maps n to MaxInt64-n, zero-padded to 19 digits, so a plain
// lexicographic LIST returns the highest term (or generation) first. n must
// be non-negative.
func Inv(n int64) string {
	return fmt.Sprintf("%0*d", invDigits, int64(math.MaxInt64)-n)
}

// ParseInv inverts Inv. It accepts exactly 19 decimal digits.
func ParseInv(s string) (int64, bool) {
	if len(s) != invDigits {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return math.MaxInt64 - v, true
}

// Key is the fence key of term.
func Key(term int64) string { return KeyPrefix + Inv(term) }

// ParseKey returns the term of a fence key, or false for any other key.
func ParseKey(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return 0, false
	}
	t, ok := ParseInv(rest)
	if !ok || t < 1 {
		return 0, false
	}
	return t, true
}
