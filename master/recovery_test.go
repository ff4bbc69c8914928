package master

import (
	"context"
	"strings"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Phase 1, test 1: the standby payload round-trips hard pin and soft-pin
// enabled and has no field that could carry a deadline.
func TestStandbyPayloadRoundTripHasNoDeadlines(t *testing.T) {
	j := &memJournal{}
	m, _ := newTestMaster(t, Config{}, Options{Journal: j})
	mount(t, m, "c1", 1, 1<<20)
	put(t, m, "c1", "t", "hard", 100, PutOptions{HardPin: true})
	put(t, m, "c1", "t", "soft", 100, PutOptions{SoftPin: true, Group: "g"})
	if _, err := m.GetReplicaList(context.Background(), "t", "soft"); err != nil {
		t.Fatal(err)
	}
	var ends []*masterv1.StandbyObject
	for _, op := range j.ops {
		if op.Kind == OpPutEnd {
			b, err := proto.Marshal(op.Object)
			if err != nil {
				t.Fatal(err)
			}
			var back masterv1.StandbyObject
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			ends = append(ends, &back)
		}
		if op.Kind == 0 {
			t.Fatalf("unnamed op recorded: %+v", op)
		}
	}
	if len(ends) != 2 {
		t.Fatalf("%d PutEnd records, want 2 (a read must not be logged)", len(ends))
	}
	if !ends[0].GetHardPinned() || ends[0].GetSoftPinEnabled() {
		t.Errorf("hard object decoded as hard=%v soft=%v", ends[0].GetHardPinned(), ends[0].GetSoftPinEnabled())
	}
	if ends[1].GetHardPinned() || !ends[1].GetSoftPinEnabled() || ends[1].GetGroupId() != "g" {
		t.Errorf("soft object decoded as hard=%v soft=%v group=%q", ends[1].GetHardPinned(), ends[1].GetSoftPinEnabled(), ends[1].GetGroupId())
	}
	for _, md := range []protoreflect.MessageDescriptor{
		(&masterv1.StandbyObject{}).ProtoReflect().Descriptor(),
		(&masterv1.StandbyReplica{}).ProtoReflect().Descriptor(),
		(&masterv1.StandbySegment{}).ProtoReflect().Descriptor(),
	} {
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			name := string(fields.Get(i).Name())
			for _, bad := range []string{"lease", "deadline", "ttl", "timeout", "read_time", "expire"} {
				if strings.Contains(name, bad) {
					t.Errorf("standby message %s has field %q: deadlines must not be in the standby model", md.Name(), name)
				}
			}
		}
	}

	// The journal's objects restore into a fresh master with the pins kept.
	m2, _ := newTestMaster(t, Config{}, Options{})
	restore(t, m2, []*masterv1.StandbySegment{sseg(1, 1<<20)}, ends...)
	if o := lookup(m2, "t", "hard"); o == nil || !o.hardPinned || o.softPinEnabled || o.leaseDeadline() != 0 {
		t.Fatalf("restored hard object: %+v", o)
	}
	if o := lookup(m2, "t", "soft"); o == nil || o.hardPinned || !o.softPinEnabled || o.softPin.Load() != 0 || o.group == nil {
		t.Fatalf("restored soft object wrong")
	}
}

// Phase 1, tests 2 and 3: a restored memory replica is unreadable until
// remount, and no lease expiry makes it evictable.
func TestUnremountedReplicaUnreadableAndNeverEvicted(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000)}, sobj("a", 100, mem(1, 0, 100)), sobj("b", 100, mem(1, 100, 100)))
	ctx := context.Background()
	_, err := m.GetReplicaList(ctx, "t", "a")
	wantErr(t, err, ErrNoReadableReplica)
	if ping, _ := m.Ping(ctx, "c1"); ping != PingNeedRemount {
		t.Fatalf("ping %v before remount, want NeedRemount", ping)
	}

	clk.Advance(24 * time.Hour)
	m.topo.RLock()
	res := m.evictLocked(clk.Steady(), 1<<40, nil)
	m.topo.RUnlock()
	if res.Objects != 0 || lookup(m, "t", "a") == nil || lookup(m, "t", "b") == nil {
		t.Fatalf("eviction took unreadable replicas: %+v", res)
	}
	if got := m.Stats().SkippedUnreadableReplicas; got != 2 {
		t.Fatalf("skipped unreadable replicas %d, want 2", got)
	}

	remount(t, m, 1)
	reps, err := m.GetReplicaList(ctx, "t", "a")
	if err != nil || len(reps) != 1 || reps[0].Endpoint != "c1:2" {
		t.Fatalf("after remount: %v %+v", err, reps)
	}
	if ping, _ := m.Ping(ctx, "c1"); ping != PingOK {
		t.Fatalf("ping %v after remount", ping)
	}
}

// Phase 1, tests 5, 6 and 7: remount leases every object on the segment,
// including one with another replica already readable, and gives
// soft-pin-enabled objects the full soft-pin TTL.
func TestRemountLeasesEveryObject(t *testing.T) {
	cfg := Config{DefaultLeaseTTL: 10 * time.Second, SoftPinTTL: time.Hour}
	m, clk := newTestMaster(t, cfg, Options{})
	soft := sobj("soft", 10, mem(2, 0, 10))
	soft.SoftPinEnabled = true
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)},
		sobj("both", 10, mem(1, 0, 10), mem(2, 10, 10)),
		sobj("only2", 10, mem(2, 20, 10)),
		soft,
		sobj("only1", 10, mem(1, 10, 10)))
	remount(t, m, 1)
	clk.Advance(3 * time.Second)
	now := clk.Steady()
	res := remount(t, m, 2)
	if res.MatchedObjects != 3 {
		t.Fatalf("matched %d objects on segment 2, want 3", res.MatchedObjects)
	}
	want := now.Add(10 * time.Second)
	for _, k := range []string{"both", "only2", "soft"} {
		if got := lookup(m, "t", k).leaseDeadline(); got != want {
			t.Errorf("%s lease %d, want %d", k, got, want)
		}
	}
	if got := SteadyTime(lookup(m, "t", "soft").softPin.Load()); got != now.Add(time.Hour) {
		t.Errorf("soft pin deadline %d, want the full soft-pin TTL %d", got, now.Add(time.Hour))
	}
	if got := lookup(m, "t", "only1").leaseDeadline(); got != now.Add(10*time.Second-3*time.Second) {
		t.Errorf("only1 was touched by segment 2's remount: lease %d", got)
	}
	if res.VisibleTTL != 10*time.Second || res.RecoveryTTL != 10*time.Second {
		t.Errorf("visible %v recovery %v", res.VisibleTTL, res.RecoveryTTL)
	}
}

// Phase 1, test 8: hard pin survives recovery and keeps protecting.
func TestHardPinSurvivesRecovery(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	h := sobj("h", 100, mem(1, 0, 100))
	h.HardPinned = true
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000)}, h, sobj("n", 100, mem(1, 100, 100)))
	remount(t, m, 1)
	clk.Advance(time.Minute)
	m.topo.RLock()
	m.evictLocked(clk.Steady(), 1<<40, nil)
	m.topo.RUnlock()
	if o := lookup(m, "t", "h"); o == nil || !o.hardPinned {
		t.Fatal("hard-pinned object evicted or unpinned")
	}
	if lookup(m, "t", "n") != nil {
		t.Fatal("expired unpinned object survived eviction")
	}
}

// Phase 1, test 9: a remount that fails verification publishes nothing,
// keeps the replicas unreadable and grants no lease.
func TestFailedRemountChangesNothing(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	// Two objects claim overlapping bytes: the segment cannot hold both.
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)},
		sobj("a", 100, mem(1, 0, 100)), sobj("b", 100, mem(1, 50, 100)), sobj("c", 100, mem(2, 0, 100)))
	_, err := m.ReMountSegment(context.Background(), "c1", []SegmentSpec{
		{ID: 2, Size: 1000, Endpoint: "c1:2"}, {ID: 1, Size: 1000, Endpoint: "c1:2"}})
	wantErr(t, err, ErrSegmentMismatch)
	for _, k := range []string{"a", "b", "c"} {
		o := lookup(m, "t", k)
		if o.leaseDeadline() != 0 || o.replicas[0].readable() {
			t.Errorf("%s: lease %d valid %v after a failed remount", k, o.leaseDeadline(), o.replicas[0].readable())
		}
	}
	st := m.Stats()
	if st.SegmentsAwaitingRemount != 2 || st.Capacity != 0 || st.Remounts != 0 {
		t.Fatalf("stats after failed remount: %+v", st)
	}
	if ep := m.segments[2].endpointString(); ep != "" {
		t.Fatalf("segment 2 endpoint %q published by a failed remount", ep)
	}
	// Size mismatch and unknown segments fail the same way.
	_, err = m.ReMountSegment(context.Background(), "c1", []SegmentSpec{{ID: 2, Size: 999, Endpoint: "x"}})
	wantErr(t, err, ErrSegmentMismatch)
	_, err = m.ReMountSegment(context.Background(), "c1", []SegmentSpec{{ID: 9, Size: 1000, Endpoint: "x"}})
	wantErr(t, err, ErrSegmentNotFound)
	_, err = m.ReMountSegment(context.Background(), "c2", []SegmentSpec{{ID: 2, Size: 1000, Endpoint: "x"}})
	wantErr(t, err, ErrWrongClient)
	// Segment 2 alone is consistent and remounts.
	res := remount(t, m, 2)
	if res.MatchedObjects != 1 || !lookup(m, "t", "c").replicas[0].readable() {
		t.Fatalf("remount of the consistent segment: %+v", res)
	}
}

// Phase 1, test 10: an object with several replicas on the remounted
// segments is collected once.
func TestRemountCollectsObjectOnce(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)},
		sobj("x", 10, mem(1, 0, 10), mem(2, 0, 10), mem(1, 10, 10)))
	res := remount(t, m, 1, 2)
	if res.MatchedObjects != 1 {
		t.Fatalf("matched %d, want 1", res.MatchedObjects)
	}
	for _, r := range lookup(m, "t", "x").replicas {
		if !r.readable() {
			t.Fatal("a replica stayed invalid")
		}
	}
	// The rebuilt allocators account for the restored replicas.
	if st := m.Stats(); st.Used != 30 || st.Capacity != 2000 {
		t.Fatalf("used %d capacity %d", st.Used, st.Capacity)
	}
}

// Phase 1, test 11: a later remount of another segment extends the lease.
func TestLaterRemountExtends(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000), sseg(2, 1000)}, sobj("x", 10, mem(1, 0, 10), mem(2, 0, 10)))
	remount(t, m, 1)
	first := lookup(m, "t", "x").leaseDeadline()
	clk.Advance(4 * time.Second)
	remount(t, m, 2)
	if got := lookup(m, "t", "x").leaseDeadline(); got != first.Add(4*time.Second) {
		t.Fatalf("lease %d after the second remount, want %d", got, first.Add(4*time.Second))
	}
}

// Phase 1, test 12: the recovery TTL defaults to the read TTL; an explicit
// value wins.
func TestRecoveryTTLConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, 10 * time.Second},
		{Config{DefaultLeaseTTL: 3 * time.Second}, 3 * time.Second},
		{Config{DefaultLeaseTTL: 3 * time.Second, RecoveryLeaseTTL: time.Minute}, time.Minute},
	} {
		m, clk := newTestMaster(t, tc.cfg, Options{})
		restore(t, m, []*masterv1.StandbySegment{sseg(1, 1000)}, sobj("x", 10, mem(1, 0, 10)))
		now := clk.Steady()
		res := remount(t, m, 1)
		if got := lookup(m, "t", "x").leaseDeadline(); got != now.Add(tc.want) || res.RecoveryTTL != tc.want {
			t.Errorf("cfg %+v: lease %v, recovery TTL %v, want %v", tc.cfg, toDuration(got-now), res.RecoveryTTL, tc.want)
		}
	}
}

// A restore is all or nothing.
func TestRestoreRejectsBadPayloadWhole(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	_, err := m.RestoreStandby(context.Background(), []*masterv1.StandbySegment{sseg(1, 1000)},
		[]*masterv1.StandbyObject{sobj("a", 10, mem(1, 0, 10)), sobj("b", 10, mem(7, 0, 10))})
	wantErr(t, err, ErrSegmentNotFound)
	if st := m.Stats(); st.Objects != 0 || st.Segments != 0 {
		t.Fatalf("partial restore: %+v", st)
	}
	// A replica restored onto a serving segment would share bytes its
	// allocator hands out again: refused.
	mount(t, m, "c1", 5, 1000)
	_, err = m.RestoreStandby(context.Background(), nil, []*masterv1.StandbyObject{sobj("s", 10, mem(5, 0, 10))})
	wantErr(t, err, ErrSegmentExists)
	if lookup(m, "t", "s") != nil {
		t.Fatal("object restored onto a serving segment")
	}
	// An in-progress put is dropped, not restored.
	p := sobj("p", 10, mem(1, 0, 10))
	p.Replicas[0].Status = masterv1.ReplicaStatus_REPLICA_STATUS_PROCESSING
	res, err := m.RestoreStandby(context.Background(), []*masterv1.StandbySegment{sseg(1, 1000)}, []*masterv1.StandbyObject{p})
	if err != nil || res.Dropped != 1 || res.Objects != 0 {
		t.Fatalf("restore of a processing object: %+v %v", res, err)
	}
}
