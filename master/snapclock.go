package master

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Complete snapshot manifests and clock mapping.
//
// A complete snapshot stores lease and soft-pin deadlines as they mean on the
// master that took it. Version 2.0.0 stores them as that master's steady
// nanoseconds and the manifest carries the one clock pair (S0 wall, C0
// steady) captured while the state was frozen:
//
//	messagepack|2.0.0|<snapshot id>|<S0 Unix ns>|<C0 steady ns>
//
// Version 1.0.0 (messagepack|1.0.0|<snapshot id>) stores them as wall-clock
// Unix milliseconds and has no pair. A restore captures its own pair (S1,
// C1) once, before decoding, and converts every deadline D0 with checked
// arithmetic:
//
//	v2: remaining = (S0 + (D0 - C0)) - S1,  new = C1 + remaining
//	v1: remaining = D0 ms * 1e6 - S1,        new = C1 + remaining
//
// so downtime and restore time are consumed, an expired deadline stays
// expired (never a default TTL), and a wall clock ahead of the snapshot
// taker's shortens what remains while one behind lengthens it, by exactly
// the skew. The version decides the decoder; nothing is inferred from an
// integer's magnitude.

// Snapshot format versions, as the manifest names them.
const (
	SnapshotVersion1 = "1.0.0"
	SnapshotVersion2 = "2.0.0"
	manifestCodec    = "messagepack"
)

// SnapshotFormat selects the complete snapshot format a master writes.
type SnapshotFormat uint8

// Formats. V2 is the default; V1 exists for compatibility with readers
// that know only it.
const (
	SnapshotV2 SnapshotFormat = iota
	SnapshotV1
)

func (f SnapshotFormat) version() string {
	if f == SnapshotV1 {
		return SnapshotVersion1
	}
	return SnapshotVersion2
}

// ParseSnapshotFormat reads "v1" or "v2".
func ParseSnapshotFormat(s string) (SnapshotFormat, error) {
	switch s {
	case "v2", "2", SnapshotVersion2:
		return SnapshotV2, nil
	case "v1", "1", SnapshotVersion1:
		return SnapshotV1, nil
	}
	return 0, fmt.Errorf("%w: snapshot format %q (v1 or v2)", ErrInvalidArgument, s)
}

// ClockPair is one reading of both clocks, taken together.
type ClockPair struct {
	Wall   int64 // Unix nanoseconds
	Steady SteadyTime
}

// SnapshotManifest is a parsed complete snapshot manifest.
type SnapshotManifest struct {
	Version string // SnapshotVersion1 or SnapshotVersion2
	ID      string
	// Clock is the (S0, C0) pair of a v2 snapshot; zero for v1.
	Clock ClockPair
}

// Snapshot errors, wrapped in a *SnapshotError. A restore that meets one
// refuses the whole candidate and falls back to an older one.
var (
	// ErrSnapshotManifest: the manifest is malformed or of a version this
	// build does not read.
	ErrSnapshotManifest = errors.New("bad complete snapshot manifest")
	// ErrClockConversion: a deadline does not convert to this master's
	// clock without overflow.
	ErrClockConversion = errors.New("snapshot deadline conversion overflows")
	// ErrSnapshotPayload: a payload file is malformed, of another version
	// than the manifest, or inconsistent with the rest of the snapshot.
	ErrSnapshotPayload = errors.New("bad complete snapshot payload")
)

// SnapshotError names the snapshot and file a restore refused.
type SnapshotError struct {
	ID     string
	File   string
	Err    error
	Detail string
}

func (e *SnapshotError) Error() string {
	where := "complete snapshot"
	if e.ID != "" {
		where += " " + strconv.Quote(e.ID)
	}
	if e.File != "" {
		where += " file " + strconv.Quote(e.File)
	}
	return fmt.Sprintf("%s: %v: %s (the candidate is refused whole; an older one is tried)", where, e.Err, e.Detail)
}

func (e *SnapshotError) Unwrap() error { return e.Err }

// validSnapshotID: non-empty, printable, no separator.
func validSnapshotID(id string) error {
	if id == "" || len(id) > 256 {
		return fmt.Errorf("snapshot id of %d bytes (1 to 256)", len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '|' || c < 0x21 || c > 0x7e {
			return fmt.Errorf("snapshot id %q holds a separator, a space or a non-printable byte", id)
		}
	}
	return nil
}

// FormatSnapshotManifest returns the manifest line.
func FormatSnapshotManifest(m SnapshotManifest) (string, error) {
	if err := validSnapshotID(m.ID); err != nil {
		return "", &SnapshotError{ID: m.ID, Err: ErrSnapshotManifest, Detail: err.Error()}
	}
	switch m.Version {
	case SnapshotVersion1:
		return strings.Join([]string{manifestCodec, SnapshotVersion1, m.ID}, "|"), nil
	case SnapshotVersion2:
		if m.Clock.Steady <= 0 {
			return "", &SnapshotError{ID: m.ID, Err: ErrSnapshotManifest, Detail: fmt.Sprintf("steady reading %d (steady readings are positive)", m.Clock.Steady)}
		}
		return strings.Join([]string{manifestCodec, SnapshotVersion2, m.ID, strconv.FormatInt(m.Clock.Wall, 10), strconv.FormatInt(int64(m.Clock.Steady), 10)}, "|"), nil
	}
	return "", &SnapshotError{ID: m.ID, Err: ErrSnapshotManifest, Detail: fmt.Sprintf("version %q", m.Version)}
}

// ParseSnapshotManifest parses a manifest line. Every field must be
// present and canonical (a number written as FormatSnapshotManifest writes
// it); anything else is ErrSnapshotManifest.
func ParseSnapshotManifest(line string) (SnapshotManifest, error) {
	bad := func(id, format string, args ...any) (SnapshotManifest, error) {
		return SnapshotManifest{}, &SnapshotError{ID: id, Err: ErrSnapshotManifest, Detail: fmt.Sprintf(format, args...)}
	}
	f := strings.Split(line, "|")
	if len(f) < 3 || f[0] != manifestCodec {
		return bad("", "not a snapshot manifest (%d bytes)", len(line))
	}
	m := SnapshotManifest{Version: f[1], ID: f[2]}
	if err := validSnapshotID(m.ID); err != nil {
		return bad("", "%v", err)
	}
	switch m.Version {
	case SnapshotVersion1:
		if len(f) != 3 {
			return bad(m.ID, "version %s has 3 fields, this one %d", m.Version, len(f))
		}
		return m, nil
	case SnapshotVersion2:
		if len(f) != 5 {
			return bad(m.ID, "version %s has 5 fields (codec, version, id, S0, C0), this one %d: a clock field is missing", m.Version, len(f))
		}
		s0, err1 := strictInt(f[3])
		c0, err2 := strictInt(f[4])
		switch {
		case err1 != nil:
			return bad(m.ID, "S0 %q: %v", trunc(f[3]), err1)
		case err2 != nil:
			return bad(m.ID, "C0 %q: %v", trunc(f[4]), err2)
		case c0 <= 0:
			return bad(m.ID, "C0 %d is not a steady reading (they are positive)", c0)
		}
		m.Clock = ClockPair{Wall: s0, Steady: SteadyTime(c0)}
		return m, nil
	}
	return bad(m.ID, "version %q, this build reads %s and %s", trunc(m.Version), SnapshotVersion1, SnapshotVersion2)
}

// strictInt parses a decimal int64 written canonically: no sign but a
// leading '-', no leading zeros, no spaces.
func strictInt(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("not a 64-bit decimal integer")
	}
	if strconv.FormatInt(v, 10) != s {
		return 0, errors.New("not written canonically")
	}
	return v, nil
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Checked int64 arithmetic: ok is false on overflow.
func addInt(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

func subInt(a, b int64) (int64, bool) {
	s := a - b
	if (b > 0 && s > a) || (b < 0 && s < a) {
		return 0, false
	}
	return s, true
}

func mulInt(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return c, true
}

// convertV2 maps a v2 deadline d0 (the snapshot master's steady domain)
// into this master's: (S0 + (d0 - C0)) - S1 remains, counted from C1.
func convertV2(d0 SteadyTime, snap, now ClockPair) (SteadyTime, error) {
	diff, ok1 := subInt(int64(d0), int64(snap.Steady))
	wall, ok2 := addInt(snap.Wall, diff)
	remaining, ok3 := subInt(wall, now.Wall)
	out, ok4 := addInt(int64(now.Steady), remaining)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, fmt.Errorf("%w: deadline %d with S0 %d, C0 %d, S1 %d, C1 %d", ErrClockConversion, d0, snap.Wall, snap.Steady, now.Wall, now.Steady)
	}
	return SteadyTime(out), nil
}

// convertV1 maps a v1 deadline (wall-clock Unix milliseconds) into this
// master's steady domain: d0 ms - S1 remains, counted from C1.
func convertV1(ms int64, now ClockPair) (SteadyTime, error) {
	ns, ok1 := mulInt(ms, 1e6)
	remaining, ok2 := subInt(ns, now.Wall)
	out, ok3 := addInt(int64(now.Steady), remaining)
	if !ok1 || !ok2 || !ok3 {
		return 0, fmt.Errorf("%w: wall deadline %d ms with S1 %d, C1 %d", ErrClockConversion, ms, now.Wall, now.Steady)
	}
	return SteadyTime(out), nil
}

// legacyWallMS is the v1 adapter's write side: a steady deadline as wall
// milliseconds through the snapshot's one pair, S0 + (d - C0), rounded
// down.
func legacyWallMS(d SteadyTime, snap ClockPair) (int64, error) {
	diff, ok1 := subInt(int64(d), int64(snap.Steady))
	wall, ok2 := addInt(snap.Wall, diff)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("%w: deadline %d with S0 %d, C0 %d", ErrClockConversion, d, snap.Wall, snap.Steady)
	}
	ms := wall / 1e6
	if wall%1e6 < 0 {
		ms--
	}
	return ms, nil
}
