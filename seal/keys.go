package seal

import "github.com/shardfence/shardfence/layout"

// The seal, checkpoint and settings key names of package layout, for
// callers of this package. FencingKey holds the shard's fencing settings,
// created at its first open. Openers never rewrite it; only the fencing
// rewrite (BeginFencingRewrite, FinishFencingRewrite) changes it, under the
// rules of docs/PROTOCOL.md ("Rewriting the stored fencing"): a successor's
// lease wait depends on the mode its predecessors ran, so the mode is the
// shard's, not the caller's.
const (
	Dir            = layout.SealDir        // seal markers
	MarkerPrefix   = layout.MarkerPrefix   // every seal marker key
	CheckpointDir  = layout.CheckpointDir  // checkpoints
	ManifestPrefix = layout.ManifestPrefix // every checkpoint manifest
	FilesDir       = layout.FilesDir       // checkpoint files, under <term>/<gen>/
	FencingKey     = layout.FencingKey     // the shard's fencing settings
)

// MarkerKey is the seal marker of term (layout.MarkerKey).
func MarkerKey(term int64) string { return layout.MarkerKey(term) }

// ParseMarkerKey returns the term a marker key names.
func ParseMarkerKey(key string) (int64, bool) { return layout.ParseMarkerKey(key) }

// ManifestKey is the manifest of the checkpoint term published at gen
// (layout.ManifestKey).
func ManifestKey(term, gen int64) string { return layout.ManifestKey(term, gen) }

// ParseManifestKey returns the term and generation a manifest key names.
func ParseManifestKey(key string) (term, gen int64, ok bool) {
	p, ok := layout.ParseManifestKey(key)
	return p.Term, p.Gen, ok
}

// FilePrefix is where the files of checkpoint (term, gen) live
// (layout.FilePrefix).
func FilePrefix(term, gen int64) string { return layout.FilePrefix(term, gen) }
