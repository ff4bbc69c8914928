package master

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// snapMaster is a master with one segment and objects in every retention
// state, on a fake clock. The objects (lease after the setup):
//
//	active:  read lease of 10 s, granted at the end of the setup
//	expired: put an hour ago, never read (lease 0)
//	soft:    soft-pin enabled, lease expired, soft pin 30 min from its put
//	hard:    hard pinned, lease expired
//	open:    put started, never ended
func snapMaster(t testing.TB, cfg Config) (*Master, *FakeClock) {
	t.Helper()
	m, clk := newTestMaster(t, cfg, Options{})
	mount(t, m, "c1", 1, 1<<20)
	put(t, m, "c1", "t", "expired", 100, PutOptions{})
	put(t, m, "c1", "t", "hard", 100, PutOptions{HardPin: true})
	clk.Advance(time.Hour)
	put(t, m, "c1", "t", "soft", 100, PutOptions{SoftPin: true, Group: "g"})
	if _, err := m.PutStart(context.Background(), PutRequest{Client: "c1", Tenant: "t", Key: "open", Size: 100}); err != nil {
		t.Fatal(err)
	}
	put(t, m, "c1", "t", "active", 100, PutOptions{DataType: 3})
	clk.Advance(time.Minute)
	if _, err := m.GetReplicaList(context.Background(), "t", "active"); err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func writeSnapshot(t testing.TB, m *Master, format SnapshotFormat) map[string]string {
	t.Helper()
	dir := t.TempDir()
	files, err := m.Freeze(nil, format).WriteFiles(dir, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[f.Name] = f.Path
	}
	if files[0].Name != SnapshotManifestFile {
		t.Fatalf("first file %q, want the manifest", files[0].Name)
	}
	return out
}

// restoreAt restores files into a fresh master whose clock reads wall and a
// steady value of its own.
func restoreAt(t testing.TB, cfg Config, files map[string]string, wall time.Time) (*Master, *FakeClock, SnapshotRestore, error) {
	t.Helper()
	clk := NewFakeClock(wall)
	clk.Advance(5 * time.Second) // another steady origin than the taker's
	clk.SetWall(wall)
	if cfg.Shards == 0 {
		cfg.Shards = 16
	}
	m, err := New(cfg, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.RestoreSnapshot(context.Background(), files)
	return m, clk, res, err
}

func remaining(m *Master, clk *FakeClock, key string) time.Duration {
	return toDuration(lookup(m, "t", key).leaseDeadline() - clk.Steady())
}

// Phase 3, test 1: the v2 manifest round-trips, with its clock pair.
func TestSnapshotManifestV2RoundTrip(t *testing.T) {
	in := SnapshotManifest{Version: SnapshotVersion2, ID: "term-3-gen-42", Clock: ClockPair{Wall: 1_767_000_000_123_456_789, Steady: 987_654_321}}
	line, err := FormatSnapshotManifest(in)
	if err != nil {
		t.Fatal(err)
	}
	if line != "messagepack|2.0.0|term-3-gen-42|1767000000123456789|987654321" {
		t.Fatalf("manifest %q", line)
	}
	out, err := ParseSnapshotManifest(line)
	if err != nil || out != in {
		t.Fatalf("parsed %+v, %v; want %+v", out, err, in)
	}
}

// Phase 3, test 2: a v1 manifest is accepted, without a clock pair.
func TestSnapshotManifestV1Accepted(t *testing.T) {
	out, err := ParseSnapshotManifest("messagepack|1.0.0|legacy-7")
	if err != nil || out.Version != SnapshotVersion1 || out.ID != "legacy-7" || out.Clock != (ClockPair{}) {
		t.Fatalf("v1 manifest: %+v, %v", out, err)
	}
}

// Phase 3, test 3: missing clock fields, invalid integers and overflow.
func TestSnapshotManifestRefusals(t *testing.T) {
	for _, line := range []string{
		"",
		"messagepack|2.0.0|id",                        // both clock fields missing
		"messagepack|2.0.0|id|17",                     // C0 missing
		"messagepack|2.0.0|id|17|",                    // C0 empty
		"messagepack|2.0.0|id|x|5",                    // S0 not a number
		"messagepack|2.0.0|id|17|5.0",                 // C0 not an integer
		"messagepack|2.0.0|id|+17|5",                  // not canonical
		"messagepack|2.0.0|id|017|5",                  // not canonical
		"messagepack|2.0.0|id|17|0",                   // C0 is no steady reading
		"messagepack|2.0.0|id|17|-5",                  // C0 is no steady reading
		"messagepack|2.0.0|id|99999999999999999999|5", // S0 overflows int64
		"messagepack|2.0.0|id|17|5|extra",
		"messagepack|1.0.0|id|17|5", // v1 has no clock fields
		"messagepack|3.0.0|id|17|5",
		"json|2.0.0|id|17|5",
		"messagepack|2.0.0||17|5",
		"messagepack|2.0.0|a b|17|5",
	} {
		if _, err := ParseSnapshotManifest(line); !errors.Is(err, ErrSnapshotManifest) {
			t.Errorf("%q: %v, want ErrSnapshotManifest", line, err)
		}
	}
	// Checked arithmetic: each step of the conversion can overflow.
	for _, c := range []struct {
		d0   SteadyTime
		snap ClockPair
		now  ClockPair
	}{
		{math.MaxInt64, ClockPair{Wall: math.MaxInt64 / 2, Steady: 1}, ClockPair{Wall: 0, Steady: 1}},
		{1, ClockPair{Wall: math.MinInt64 + 5, Steady: math.MaxInt64}, ClockPair{Wall: 0, Steady: 1}},
		{10, ClockPair{Wall: 0, Steady: 5}, ClockPair{Wall: math.MinInt64, Steady: 1}},
		{10, ClockPair{Wall: math.MaxInt64 - 10, Steady: 5}, ClockPair{Wall: -10, Steady: math.MaxInt64}},
	} {
		if _, err := convertV2(c.d0, c.snap, c.now); !errors.Is(err, ErrClockConversion) {
			t.Errorf("convertV2(%d, %+v, %+v): %v, want ErrClockConversion", c.d0, c.snap, c.now, err)
		}
	}
	if _, err := convertV1(math.MaxInt64/1000, ClockPair{Wall: 0, Steady: 1}); !errors.Is(err, ErrClockConversion) {
		t.Errorf("v1 milliseconds that overflow nanoseconds: %v", err)
	}
	if v, ok := mulInt(math.MinInt64/2, 2); !ok || v != math.MinInt64 {
		t.Errorf("mulInt at the edge: %d %v", v, ok)
	}
}

// Phase 3, tests 5 and 7: with a known downtime, an active lease keeps
// what remained minus the downtime, and an expired one stays expired
// (never a default TTL). Hard pin keeps its object; the put in progress is
// dropped.
func TestSnapshotRestoreConsumesDowntime(t *testing.T) {
	for _, format := range []SnapshotFormat{SnapshotV2, SnapshotV1} {
		t.Run(format.version(), func(t *testing.T) {
			m, clk := snapMaster(t, Config{})
			before := remaining(m, clk, "active")
			files := writeSnapshot(t, m, format)
			downtime := 4 * time.Second
			m2, clk2, res, err := restoreAt(t, Config{}, files, clk.Wall().Add(downtime))
			if err != nil {
				t.Fatal(err)
			}
			if res.Objects != 4 || res.Dropped != 1 || res.Segments != 1 {
				t.Fatalf("restore %+v, want 4 objects and the open put dropped", res)
			}
			got, want := remaining(m2, clk2, "active"), before-downtime
			tol := time.Duration(0)
			if format == SnapshotV1 {
				tol = time.Millisecond // wall milliseconds round down
			}
			if got > want || got < want-tol {
				t.Fatalf("active lease: %v remain, want %v", got, want)
			}
			for _, k := range []string{"expired", "hard", "soft"} {
				if r := remaining(m2, clk2, k); r > 0 {
					t.Errorf("%s: expired lease came back with %v", k, r)
				}
			}
			if o := lookup(m2, "t", "hard"); o == nil || !o.hardPinned {
				t.Fatal("hard-pinned object lost its pin")
			}
			if lookup(m2, "t", "open") != nil {
				t.Fatal("a put in progress was restored")
			}
			if res.Expired != 3 {
				t.Fatalf("%d restored objects expired, want 3", res.Expired)
			}
			if o := lookup(m2, "t", "active"); o.dataType != 3 || o.client.id != "c1" || o.size != 100 {
				t.Fatalf("active object restored as %+v", o)
			}
		})
	}
}

// Phase 3, test 6: time spent decoding comes off the remaining lease: the
// restore pair is read before decoding, and the deadline lands in this
// master's steady domain.
func TestSnapshotRestoreDecodeTimeConsumesLease(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	before := remaining(m, clk, "active")
	files := writeSnapshot(t, m, SnapshotV2)
	clk2 := NewFakeClock(clk.Wall())
	m2, err := New(Config{Shards: 16}, Options{Clock: clk2})
	if err != nil {
		t.Fatal(err)
	}
	pair := m2.clockPair()
	decode := 3 * time.Second
	clk2.Advance(decode) // the decoding took this long
	if _, err := m2.restoreSnapshotAt(context.Background(), files, pair); err != nil {
		t.Fatal(err)
	}
	if got := remaining(m2, clk2, "active"); got != before-decode {
		t.Fatalf("active lease: %v remain after a %v decode, want %v", got, decode, before-decode)
	}
}

// Phase 3, test 8: an active soft pin converts; an expired one stays
// expired while the object stays soft-pin enabled.
func TestSnapshotRestoreSoftPin(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	soft := lookup(m, "t", "soft")
	left := toDuration(SteadyTime(soft.softPin.Load()) - clk.Steady())
	if left <= 0 {
		t.Fatal("setup: soft pin not active")
	}
	files := writeSnapshot(t, m, SnapshotV2)
	m2, clk2, _, err := restoreAt(t, Config{}, files, clk.Wall().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	o := lookup(m2, "t", "soft")
	if got := toDuration(SteadyTime(o.softPin.Load()) - clk2.Steady()); got != left-time.Minute || !o.softPinActive(clk2.Steady()) {
		t.Fatalf("soft pin: %v left, want %v", got, left-time.Minute)
	}
	// Past the soft pin: expired, still enabled.
	m3, clk3, _, err := restoreAt(t, Config{}, files, clk.Wall().Add(left+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	o = lookup(m3, "t", "soft")
	if o.softPinActive(clk3.Steady()) || !o.softPinEnabled {
		t.Fatalf("soft pin after it ran out: active %v, enabled %v", o.softPinActive(clk3.Steady()), o.softPinEnabled)
	}
	if lookup(m3, "t", "expired").softPin.Load() != 0 {
		t.Fatal("an object never soft pinned came back with a soft pin")
	}
}

// Phase 3, tests 9 and 10: the snapshot cleanup drops expired objects that
// are not hard pinned, keeps hard-pinned ones and soft-pinned ones whose
// soft pin is active.
func TestSnapshotRestoreCleanup(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	files := writeSnapshot(t, m, SnapshotV2)
	m2, _, res, err := restoreAt(t, Config{SnapshotRestoreCleanup: true}, files, clk.Wall().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res.Cleaned != 1 || lookup(m2, "t", "expired") != nil {
		t.Fatalf("cleanup: %+v; the expired object must go", res)
	}
	for _, k := range []string{"hard", "soft", "active"} {
		if lookup(m2, "t", k) == nil {
			t.Errorf("cleanup dropped %s", k)
		}
	}
	// Without the option nothing acknowledged is dropped.
	m3, _, res, err := restoreAt(t, Config{}, files, clk.Wall().Add(time.Second))
	if err != nil || res.Cleaned != 0 || lookup(m3, "t", "expired") == nil {
		t.Fatalf("restore without cleanup: %+v %v", res, err)
	}
}

// Phase 3, test 11: v1 wall milliseconds convert to local steady deadlines.
func TestSnapshotV1ConvertsWallMilliseconds(t *testing.T) {
	now := ClockPair{Wall: 1_767_000_000_000_000_000, Steady: 42}
	got, err := convertV1(1_767_000_000_000+2500, now)
	if err != nil || got != 42+SteadyTime(2500*time.Millisecond) {
		t.Fatalf("2.5 s ahead: %d %v", got, err)
	}
	got, err = convertV1(1_767_000_000_000-1000, now)
	if err != nil || got != 42-SteadyTime(time.Second) {
		t.Fatalf("a second ago stays a second ago: %d %v", got, err)
	}
	// The adapter's write side rounds down, so nothing gains time.
	ms, err := legacyWallMS(SteadyTime(1_999_999), ClockPair{Wall: 5_000_000, Steady: 1})
	if err != nil || ms != 6 {
		t.Fatalf("legacy ms %d %v, want 6", ms, err)
	}
	ms, err = legacyWallMS(SteadyTime(1), ClockPair{Wall: -1, Steady: 1})
	if err != nil || ms != -1 {
		t.Fatalf("legacy ms of -1 ns: %d %v, want -1", ms, err)
	}
}

// Phase 3, test 12: a restoring master whose wall clock is ahead sees the
// lease shorter by exactly the skew; one behind sees it longer.
func TestSnapshotRestoreClockSkew(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	before := remaining(m, clk, "active")
	files := writeSnapshot(t, m, SnapshotV2)
	for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second, 3 * time.Hour, -3 * time.Hour} {
		m2, clk2, _, err := restoreAt(t, Config{}, files, clk.Wall().Add(skew))
		if err != nil {
			t.Fatal(err)
		}
		if got := remaining(m2, clk2, "active"); got != before-skew {
			t.Errorf("skew %v: %v remain, want %v", skew, got, before-skew)
		}
	}
}

// Wall-clock jumps of hours on the running master, before the snapshot,
// change nothing a steady deadline means: the pair is read in the same
// clock the restore reads.
func TestSnapshotWallJumpsChangeNothing(t *testing.T) {
	for _, jump := range []time.Duration{5 * time.Hour, -5 * time.Hour} {
		m, clk := snapMaster(t, Config{})
		before := remaining(m, clk, "active")
		clk.SetWall(clk.Wall().Add(jump))
		if got := remaining(m, clk, "active"); got != before {
			t.Fatalf("a wall jump moved a live lease: %v -> %v", before, got)
		}
		files := writeSnapshot(t, m, SnapshotV2)
		clk.Advance(time.Second)
		m2, clk2, _, err := restoreAt(t, Config{}, files, clk.Wall())
		if err != nil {
			t.Fatal(err)
		}
		if got := remaining(m2, clk2, "active"); got != before-time.Second {
			t.Fatalf("jump %v: %v remain after restore, want %v", jump, got, before-time.Second)
		}
	}
}

// The restored master is what a promotion gives: segments await remount,
// memory replicas are unreadable until then, and the remount grants the
// recovery lease without shortening a longer historical one.
func TestSnapshotRestoreThenRemount(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	files := writeSnapshot(t, m, SnapshotV2)
	m2, clk2, _, err := restoreAt(t, Config{RecoveryLeaseTTL: time.Second}, files, clk.Wall())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m2.GetReplicaList(ctx, "t", "expired"); !errors.Is(err, ErrNoReadableReplica) {
		t.Fatalf("read before remount: %v", err)
	}
	long := remaining(m2, clk2, "active")
	if _, err := m2.ReMountSegment(ctx, "c1", []SegmentSpec{{ID: 1, Name: "seg", Size: 1 << 20, Endpoint: "c1:2"}}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(m2, clk2, "active"); got != long {
		t.Fatalf("remount shortened a historical lease: %v -> %v", long, got)
	}
	if got := remaining(m2, clk2, "hard"); got != time.Second {
		t.Fatalf("recovery lease %v", got)
	}
	if _, err := m2.GetReplicaList(ctx, "t", "hard"); err != nil {
		t.Fatal(err)
	}
	// The allocator was rebuilt from the restored replicas: new puts land
	// in free space.
	if st := m2.Stats(); st.Used != 400 || st.Objects != 4 {
		t.Fatalf("stats after remount %+v", st)
	}
}

// A malformed or inconsistent payload refuses the candidate whole and
// leaves the master empty, so an older candidate can be restored into it.
func TestSnapshotRestoreRefusesWhole(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	good := writeSnapshot(t, m, SnapshotV2)
	corrupt := func(name string, edit func([]byte) []byte) map[string]string {
		files := map[string]string{}
		dir := t.TempDir()
		for n, p := range good {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if n == name {
				b = edit(b)
			}
			files[n] = filepath.Join(dir, n)
			if err := os.WriteFile(files[n], b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return files
	}
	v1 := writeSnapshot(t, m, SnapshotV1)
	mixed := map[string]string{}
	for n, p := range good {
		mixed[n] = p
	}
	mixed[chunkName(0)] = v1[chunkName(0)]
	for name, files := range map[string]map[string]string{
		"manifest missing a clock field": corrupt(SnapshotManifestFile, func(b []byte) []byte {
			return b[:strings.LastIndexByte(string(b), '|')]
		}),
		"v1 payload under a v2 manifest": mixed,
		"truncated chunk":                corrupt(chunkName(0), func(b []byte) []byte { return b[:len(b)-3] }),
		"trailing bytes":                 corrupt(chunkName(0), func(b []byte) []byte { return append(b, 0xc0) }),
		"chunk missing": func() map[string]string {
			f := corrupt("", nil)
			delete(f, chunkName(0))
			return f
		}(),
		"segments missing": func() map[string]string {
			f := corrupt("", nil)
			delete(f, snapshotSegmentsFile)
			return f
		}(),
		"foreign file": corrupt(chunkName(0), func([]byte) []byte { return []byte("not msgpack") }),
	} {
		t.Run(name, func(t *testing.T) {
			m2, _, res, err := restoreAt(t, Config{}, files, clk.Wall())
			var se *SnapshotError
			if err == nil || !errors.As(err, &se) {
				t.Fatalf("restore: %+v, %v; want a *SnapshotError", res, err)
			}
			if !m2.empty() || len(m2.tenants) != 0 || len(m2.groups) != 0 {
				t.Fatal("a refused snapshot left state behind")
			}
			if _, err := m2.RestoreSnapshot(context.Background(), good); err != nil {
				t.Fatalf("the older good candidate after the refusal: %v", err)
			}
		})
	}
}

// An overflowing deadline refuses the candidate and counts a conversion
// failure; it never becomes a default TTL.
func TestSnapshotRestoreOverflowRefused(t *testing.T) {
	m, clk := snapMaster(t, Config{})
	lookup(m, "t", "active").lease.Store(math.MaxInt64 - 1)
	files := writeSnapshot(t, m, SnapshotV2)
	m2, _, _, err := restoreAt(t, Config{}, files, clk.Wall())
	if !errors.Is(err, ErrClockConversion) || !m2.empty() {
		t.Fatalf("overflowing deadline: %v", err)
	}
	if got := counterValue(t, m2.metrics.clockConversionFailures); got != 1 {
		t.Fatalf("conversion failures counted %v", got)
	}
}

// FuzzSnapshotManifest: the manifest parser never panics and what it
// accepts formats back to the same line.
func FuzzSnapshotManifest(f *testing.F) {
	f.Add("messagepack|2.0.0|id|1767000000000000000|5")
	f.Add("messagepack|1.0.0|id")
	f.Add("messagepack|2.0.0|id|-1|9223372036854775807")
	f.Add("messagepack|2.0.0|id|17")
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParseSnapshotManifest(line)
		if err != nil {
			if !errors.Is(err, ErrSnapshotManifest) {
				t.Fatalf("refusal %v is not ErrSnapshotManifest", err)
			}
			return
		}
		back, err := FormatSnapshotManifest(m)
		if err != nil || back != line {
			t.Fatalf("accepted %q formats back as %q, %v", line, back, err)
		}
	})
}

// FuzzSnapshotPayload: arbitrary bytes in an objects chunk never panic the
// restore, and a refusal leaves the master empty.
func FuzzSnapshotPayload(f *testing.F) {
	m, clk := snapMaster(f, Config{})
	good := writeSnapshot(f, m, SnapshotV2)
	chunk, err := os.ReadFile(good[chunkName(0)])
	if err != nil {
		f.Fatal(err)
	}
	f.Add(chunk)
	f.Add(chunk[:len(chunk)/2])
	f.Add([]byte{0x95})
	f.Fuzz(func(t *testing.T, b []byte) {
		files := map[string]string{}
		for n, p := range good {
			files[n] = p
		}
		files[chunkName(0)] = filepath.Join(t.TempDir(), "chunk")
		if err := os.WriteFile(files[chunkName(0)], b, 0o644); err != nil {
			t.Fatal(err)
		}
		m2, _, _, err := restoreAt(t, Config{}, files, clk.Wall())
		if err != nil {
			var se *SnapshotError
			if !errors.As(err, &se) || !m2.empty() {
				t.Fatalf("refusal %v left state or is untyped", err)
			}
		}
	})
}

// Changes made while a snapshot's stripes are being copied do not show in
// it: the first change to a stripe copies the stripe as it was at the
// freeze. The snapshot is the state at the cut, exactly.
func TestSnapshotCopyOnWrite(t *testing.T) {
	ctx := context.Background()
	m, clk := newTestMaster(t, Config{Shards: 8}, Options{})
	mount(t, m, "c1", 1, 1<<20)
	for i := range 40 {
		put(t, m, "c1", "t", fmt.Sprintf("k%d", i), 100, PutOptions{})
	}
	cuts := 0
	s, c := m.freeze(func() { cuts++ }, SnapshotV2)
	// Changes after the freeze, before the copy.
	for i := range 20 {
		if err := m.Remove(ctx, "t", fmt.Sprintf("k%d", i), true); err != nil {
			t.Fatal(err)
		}
	}
	put(t, m, "c1", "t", "late", 100, PutOptions{})
	mount(t, m, "c1", 2, 1<<20)
	m.copyStripes(s, c)
	if cuts != 1 || m.cow.Load() != nil {
		t.Fatalf("cut called %d times; copy still installed: %v", cuts, m.cow.Load() != nil)
	}
	if s.Objects() != 40 || len(s.segments) != 1 {
		t.Fatalf("snapshot holds %d objects and %d segments, want the 40 and 1 of the freeze", s.Objects(), len(s.segments))
	}
	files := map[string]string{}
	fl, err := s.WriteFiles(t.TempDir(), "cow")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fl {
		files[f.Name] = f.Path
	}
	m2, _, res, err := restoreAt(t, Config{}, files, clk.Wall())
	if err != nil || res.Objects != 40 {
		t.Fatalf("restore %+v %v", res, err)
	}
	if lookup(m2, "t", "k0") == nil || lookup(m2, "t", "late") != nil {
		t.Fatal("the snapshot shows a change made after its freeze")
	}
	if got := m.Stats().Objects; got != 21 {
		t.Fatalf("the live master holds %d objects, want 21", got)
	}
}

// Removals running while the stripes are copied by several workers: the
// snapshot holds exactly the objects of one instant, so of keys removed
// in order it holds a suffix, never one whose predecessor is still there
// missing.
func TestSnapshotCopyUnderConcurrentChanges(t *testing.T) {
	ctx := context.Background()
	m, clk := newTestMaster(t, Config{Shards: 64}, Options{})
	mount(t, m, "c1", 1, 1<<24)
	const n = 2000
	for i := range n {
		put(t, m, "c1", "t", fmt.Sprintf("k%05d", i), 100, PutOptions{})
	}
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		for i := range n {
			if err := m.Remove(ctx, "t", fmt.Sprintf("k%05d", i), true); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	<-started
	s := m.Freeze(nil, SnapshotV2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	fl, err := s.WriteFiles(t.TempDir(), "concurrent")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fl {
		files[f.Name] = f.Path
	}
	m2, _, res, err := restoreAt(t, Config{}, files, clk.Wall())
	if err != nil {
		t.Fatal(err)
	}
	first := n - res.Objects
	for i := range n {
		if got := lookup(m2, "t", fmt.Sprintf("k%05d", i)) != nil; got != (i >= first) {
			t.Fatalf("k%05d present %v, but the snapshot holds %d objects: not one instant", i, got, res.Objects)
		}
	}
}
