package fence

import "github.com/shardfence/shardfence/layout"

// The fence keys' names, kept here for callers of this package; the store
// layout lives in package layout.
const (
	// Dir is the folder of a shard's fence keys (layout.FenceDir).
	Dir = layout.FenceDir
	// KeyPrefix is the common prefix of every fence key
	// (layout.FencePrefix).
	KeyPrefix = layout.FencePrefix
)

// Inv is layout.Inv: MaxInt64-n, zero-padded to 19 digits, so a plain
// LIST returns the highest term (or generation) first.
func Inv(n int64) string { return layout.Inv(n) }

// ParseInv is layout.ParseInv.
func ParseInv(s string) (int64, bool) { return layout.ParseInv(s) }

// Key is the fence key of term (layout.FenceKey).
func Key(term int64) string { return layout.FenceKey(term) }

// ParseKey returns the term of a fence key, or false for any other key
// (layout.ParseFenceKey).
func ParseKey(key string) (int64, bool) { return layout.ParseFenceKey(key) }
