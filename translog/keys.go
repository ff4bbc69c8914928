package translog

import "github.com/shardfence/shardfence/layout"

// The translog's old key names. Package layout is the one place key names
// are built and parsed; these stay for callers of this package.
const (
	// Deprecated: use layout.TranslogDir.
	Dir = layout.TranslogDir
	// Deprecated: use layout.MDPrefix.
	MDPrefix = layout.MDPrefix
	// Deprecated: use layout.DataDir.
	DataDir = layout.DataDir
)

// MDKey is the md key of generation gen of term.
//
// Deprecated: use layout.MDKey.
func MDKey(term, gen int64) string { return layout.MDKey(term, gen) }

// MDTermPrefix is the prefix of every md key of term.
//
// Deprecated: use layout.MDTermPrefix.
func MDTermPrefix(term int64) string { return layout.MDTermPrefix(term) }

// ParseMDKey returns the term and generation an md key names.
//
// Deprecated: use layout.ParseMDKey.
func ParseMDKey(key string) (term, gen int64, ok bool) {
	p, ok := layout.ParseMDKey(key)
	return p.Term, p.Gen, ok
}

// DataKey is where the payload of a sync too large to inline lives.
//
// Deprecated: use layout.DataKey.
func DataKey(term, gen int64) string { return layout.DataKey(term, gen) }
