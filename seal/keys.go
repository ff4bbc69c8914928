package seal

import (
	"strconv"
	"strings"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

const (
	// Dir is the folder of a shard's seal markers.
	Dir = "seal/"
	// MarkerPrefix is the common prefix of every seal marker key.
	MarkerPrefix = Dir + "seal__"
	// CheckpointDir is the folder of a shard's checkpoints.
	CheckpointDir = "checkpoint/"
	// ManifestPrefix is the common prefix of every checkpoint manifest.
	ManifestPrefix = CheckpointDir + "ckpt__"
	// FilesDir holds checkpoint files, under <term>/<gen>/.
	FilesDir = CheckpointDir + "files/"
)

// MarkerKey is the seal marker of term: seal/seal__<inv T>, so a LIST
// returns the newest marker first.
func MarkerKey(term int64) string { return MarkerPrefix + fence.Inv(term) }

// ParseMarkerKey returns the term a marker key names.
func ParseMarkerKey(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, MarkerPrefix)
	if !ok {
		return 0, false
	}
	t, ok := fence.ParseInv(rest)
	return t, ok && t >= 1
}

// ManifestKey is the manifest of the checkpoint term published at gen:
// checkpoint/ckpt__<inv T>__<inv g>.
func ManifestKey(term, gen int64) string {
	return ManifestPrefix + fence.Inv(term) + "__" + fence.Inv(gen)
}

// ParseManifestKey returns the term and generation a manifest key names.
func ParseManifestKey(key string) (term, gen int64, ok bool) {
	rest, ok := strings.CutPrefix(key, ManifestPrefix)
	if !ok {
		return 0, 0, false
	}
	ts, gs, ok := strings.Cut(rest, "__")
	if !ok {
		return 0, 0, false
	}
	term, ok1 := fence.ParseInv(ts)
	gen, ok2 := fence.ParseInv(gs)
	if !ok1 || !ok2 || term < 1 || gen < 0 {
		return 0, 0, false
	}
	return term, gen, true
}

// FilePrefix is where the files of checkpoint (term, gen) live. The names
// are the checkpoint's alone, so files are written with plain PUTs before
// the manifest that makes them visible.
func FilePrefix(term, gen int64) string {
	return FilesDir + strconv.FormatInt(term, 10) + "/" + strconv.FormatInt(gen, 10) + "/"
}

// parseFileKey returns the checkpoint a file key belongs to.
func parseFileKey(key string) (term, gen int64, ok bool) {
	rest, ok := strings.CutPrefix(key, FilesDir)
	if !ok {
		return 0, 0, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 {
		return 0, 0, false
	}
	t, err1 := strconv.ParseInt(parts[0], 10, 64)
	g, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || t < 1 || g < 0 {
		return 0, 0, false
	}
	return t, g, true
}

// parseDataKey returns the (term, gen) of a translog data object key.
func parseDataKey(key string) (term, gen int64, ok bool) {
	rest, ok := strings.CutPrefix(key, translog.DataDir)
	if !ok {
		return 0, 0, false
	}
	ts, gs, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	gs, ok = strings.CutSuffix(gs, ".tlog")
	if !ok {
		return 0, 0, false
	}
	t, err1 := strconv.ParseInt(ts, 10, 64)
	g, err2 := strconv.ParseInt(gs, 10, 64)
	if err1 != nil || err2 != nil || t < 1 || g < 1 {
		return 0, 0, false
	}
	return t, g, true
}
