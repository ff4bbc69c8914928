package translog

import "github.com/shardfence/shardfence/layout"

// The translog's key names, kept here for callers of this package; the
// store layout lives in package layout.
const (
	// Dir is the folder of a shard's translog (layout.TranslogDir).
	Dir = layout.TranslogDir
	// MDPrefix is the common prefix of every md key (layout.MDPrefix).
	MDPrefix = layout.MDPrefix
	// DataDir holds the payloads too large to inline (layout.DataDir).
	DataDir = layout.DataDir
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
