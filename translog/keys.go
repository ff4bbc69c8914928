package translog

import (
	"strconv"
	"strings"

	"github.com/shardfence/shardfence/fence"
)

const (
	// Dir is the folder of a shard's translog.
	Dir = "translog/"
	// MDPrefix is the common prefix of every md key.
	MDPrefix = Dir + "md__"
	// DataDir holds the payloads too large to inline.
	DataDir = Dir + "data/"
)

// MDKey is the md key of generation gen of term: translog/md__<inv T>__<inv g>.
// Inverted numbers make a LIST return the newest term, then its newest
// generation, first.
func MDKey(term, gen int64) string {
	return MDPrefix + fence.Inv(term) + "__" + fence.Inv(gen)
}

// MDTermPrefix is the prefix of every md key of term.
func MDTermPrefix(term int64) string { return MDPrefix + fence.Inv(term) + "__" }

// ParseMDKey returns the term and generation an md key names.
func ParseMDKey(key string) (term, gen int64, ok bool) {
	rest, ok := strings.CutPrefix(key, MDPrefix)
	if !ok {
		return 0, 0, false
	}
	ts, gs, ok := strings.Cut(rest, "__")
	if !ok {
		return 0, 0, false
	}
	term, ok1 := fence.ParseInv(ts)
	gen, ok2 := fence.ParseInv(gs)
	if !ok1 || !ok2 || term < 1 || gen < 1 {
		return 0, 0, false
	}
	return term, gen, true
}

// DataKey is where the payload of a sync too large to inline lives:
// translog/data/<T>/<g>.tlog. The name is fixed by (term, generation), so a
// retried PUT rewrites the same bytes.
func DataKey(term, gen int64) string {
	return DataDir + strconv.FormatInt(term, 10) + "/" + strconv.FormatInt(gen, 10) + ".tlog"
}
