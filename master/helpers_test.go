package master

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestMaster(t testing.TB, cfg Config, opts Options) (*Master, *FakeClock) {
	t.Helper()
	clk := NewFakeClock(t0)
	opts.Clock = clk
	if cfg.Shards == 0 {
		cfg.Shards = 16
	}
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func mount(t testing.TB, m *Master, client string, id, size uint64) {
	t.Helper()
	if err := m.MountSegment(context.Background(), client, SegmentSpec{ID: id, Name: "seg", Size: size, Endpoint: client + ":1"}); err != nil {
		t.Fatal(err)
	}
}

func put(t testing.TB, m *Master, client, tenant, key string, size uint64, o PutOptions) []ReplicaInfo {
	t.Helper()
	ctx := context.Background()
	reps, err := m.PutStart(ctx, PutRequest{Client: client, Tenant: tenant, Key: key, Size: size, PutOptions: o})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd(ctx, client, tenant, key); err != nil {
		t.Fatal(err)
	}
	return reps
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	var me *Error
	if !errors.As(err, &me) {
		t.Fatalf("error %v is not a *master.Error", err)
	}
}

// lookup returns the object's metadata for white-box checks.
func lookup(m *Master, tenant, key string) *object {
	sp := m.stripeFor(tenant, key)
	sp.mu.RLock()
	defer sp.mu.RUnlock()
	return sp.objects[objectKey{tenant, key}]
}

// memJournal is a log that acknowledges at once; err, when set, fails
// every ticket from then on.
type memJournal struct {
	mu  sync.Mutex
	ops []*Op
	err error
}

type doneTicket struct{ err error }

func (d doneTicket) Wait(context.Context) error { return d.err }

func (j *memJournal) Record(op *Op) Ticket {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ops = append(j.ops, op)
	return doneTicket{j.err}
}

func (j *memJournal) Sync() Ticket {
	j.mu.Lock()
	defer j.mu.Unlock()
	return doneTicket{j.err}
}

func (j *memJournal) Placement() Ticket { return j.Sync() }

func mem(seg, off, size uint64) *masterv1.StandbyReplica {
	return &masterv1.StandbyReplica{Kind: masterv1.ReplicaKind_REPLICA_KIND_MEMORY, Status: masterv1.ReplicaStatus_REPLICA_STATUS_COMPLETE, SegmentId: seg, Offset: off, Size: size}
}

func sobj(key string, size uint64, reps ...*masterv1.StandbyReplica) *masterv1.StandbyObject {
	return &masterv1.StandbyObject{Tenant: "t", Key: key, ClientId: "c1", Size: size, Replicas: reps}
}

func sseg(id, size uint64) *masterv1.StandbySegment {
	return &masterv1.StandbySegment{Id: id, Name: "seg", ClientId: "c1", Size: size}
}

func restore(t testing.TB, m *Master, segs []*masterv1.StandbySegment, objs ...*masterv1.StandbyObject) {
	t.Helper()
	if _, err := m.RestoreStandby(context.Background(), segs, objs); err != nil {
		t.Fatal(err)
	}
}

func remount(t testing.TB, m *Master, ids ...uint64) RemountResult {
	t.Helper()
	var specs []SegmentSpec
	for _, id := range ids {
		specs = append(specs, SegmentSpec{ID: id, Name: "seg", Size: segSize(m, id), Endpoint: "c1:2"})
	}
	res, err := m.ReMountSegment(context.Background(), "c1", specs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func segSize(m *Master, id uint64) uint64 {
	m.topo.RLock()
	defer m.topo.RUnlock()
	if s := m.segments[id]; s != nil {
		return s.size
	}
	return 1
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func histogramCount(t testing.TB, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
