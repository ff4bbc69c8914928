package fence

import "github.com/shardfence/shardfence/layout"

// The fence keys' names of package layout, for callers of this package.
const (
	Dir       = layout.FenceDir    // the fence keys
	KeyPrefix = layout.FencePrefix // every fence key
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
