package master

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shardfence/shardfence/master/internal/snapcodec"
)

// rec is one object record of a hand-made snapshot: a memory replica at
// off of size on segment 1, complete unless incomplete is set.
type rec struct {
	key        string
	off, size  uint64
	incomplete bool
}

// handSnapshot writes a 2.0.0 snapshot of one segment of segSize bytes
// and the given objects, in one chunk.
func handSnapshot(t *testing.T, segSize uint64, recs []rec) map[string]string {
	t.Helper()
	dir := t.TempDir()
	man := SnapshotManifest{Version: SnapshotVersion2, ID: "hand", Clock: ClockPair{Wall: t0.UnixNano(), Steady: 1}}
	line, err := FormatSnapshotManifest(man)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	put := func(name string, b []byte) {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(SnapshotManifestFile, []byte(line))
	var w snapcodec.Encoder
	encodeHeader(&w, man, snapshotSegmentsFile, 1)
	w.Uint(1)
	w.Uint(uint64(len(recs)))
	w.Arr(7)
	w.Uint(1)
	w.Str("seg")
	w.Str("c1")
	w.Uint(0)
	w.Uint(segSize)
	w.Str("c1:1")
	w.Bool(true)
	put(snapshotSegmentsFile, w.B)
	w.B = nil
	encodeHeader(&w, man, chunkName(0), len(recs))
	for i, r := range recs {
		w.Arr(13)
		w.Str("t")
		w.Str(r.key)
		w.Str("c1")
		w.Uint(r.size)
		w.Uint(0)
		w.Str("")
		w.Bool(false)
		w.Bool(false)
		w.Int(1 << 40)
		w.Nil()
		w.Int(0)
		w.Uint(uint64(i + 1))
		w.Arr(1)
		w.Arr(6)
		w.Uint(uint64(i + 1))
		w.Uint(uint64(MemoryReplica))
		if r.incomplete {
			w.Uint(uint64(ReplicaProcessing))
		} else {
			w.Uint(uint64(ReplicaComplete))
		}
		w.Uint(1)
		w.Uint(r.off)
		w.Uint(r.size)
	}
	put(chunkName(0), w.B)
	return files
}

// Duplicates (kept or dropped, in either order), overlapping ranges (also
// among enough ranges that they are sorted in pieces) and a range past
// its segment refuse the whole snapshot and leave the master empty; the
// same ranges without the fault restore.
func TestSnapshotRestoreRefusesDuplicatesAndOverlaps(t *testing.T) {
	many := func(n int, edit func([]rec)) []rec {
		rs := make([]rec, n)
		for i := range rs {
			// Placed out of order, so the sort has work to do.
			j := (i * 7919) % n
			rs[i] = rec{key: "k" + strconv.Itoa(i), off: uint64(j) * 10, size: 10}
		}
		if edit != nil {
			edit(rs)
		}
		return rs
	}
	const big = 100_000
	for name, c := range map[string]struct {
		recs []rec
		ok   bool
	}{
		"distinct":                 {recs: []rec{{"a", 0, 10, false}, {"b", 10, 10, false}}, ok: true},
		"many distinct":            {recs: many(big, nil), ok: true},
		"kept twice":               {recs: []rec{{"a", 0, 10, false}, {"a", 10, 10, false}}},
		"dropped then kept":        {recs: []rec{{"a", 0, 10, true}, {"a", 10, 10, false}}},
		"kept then dropped":        {recs: []rec{{"a", 0, 10, false}, {"a", 10, 10, true}}},
		"dropped twice":            {recs: []rec{{"a", 0, 10, true}, {"a", 10, 10, true}}},
		"overlap":                  {recs: []rec{{"a", 0, 10, false}, {"b", 9, 10, false}}},
		"past the segment":         {recs: []rec{{"a", 995, 10, false}}},
		"many, one overlap":        {recs: many(big, func(rs []rec) { rs[big-1].off = rs[0].off + 5 })},
		"many, one duplicate":      {recs: many(big, func(rs []rec) { rs[big/2].key = rs[3].key })},
		"many, overlap at the end": {recs: many(big, func(rs []rec) { rs[1].size = 20 })},
	} {
		t.Run(name, func(t *testing.T) {
			size := uint64(1000)
			if len(c.recs) > 2 {
				size = uint64(len(c.recs)) * 10
			}
			files := handSnapshot(t, size, c.recs)
			m, _, res, err := restoreAt(t, Config{}, files, t0)
			if c.ok {
				if err != nil || res.Objects != len(c.recs) {
					t.Fatalf("restore %+v, %v", res, err)
				}
				return
			}
			var se *SnapshotError
			if !errors.As(err, &se) || !errors.Is(err, ErrSnapshotPayload) {
				t.Fatalf("restore %+v, %v; want a payload refusal", res, err)
			}
			if !m.empty() || len(m.tenants) != 0 {
				t.Fatal("a refused snapshot left state behind")
			}
		})
	}
}
