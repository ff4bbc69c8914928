package master

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The fixtures under testdata/snapshot-1.0.0 and testdata/snapshot-2.0.0
// are snapMaster's state as the msgpack-library encoder of earlier
// releases wrote it (a single objects chunk). Every later reader must
// restore them to the same state.
func TestSnapshotFixturesRestore(t *testing.T) {
	src, clk := snapMaster(t, Config{})
	before := remaining(src, clk, "active")
	soft := lookup(src, "t", "soft")
	softLeft := toDuration(SteadyTime(soft.softPin.Load()) - clk.Steady())
	for _, version := range []string{SnapshotVersion1, SnapshotVersion2} {
		t.Run(version, func(t *testing.T) {
			dir := filepath.Join("testdata", "snapshot-"+version)
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]string{}
			for _, e := range ents {
				files[e.Name()] = filepath.Join(dir, e.Name())
			}
			downtime := 4 * time.Second
			m, clk2, res, err := restoreAt(t, Config{}, files, clk.Wall().Add(downtime))
			if err != nil {
				t.Fatal(err)
			}
			if res.Manifest.Version != version || res.Objects != 4 || res.Dropped != 1 || res.Segments != 1 || res.Expired != 3 {
				t.Fatalf("restore %+v", res)
			}
			tol := time.Duration(0)
			if version == SnapshotVersion1 {
				tol = time.Millisecond // wall milliseconds round down
			}
			if got, want := remaining(m, clk2, "active"), before-downtime; got > want || got < want-tol {
				t.Fatalf("active lease: %v remain, want %v", got, want)
			}
			o := lookup(m, "t", "soft")
			if got, want := toDuration(SteadyTime(o.softPin.Load())-clk2.Steady()), softLeft-downtime; got > want || got < want-tol || !o.softPinEnabled {
				t.Fatalf("soft pin: %v left, want %v", got, want)
			}
			if o.group == nil || o.group.key != (groupKey{"t", "g"}) || len(m.groups[groupKey{"t", "g"}].members) != 1 {
				t.Fatalf("soft object's group %+v", o.group)
			}
			if o := lookup(m, "t", "hard"); o == nil || !o.hardPinned || o.softPinEnabled {
				t.Fatal("hard-pinned object lost its pin")
			}
			a := lookup(m, "t", "active")
			if a.dataType != 3 || a.client.id != "c1" || a.size != 100 || len(a.replicas) != 1 {
				t.Fatalf("active object restored as %+v", a)
			}
			r, sr := a.replicas[0], lookup(src, "t", "active").replicas[0]
			if r.id != sr.id || r.offset != sr.offset || r.size != sr.size || r.kind != MemoryReplica || r.status != ReplicaComplete || r.seg == nil || r.seg.id != 1 {
				t.Fatalf("active replica restored as %+v, taken as %+v", r, sr)
			}
			if lookup(m, "t", "open") != nil || m.tenants["t"].objects.Load() != 4 || m.tenants["t"].used.Load() != 400 {
				t.Fatalf("tenant usage %d objects, %d bytes", m.tenants["t"].objects.Load(), m.tenants["t"].used.Load())
			}
			if got := m.segments[1].replicas.Load(); got != 4 {
				t.Fatalf("segment counts %d replicas, want 4", got)
			}
		})
	}
}
