package seal

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// RestorePoint is where a term's history begins: every generation up to Gen
// of the lineage that ends in term Term. Term 0 is the empty restore point
// of a new shard.
type RestorePoint struct {
	Term  int64  // the lineage term (the term of the previous marker)
	Gen   int64  // the last generation of the lineage
	MDKey string // the md holding Gen; empty when Gen is 0
}

// Marker is the immutable lineage record of one term, written with
// create-if-absent before the term opens for writes.
type Marker struct {
	Shard      string
	Term       int64
	Allocation string
	Restore    RestorePoint
	// Poisoned is the md key that cut the lineage term: the poison this
	// seal created or found. Empty for a new shard.
	Poisoned string
	// Prev is the marker of the lineage term this one follows; empty for
	// the first term of a shard.
	Prev string
}

const (
	markerTag     = "shardfence.seal"
	markerVersion = "v1"
	markerFields  = 11
)

func (m Marker) validate() error {
	if err := ident.Validate("shard", m.Shard, false); err != nil {
		return err
	}
	if err := ident.Validate("allocation", m.Allocation, false); err != nil {
		return err
	}
	r := m.Restore
	switch {
	case m.Term < 1:
		return fmt.Errorf("%w: marker term %d", fence.ErrInvalidArgument, m.Term)
	case r.Term < 0 || r.Term >= m.Term || r.Gen < 0:
		return fmt.Errorf("%w: restore point (term %d, gen %d) of term %d", fence.ErrInvalidArgument, r.Term, r.Gen, m.Term)
	case (r.Gen == 0) != (r.MDKey == ""):
		return fmt.Errorf("%w: restore gen %d with md key %q", fence.ErrInvalidArgument, r.Gen, r.MDKey)
	case (r.Term == 0) != (m.Prev == ""):
		return fmt.Errorf("%w: restore term %d with previous marker %q", fence.ErrInvalidArgument, r.Term, m.Prev)
	case r.Term > 0 && m.Prev != layout.MarkerKey(r.Term):
		return fmt.Errorf("%w: previous marker %q is not the marker of restore term %d", fence.ErrInvalidArgument, m.Prev, r.Term)
	}
	if r.MDKey != "" {
		if p, ok := layout.ParseMDKey(r.MDKey); !ok || p.Gen != r.Gen {
			return fmt.Errorf("%w: restore md key %q does not name generation %d", fence.ErrInvalidArgument, r.MDKey, r.Gen)
		}
	}
	if m.Poisoned != "" {
		if p, ok := layout.ParseMDKey(m.Poisoned); !ok || p.Term != r.Term {
			return fmt.Errorf("%w: poisoned key %q is not an md of restore term %d", fence.ErrInvalidArgument, m.Poisoned, r.Term)
		}
	}
	return nil
}

// Encode returns the body: a text line an operator can read with any
// store client, "shardfence.seal|v1|shard|term|allocation|restore term|
// restore gen|restore md|poisoned|prev|crc32c".
func (m Marker) Encode() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m.encode(), nil
}

func (m Marker) encode() []byte {
	s := strings.Join([]string{markerTag, markerVersion, m.Shard, itoa(m.Term), m.Allocation,
		itoa(m.Restore.Term), itoa(m.Restore.Gen), m.Restore.MDKey, m.Poisoned, m.Prev}, "|")
	return []byte(fmt.Sprintf("%s|%08x", s, translog.Checksum([]byte(s))))
}

// DecodeMarker parses the marker stored at key and checks it belongs to
// shard and to the term the key names. Errors are *fence.BodyError.
func DecodeMarker(shard, key string, body []byte) (Marker, error) {
	bad := func(err error, format string, args ...any) (Marker, error) {
		return Marker{}, &fence.BodyError{Shard: shard, Key: key, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	f := strings.Split(string(body), "|")
	if len(f) < 2 || f[0] != markerTag {
		return bad(fence.ErrCorruptBody, "not a seal marker (%d bytes)", len(body))
	}
	if f[1] != markerVersion {
		return bad(fence.ErrUnknownVersion, "seal marker version %q, this build reads %s", trunc(f[1]), markerVersion)
	}
	if len(f) != markerFields {
		return bad(fence.ErrCorruptBody, "seal marker has %d fields, want %d", len(f), markerFields)
	}
	var m Marker
	m.Shard, m.Allocation, m.Restore.MDKey, m.Poisoned, m.Prev = f[2], f[4], f[7], f[8], f[9]
	for i, p := range []*int64{&m.Term, &m.Restore.Term, &m.Restore.Gen} {
		v, err := strconv.ParseInt(f[[]int{3, 5, 6}[i]], 10, 64)
		if err != nil {
			return bad(fence.ErrCorruptBody, "field %q is not a number", trunc(f[[]int{3, 5, 6}[i]]))
		}
		*p = v
	}
	if string(m.encode()) != string(body) {
		return bad(fence.ErrCorruptBody, "seal marker checksum or form does not match its content")
	}
	if err := m.validate(); err != nil {
		return bad(fence.ErrCorruptBody, "%v", err)
	}
	if m.Shard != shard {
		return bad(fence.ErrForeignShard, "seal marker names shard %q", m.Shard)
	}
	if t, ok := layout.ParseMarkerKey(key); ok && t != m.Term {
		return bad(fence.ErrForeignShard, "seal marker of term %d under the key of term %d", m.Term, t)
	}
	return m, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
