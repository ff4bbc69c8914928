package seal

import "github.com/shardfence/shardfence/layout"

// The seal, checkpoint and settings keys' old names. Package layout is the
// one place key names are built and parsed; these stay for callers of this
// package. layout.FencingKey holds the shard's fencing settings, created
// at its first open. Openers never rewrite it; only the fencing rewrite
// (BeginFencingRewrite, FinishFencingRewrite) changes it, under the rules
// of docs/PROTOCOL.md ("Rewriting the stored fencing"): a successor's lease
// wait depends on the mode its predecessors ran, so the mode is the
// shard's, not the caller's.
const (
	// Deprecated: use layout.SealDir.
	Dir = layout.SealDir
	// Deprecated: use layout.MarkerPrefix.
	MarkerPrefix = layout.MarkerPrefix
	// Deprecated: use layout.CheckpointDir.
	CheckpointDir = layout.CheckpointDir
	// Deprecated: use layout.ManifestPrefix.
	ManifestPrefix = layout.ManifestPrefix
	// Deprecated: use layout.FilesDir.
	FilesDir = layout.FilesDir
	// Deprecated: use layout.FencingKey.
	FencingKey = layout.FencingKey
)

// MarkerKey is the seal marker of term.
//
// Deprecated: use layout.MarkerKey.
func MarkerKey(term int64) string { return layout.MarkerKey(term) }

// ParseMarkerKey returns the term a marker key names.
//
// Deprecated: use layout.ParseMarkerKey.
func ParseMarkerKey(key string) (int64, bool) { return layout.ParseMarkerKey(key) }

// ManifestKey is the manifest of the checkpoint term published at gen.
//
// Deprecated: use layout.ManifestKey.
func ManifestKey(term, gen int64) string { return layout.ManifestKey(term, gen) }

// ParseManifestKey returns the term and generation a manifest key names.
//
// Deprecated: use layout.ParseManifestKey.
func ParseManifestKey(key string) (term, gen int64, ok bool) {
	p, ok := layout.ParseManifestKey(key)
	return p.Term, p.Gen, ok
}

// FilePrefix is where the files of checkpoint (term, gen) live.
//
// Deprecated: use layout.FilePrefix.
func FilePrefix(term, gen int64) string { return layout.FilePrefix(term, gen) }
