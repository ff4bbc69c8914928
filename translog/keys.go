package translog

import "github.com/shardfence/shardfence/layout"

// The translog's key names of package layout, for callers of this
// package.
const (
	Dir      = layout.TranslogDir // the translog
	MDPrefix = layout.MDPrefix    // every md key
	DataDir  = layout.DataDir     // payloads too large to inline
)

// MDKey is the md key of generation gen of term (layout.MDKey).
func MDKey(term, gen int64) string { return layout.MDKey(term, gen) }

// MDTermPrefix is the prefix of every md key of term.
func MDTermPrefix(term int64) string { return layout.MDTermPrefix(term) }

// ParseMDKey returns the term and generation an md key names
// (layout.ParseMDKey).
func ParseMDKey(key string) (term, gen int64, ok bool) {
	p, ok := layout.ParseMDKey(key)
	return p.Term, p.Gen, ok
}

// DataKey is where the payload of a sync too large to inline lives
// (layout.DataKey).
func DataKey(term, gen int64) string { return layout.DataKey(term, gen) }
