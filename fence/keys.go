package fence

import "github.com/shardfence/shardfence/layout"

// The fence keys' old names. Package layout is the one place key names
// are built and parsed; these stay for callers of this package.
const (
	// Deprecated: use layout.FenceDir.
	Dir = layout.FenceDir
	// Deprecated: use layout.FencePrefix.
	KeyPrefix = layout.FencePrefix
)

// Inv maps n to MaxInt64-n, zero-padded to 19 digits.
//
// Deprecated: use layout.Inv.
func Inv(n int64) string { return layout.Inv(n) }

// ParseInv inverts Inv.
//
// Deprecated: use layout.ParseInv.
func ParseInv(s string) (int64, bool) { return layout.ParseInv(s) }

// Key is the fence key of term.
//
// Deprecated: use layout.FenceKey.
func Key(term int64) string { return layout.FenceKey(term) }

// ParseKey returns the term of a fence key, or false for any other key.
//
// Deprecated: use layout.ParseFenceKey.
func ParseKey(key string) (int64, bool) { return layout.ParseFenceKey(key) }
