// Package layout is the schema of a shard in the store: every key the
// fencing protocol writes under <root>/<shard>/, how it is built from a term
// and a generation, and how it is parsed back (docs/PROTOCOL.md, section 2).
// It is the one place that knows the key names; the bodies stored at them
// are encoded by the packages that own them (fence, translog, seal).
//
// Numbers in listed keys are inverted (Inv), so a plain lexicographic LIST
// returns the highest term, and within a term the highest generation,
// first:
//
//	fence/fence__<inv T>                 fence key of term T
//	seal/seal__<inv T>                   seal marker of term T
//	translog/md__<inv T>__<inv g>        md (sync record or poison) of generation g of term T
//	translog/data/<T>/<g>.tlog           payload too large to inline in its md
//	checkpoint/ckpt__<inv T>__<inv g>    checkpoint manifest
//	checkpoint/files/<T>/<g>/<name>      checkpoint files
//	settings/fencing                     the shard's fencing settings
package layout

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Folders and key prefixes, relative to a shard's container.
const (
	// FenceDir is the folder of a shard's fence keys.
	FenceDir = "fence/"
	// FencePrefix is the common prefix of every fence key.
	FencePrefix = FenceDir + "fence__"
	// SealDir is the folder of a shard's seal markers.
	SealDir = "seal/"
	// MarkerPrefix is the common prefix of every seal marker key.
	MarkerPrefix = SealDir + "seal__"
	// TranslogDir is the folder of a shard's translog.
	TranslogDir = "translog/"
	// MDPrefix is the common prefix of every md key.
	MDPrefix = TranslogDir + "md__"
	// DataDir holds the payloads too large to inline in their md.
	DataDir = TranslogDir + "data/"
	// CheckpointDir is the folder of a shard's checkpoints.
	CheckpointDir = "checkpoint/"
	// ManifestPrefix is the common prefix of every checkpoint manifest.
	ManifestPrefix = CheckpointDir + "ckpt__"
	// FilesDir holds checkpoint files, under <term>/<gen>/.
	FilesDir = CheckpointDir + "files/"
	// SettingsDir is the folder of a shard's settings.
	SettingsDir = "settings/"
	// FencingKey holds the shard's fencing settings, created at its first
	// open.
	FencingKey = SettingsDir + "fencing"
)

// TermGen names generation Gen of term Term: what one md, one data object
// or one checkpoint belongs to.
type TermGen struct {
	Term, Gen int64
}

// Less orders by term, then generation.
func (p TermGen) Less(q TermGen) bool {
	return p.Term < q.Term || p.Term == q.Term && p.Gen < q.Gen
}

func (p TermGen) String() string { return fmt.Sprintf("term %d gen %d", p.Term, p.Gen) }

const invDigits = 19

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

// FenceKey is the fence key of term: fence/fence__<inv T>.
func FenceKey(term int64) string { return FencePrefix + Inv(term) }

// ParseFenceKey returns the term of a fence key, or false for any other key.
func ParseFenceKey(key string) (int64, bool) { return parseTerm(key, FencePrefix) }

// MarkerKey is the seal marker of term: seal/seal__<inv T>.
func MarkerKey(term int64) string { return MarkerPrefix + Inv(term) }

// ParseMarkerKey returns the term a marker key names.
func ParseMarkerKey(key string) (int64, bool) { return parseTerm(key, MarkerPrefix) }

// MDKey is the md key of generation gen of term:
// translog/md__<inv T>__<inv g>.
func MDKey(term, gen int64) string { return MDTermPrefix(term) + Inv(gen) }

// MDTermPrefix is the prefix of every md key of term.
func MDTermPrefix(term int64) string { return MDPrefix + Inv(term) + "__" }

// ParseMDKey returns the term and generation an md key names (both at
// least 1).
func ParseMDKey(key string) (TermGen, bool) { return parseTermGen(key, MDPrefix, 1) }

// DataKey is where the payload of a sync too large to inline lives:
// translog/data/<T>/<g>.tlog. The name is fixed by (term, generation), so a
// retried PUT rewrites the same bytes.
func DataKey(term, gen int64) string {
	return DataDir + strconv.FormatInt(term, 10) + "/" + strconv.FormatInt(gen, 10) + ".tlog"
}

// ParseDataKey returns the term and generation of a data object key.
func ParseDataKey(key string) (TermGen, bool) {
	rest, ok := strings.CutPrefix(key, DataDir)
	if !ok {
		return TermGen{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".tlog")
	if !ok {
		return TermGen{}, false
	}
	ts, gs, ok := strings.Cut(rest, "/")
	if !ok {
		return TermGen{}, false
	}
	return parseDecimalPair(ts, gs, 1)
}

// ManifestKey is the manifest of the checkpoint term published at gen:
// checkpoint/ckpt__<inv T>__<inv g>.
func ManifestKey(term, gen int64) string { return ManifestTermPrefix(term) + Inv(gen) }

// ManifestTermPrefix is the prefix of every manifest key of term.
func ManifestTermPrefix(term int64) string { return ManifestPrefix + Inv(term) + "__" }

// ParseManifestKey returns the term and generation a manifest key names (a
// checkpoint at a term's restore point may be at generation 0).
func ParseManifestKey(key string) (TermGen, bool) { return parseTermGen(key, ManifestPrefix, 0) }

// FilePrefix is where the files of checkpoint (term, gen) live:
// checkpoint/files/<T>/<g>/. The names are the checkpoint's alone, so files
// are written with plain PUTs before the manifest that makes them visible.
func FilePrefix(term, gen int64) string {
	return FilesDir + strconv.FormatInt(term, 10) + "/" + strconv.FormatInt(gen, 10) + "/"
}

// ParseFileKey returns the checkpoint a file key belongs to.
func ParseFileKey(key string) (TermGen, bool) {
	rest, ok := strings.CutPrefix(key, FilesDir)
	if !ok {
		return TermGen{}, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 {
		return TermGen{}, false
	}
	return parseDecimalPair(parts[0], parts[1], 0)
}

// parseTerm parses prefix<inv T> with T >= 1.
func parseTerm(key, prefix string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	t, ok := ParseInv(rest)
	return t, ok && t >= 1
}

// parseTermGen parses prefix<inv T>__<inv g> with T >= 1 and g >= minGen.
func parseTermGen(key, prefix string, minGen int64) (TermGen, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return TermGen{}, false
	}
	ts, gs, ok := strings.Cut(rest, "__")
	if !ok {
		return TermGen{}, false
	}
	term, ok1 := ParseInv(ts)
	gen, ok2 := ParseInv(gs)
	if !ok1 || !ok2 || term < 1 || gen < minGen {
		return TermGen{}, false
	}
	return TermGen{Term: term, Gen: gen}, true
}

// parseDecimalPair parses the decimal term and generation of a data or
// checkpoint file key, with T >= 1 and g >= minGen.
func parseDecimalPair(ts, gs string, minGen int64) (TermGen, bool) {
	t, err1 := strconv.ParseInt(ts, 10, 64)
	g, err2 := strconv.ParseInt(gs, 10, 64)
	if err1 != nil || err2 != nil || t < 1 || g < minGen {
		return TermGen{}, false
	}
	return TermGen{Term: t, Gen: g}, true
}

// MaxNameLen bounds a shard id or a master cluster name: it becomes a key
// prefix on every store.
const MaxNameLen = 128

// MasterShardPrefix starts the shard id of every master's operation log:
// the master of cluster C keeps its log and snapshots in shard
// "master-C".
const MasterShardPrefix = "master-"

// CheckName says why name cannot be a single safe path segment of a key,
// or returns nil: 1 to MaxNameLen characters of A-Z a-z 0-9 . _ -, not
// starting with '.' or '-'. Anything else could escape the shard's prefix
// or clash with another shard's keys. The error reads as the end of a
// sentence naming the value (`shard id "x" ` + err).
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("is %d bytes long", len(name))
	case name[0] == '.' || name[0] == '-':
		return errors.New("starts with '.' or '-'")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("has %s at byte %d", byteName(c), i)
		}
	}
	return nil
}

// byteName shows one byte of a name: the character if it is printable
// ASCII, else its value (a byte of a multi-byte character is not a
// character of its own).
func byteName(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("0x%02X", c)
}
