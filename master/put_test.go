package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPutLifecycle(t *testing.T) {
	j := &memJournal{}
	m, clk := newTestMaster(t, Config{}, Options{Journal: j})
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c2", 2, 1000)
	ctx := context.Background()
	reps, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "k", Size: 300, PutOptions: PutOptions{Replicas: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[0].SegmentID == reps[1].SegmentID {
		t.Fatalf("replicas %+v, want two on distinct segments", reps)
	}
	// Not readable while being written.
	_, err = m.GetReplicaList(ctx, "t", "k")
	wantErr(t, err, ErrNoReadableReplica)
	if err := m.PutEnd(ctx, "c1", "t", "k"); err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd(ctx, "c1", "t", "k"); err != nil {
		t.Fatalf("second PutEnd: %v", err)
	}
	got, err := m.GetReplicaList(ctx, "t", "k")
	if err != nil || len(got) != 2 || got[0].Status != ReplicaComplete {
		t.Fatalf("GetReplicaList: %+v %v", got, err)
	}
	if st := m.Stats(); st.Used != 600 || st.Objects != 1 || st.Tenants[0].Used != 600 {
		t.Fatalf("stats %+v", st)
	}
	clk.Advance(11 * time.Second)
	if err := m.Remove(ctx, "t", "k", false); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Used != 0 || st.Objects != 0 || st.Tenants[0].Used != 0 {
		t.Fatalf("stats after remove %+v", st)
	}
	var kinds []string
	for _, op := range j.ops {
		kinds = append(kinds, op.Kind.String())
	}
	if got := strings.Join(kinds, ","); got != "MountSegment,MountSegment,PutEnd,Remove" { // a put in progress is not logged
		t.Fatalf("journal %s", got)
	}

	// Revoke frees the space and forgets the object.
	if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "r", Size: 900}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, m.PutRevoke(ctx, "c2", "t", "r"), ErrWrongClient)
	if err := m.PutRevoke(ctx, "c1", "t", "r"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Exist(ctx, "t", "r"); ok || m.Stats().Used != 0 {
		t.Fatal("revoked object still there")
	}
}

// Bad input gets typed errors and leaves state unchanged.
func TestBadInput(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	mount(t, m, "c1", 1, 1000)
	ctx := context.Background()
	put(t, m, "c1", "t", "k", 100, PutOptions{})
	before := m.Stats()

	_, err := m.GetReplicaList(ctx, "t", "nope")
	wantErr(t, err, ErrObjectNotFound)
	wantErr(t, m.PutEnd(ctx, "c1", "t", "nope"), ErrObjectNotFound)
	wantErr(t, m.Remove(ctx, "t", "nope", false), ErrObjectNotFound)
	_, err = m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "k", Size: 10})
	wantErr(t, err, ErrObjectExists)
	_, err = m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "big", Size: 1001})
	wantErr(t, err, ErrObjectTooLarge)
	_, err = m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "two", Size: 10, PutOptions: PutOptions{Replicas: 2}})
	wantErr(t, err, ErrNotEnoughSegments)
	_, err = m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "", Size: 10})
	wantErr(t, err, ErrInvalidArgument)
	_, err = m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "zero", Size: 0})
	wantErr(t, err, ErrInvalidArgument)
	_, err = m.PutStart(ctx, PutRequest{Client: "", Tenant: "t", Key: "x", Size: 1})
	wantErr(t, err, ErrInvalidArgument)
	_, err = m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: strings.Repeat("k", maxKeyLen+1), Size: 1})
	wantErr(t, err, ErrInvalidArgument)
	_, err = m.ReMountSegment(ctx, "c1", []SegmentSpec{{ID: 42, Size: 10, Endpoint: "e"}})
	wantErr(t, err, ErrSegmentNotFound)
	_, err = m.UnmountSegment(ctx, "c1", 42)
	wantErr(t, err, ErrSegmentNotFound)
	_, err = m.UnmountSegment(ctx, "c2", 1)
	wantErr(t, err, ErrWrongClient)
	wantErr(t, m.MountSegment(ctx, "c2", SegmentSpec{ID: 1, Size: 10, Endpoint: "e"}), ErrSegmentExists)
	wantErr(t, m.MountSegment(ctx, "c1", SegmentSpec{ID: 0, Size: 10, Endpoint: "e"}), ErrInvalidArgument)

	// Wrong client on PutEnd, and a leased object on Remove.
	if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "w", Size: 10}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, m.PutEnd(ctx, "c2", "t", "w"), ErrWrongClient)
	wantErr(t, m.Remove(ctx, "t", "w", false), ErrObjectNotComplete)
	if err := m.PutRevoke(ctx, "c1", "t", "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exist(ctx, "t", "k"); err != nil {
		t.Fatal(err)
	}
	err = m.Remove(ctx, "t", "k", false)
	wantErr(t, err, ErrObjectLeased)
	if !strings.Contains(err.Error(), `key "k"`) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("error message does not say what failed and what to do: %v", err)
	}
	clk.Advance(time.Second)
	after := m.Stats()
	if after.Objects != before.Objects || after.Used != before.Used {
		t.Fatalf("bad input changed state: before %+v after %+v", before, after)
	}
	// Force removes a leased object.
	if err := m.Remove(ctx, "t", "k", true); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{HighWatermark: 2}, Options{}); err == nil {
		t.Fatal("watermark 2 accepted")
	}
}

func TestBatchCalls(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	mount(t, m, "c1", 1, 1000)
	ctx := context.Background()
	res := m.BatchPutStart(ctx, []PutRequest{
		{Client: "c1", Tenant: "t", Key: "a", Size: 10},
		{Client: "c1", Tenant: "t", Key: "a", Size: 10},
		{Client: "c1", Tenant: "t", Key: "huge", Size: 5000},
		{Client: "c1", Tenant: "t", Key: "b", Size: 10},
	})
	if res[0].Err != nil || res[3].Err != nil {
		t.Fatalf("batch: %v %v", res[0].Err, res[3].Err)
	}
	wantErr(t, res[1].Err, ErrDuplicateBatchObject)
	wantErr(t, res[2].Err, ErrObjectTooLarge)
	errs := m.BatchPutEnd(ctx, []ObjectRef{{"c1", "t", "a"}, {"c1", "t", "missing"}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	wantErr(t, errs[1], ErrObjectNotFound)
	errs = m.BatchPutRevoke(ctx, []ObjectRef{{"c1", "t", "b"}, {"c1", "t", "a"}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	wantErr(t, errs[1], ErrInvalidArgument) // a already ended
}

func TestUnmountRemovesReplicas(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c1", 2, 1000)
	put(t, m, "c1", "t", "two", 10, PutOptions{Replicas: 2, Group: "g"})
	put(t, m, "c1", "t", "one", 10, PutOptions{})
	one := lookup(m, "t", "one").replicas[0].seg.id
	res, err := m.UnmountSegment(context.Background(), "c1", one)
	if err != nil {
		t.Fatal(err)
	}
	if res.Replicas != 2 || res.Objects != 1 {
		t.Fatalf("unmount %+v", res)
	}
	if o := lookup(m, "t", "two"); o == nil || len(o.replicas) != 1 {
		t.Fatal("two-replica object lost both replicas")
	}
	if st := m.Stats(); st.Segments != 1 || st.Used != 10 || st.Tenants[0].Used != 10 {
		t.Fatalf("stats %+v", st)
	}
}

// Space freed by eviction under memory pressure is reused by PutStart.
func TestPutEvictsUnderPressure(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, Options{})
	mount(t, m, "c1", 1, 1000)
	for i := 0; i < 10; i++ {
		put(t, m, "c1", "t", fmt.Sprint(i), 100, PutOptions{})
	}
	clk.Advance(time.Second)
	if _, err := m.PutStart(context.Background(), PutRequest{Client: "c1", Tenant: "t", Key: "new", Size: 100}); err != nil {
		t.Fatalf("put on a full segment with expired objects: %v", err)
	}
	if m.Stats().EvictedObjects == 0 {
		t.Fatal("nothing was evicted")
	}
}

// Reads, puts, removes, evictions and a remount at once: run with -race.
func TestConcurrentOperations(t *testing.T) {
	m, clk := newTestMaster(t, Config{Shards: 8}, Options{})
	mount(t, m, "c1", 1, 1<<20)
	mount(t, m, "c2", 2, 1<<20)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("%d-%d", w, i%50)
				if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: k, Size: 100, PutOptions: PutOptions{Group: fmt.Sprint(i % 3)}}); err == nil {
					_ = m.PutEnd(ctx, "c1", "t", k)
				}
				_, _ = m.GetReplicaList(ctx, "t", k)
				_ = m.Remove(ctx, "t", k, i%7 == 0)
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 50; i++ {
			clk.Advance(time.Second)
			m.Evict()
			m.topo.RLock()
			m.evictLocked(clk.Steady(), 1<<30, nil)
			m.topo.RUnlock()
			_ = m.Stats()
		}
	})
	wg.Go(func() {
		for i := 0; i < 20; i++ {
			if _, err := m.ReMountSegment(ctx, "c2", []SegmentSpec{{ID: 2, Name: "seg", Size: 1 << 20, Endpoint: "c2:1"}}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	// Usage accounting stayed consistent.
	var used uint64
	onSeg := map[*segment]int64{}
	for i := range m.stripes {
		for _, o := range m.stripes[i].objects {
			used += o.memoryBytes()
			for _, r := range o.replicas {
				onSeg[r.seg]++
			}
		}
	}
	for _, s := range m.segments {
		if got := s.replicas.Load(); got != onSeg[s] {
			t.Errorf("segment %d counts %d replicas, holds %d", s.id, got, onSeg[s])
		}
	}
	if st := m.Stats(); st.Used != used || st.Tenants[0].Used != used {
		t.Fatalf("segments say %d used, tenant %d, objects %d", st.Used, st.Tenants[0].Used, used)
	}
}

// Concurrent puts cannot overshoot a tenant quota.
func TestQuotaUnderConcurrency(t *testing.T) {
	m, _ := newTestMaster(t, Config{TenantQuotas: map[string]uint64{"q": 1000}}, Options{})
	mount(t, m, "c1", 1, 1<<20)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			_, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "q", Key: fmt.Sprint(i), Size: 100, PutOptions: PutOptions{HardPin: true}})
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !errors.Is(err, ErrQuotaExceeded) {
				t.Errorf("put %d: %v, want ErrQuotaExceeded", i, err)
			}
		})
	}
	wg.Wait()
	if ok != 10 {
		t.Fatalf("%d puts of 100 bytes fit a 1000-byte quota, want 10", ok)
	}
	if st := m.Stats(); st.Tenants[0].Used != 1000 || st.Used != 1000 {
		t.Fatalf("stats %+v", st)
	}
}

type suspects map[string]bool

func (s suspects) CanServe(r Resource) bool {
	return r.Serviceable() && !s[r.Owner().ClientID()]
}

func (s suspects) ShouldRetain(Resource) bool { return true }

// Placement and reads ask the serving-eligibility seam: a Suspected
// client's segment takes no new replicas and gives out no descriptor,
// though its objects are retained.
func TestPlacementAsksServingEligibility(t *testing.T) {
	sus := suspects{}
	m, _ := newTestMaster(t, Config{}, Options{Eligibility: sus})
	mount(t, m, "c1", 1, 1000)
	mount(t, m, "c2", 2, 1000)
	put(t, m, "c1", "t", "old", 10, PutOptions{Replicas: 2})
	sus["c2"] = true
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		reps, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: fmt.Sprint(i), Size: 10})
		if err != nil || reps[0].SegmentID != 1 {
			t.Fatalf("put %d placed on %+v (%v), want segment 1 only", i, reps, err)
		}
	}
	_, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "two", Size: 10, PutOptions: PutOptions{Replicas: 2}})
	wantErr(t, err, ErrNotEnoughSegments)
	if reps, err := m.GetReplicaList(ctx, "t", "old"); err != nil || len(reps) != 1 || reps[0].SegmentID != 1 {
		t.Fatalf("object on a suspected and an active client's segments: %+v %v, want the active one's replica only", reps, err)
	}
	if ok, err := m.Exist(ctx, "t", "old"); !ok || err != nil {
		t.Fatalf("the object is retained: exist %v %v", ok, err)
	}
}

// gateJournal holds every ticket until released, to see who waits for
// what.
type gateJournal struct {
	mu      sync.Mutex
	ops     []*Op
	freed   chan struct{} // the newest freeing record's ticket
	pending chan struct{} // the newest record's ticket
}

type chanTicket chan struct{}

func (c chanTicket) Wait(ctx context.Context) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *gateJournal) Record(op *Op) Ticket {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ops = append(j.ops, op)
	c := make(chan struct{})
	j.pending = c
	if FreesMemory(op.Kind) {
		j.freed = c
	}
	return chanTicket(c)
}

func (j *gateJournal) Sync() Ticket {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending == nil {
		return doneTicket{}
	}
	return chanTicket(j.pending)
}

func (j *gateJournal) Placement() Ticket {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.freed == nil {
		return doneTicket{}
	}
	return chanTicket(j.freed)
}

func (j *gateJournal) releaseAll() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending != nil {
		select {
		case <-j.pending:
		default:
			close(j.pending)
		}
	}
	if j.freed != nil && j.freed != j.pending {
		select {
		case <-j.freed:
		default:
			close(j.freed)
		}
	}
}

// Space freed by a Remove is handed out only once the Remove is durable:
// a placement after it waits for its ticket; a placement after a change
// that freed nothing does not wait.
func TestPlacementWaitsForDurableFrees(t *testing.T) {
	j := &gateJournal{}
	m, _ := newTestMaster(t, Config{}, Options{Journal: j})
	ctx := context.Background()
	mountDone := make(chan error, 1)
	go func() { mountDone <- m.MountSegment(ctx, "c1", SegmentSpec{ID: 1, Size: 100, Endpoint: "e"}) }()
	waitRecorded := func(n int) {
		for {
			j.mu.Lock()
			got := len(j.ops)
			j.mu.Unlock()
			if got >= n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitRecorded(1)
	j.releaseAll()
	if err := <-mountDone; err != nil {
		t.Fatal(err)
	}
	// A put whose end is not durable yet does not hold the next placement.
	if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "a", Size: 100}); err != nil {
		t.Fatal(err)
	}
	endDone := make(chan error, 1)
	go func() { endDone <- m.PutEnd(ctx, "c1", "t", "a") }()
	waitRecorded(2)
	select {
	case err := <-endDone:
		t.Fatalf("PutEnd answered (%v) before its record was durable", err)
	case <-time.After(20 * time.Millisecond):
	}
	j.releaseAll()
	if err := <-endDone; err != nil {
		t.Fatal(err)
	}
	// The Remove frees the whole segment; the next put needs that space.
	removeDone := make(chan error, 1)
	go func() { removeDone <- m.Remove(ctx, "t", "a", true) }()
	waitRecorded(3)
	putDone := make(chan error, 1)
	go func() {
		_, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "b", Size: 100})
		putDone <- err
	}()
	select {
	case err := <-putDone:
		t.Fatalf("PutStart handed out freed space (%v) before the Remove was durable", err)
	case <-time.After(50 * time.Millisecond):
	}
	j.releaseAll()
	if err := <-removeDone; err != nil {
		t.Fatal(err)
	}
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
}
