package master

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A standby that replays the primary's log, promoted, serves nothing until
// the client remounts, then serves every object with a recovery lease.
func TestStandbyReplayAndPromotion(t *testing.T) {
	j := &memJournal{}
	primary, _ := newTestMaster(t, Config{}, Options{Journal: j})
	ctx := context.Background()
	mount(t, primary, "c1", 1, 1000)
	mount(t, primary, "c1", 2, 1000)
	put(t, primary, "c1", "t", "keep", 100, PutOptions{Replicas: 2, HardPin: true})
	put(t, primary, "c1", "t", "soft", 100, PutOptions{SoftPin: true, Group: "g"})
	put(t, primary, "c1", "t", "gone", 100, PutOptions{})
	if _, err := primary.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "open", Size: 10}); err != nil {
		t.Fatal(err)
	}
	if err := primary.Remove(ctx, "t", "gone", true); err != nil {
		t.Fatal(err)
	}
	// Reads on the primary extend leases but produce no log records.
	n := len(j.ops)
	if _, err := primary.GetReplicaList(ctx, "t", "keep"); err != nil {
		t.Fatal(err)
	}
	if len(j.ops) != n {
		t.Fatal("a read was logged")
	}

	standby, clk := newTestMaster(t, Config{RecoveryLeaseTTL: 20 * time.Second}, Options{})
	for _, op := range j.ops {
		if err := standby.ReplayStandby(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	if lookup(standby, "t", "gone") != nil || lookup(standby, "t", "open") != nil {
		t.Fatal("removed or unfinished object replayed")
	}
	keep, soft := lookup(standby, "t", "keep"), lookup(standby, "t", "soft")
	if keep == nil || !keep.hardPinned || soft == nil || !soft.softPinEnabled || soft.group == nil {
		t.Fatal("replayed objects lost their pins or group")
	}
	_, err := standby.GetReplicaList(ctx, "t", "keep")
	if !errors.Is(err, ErrNoReadableReplica) {
		t.Fatalf("promoted standby served before remount: %v", err)
	}
	clk.Advance(time.Hour)
	now := clk.Steady()
	res, err := standby.ReMountSegment(ctx, "c1", []SegmentSpec{{ID: 1, Size: 1000, Endpoint: "c1:9"}, {ID: 2, Size: 1000, Endpoint: "c1:9"}})
	if err != nil || res.MatchedObjects != 2 {
		t.Fatalf("remount: %+v %v", res, err)
	}
	if keep.leaseDeadline() != now.Add(20*time.Second) {
		t.Fatalf("recovery lease %v", toDuration(keep.leaseDeadline()-now))
	}
	reps, err := standby.GetReplicaList(ctx, "t", "keep")
	if err != nil || len(reps) != 2 {
		t.Fatalf("after remount: %+v %v", reps, err)
	}
	// The rebuilt allocators match the primary's usage.
	if got, want := standby.Stats().Used, primary.Stats().Used-10; got != want {
		t.Fatalf("standby uses %d bytes, primary %d without the open put", got, want)
	}
	// New puts go into the gaps the allocators left free.
	if _, err := standby.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "new", Size: 700}); err != nil {
		t.Fatal(err)
	}
}
