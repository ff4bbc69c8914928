package ha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/seal"
)

// A master restarted on a store that holds its log resumes from it: every
// acknowledged change is there, memory replicas unreadable until their
// segment remounts, pins kept, the removed object gone.
func TestRestartResumesFromTheLog(t *testing.T) {
	runBackends(t, func(t *testing.T, store *blobstore.Container) {
		n1 := start(t, store, false)
		m := primary(t, n1)
		mountSeg(t, m, 1)
		for i := range 20 {
			putObj(t, m, fmt.Sprintf("k%d", i), master.PutOptions{})
		}
		putObj(t, m, "hard", master.PutOptions{HardPin: true})
		putObj(t, m, "soft", master.PutOptions{SoftPin: true, Group: "g"})
		if err := m.Remove(context.Background(), "t", "k0", true); err != nil {
			t.Fatal(err)
		}
		n1.stop(t)

		n2 := start(t, store, false)
		m2 := primary(t, n2)
		if st := n2.Status(); st.Term != 2 || st.Position.Gen < 1 {
			t.Fatalf("restart status %+v, want term 2 after the log", st)
		}
		st := m2.Stats()
		if st.Objects != 21 || st.SegmentsAwaitingRemount != 1 {
			t.Fatalf("restored %d objects, %d segments awaiting remount; want 21 and 1", st.Objects, st.SegmentsAwaitingRemount)
		}
		if err := readable(m2, "k1"); !errors.Is(err, master.ErrNoReadableReplica) {
			t.Fatalf("read before remount: %v", err)
		}
		if res := remountAll(t, m2, 1); res.MatchedObjects != 21 {
			t.Fatalf("remount matched %d", res.MatchedObjects)
		}
		for _, k := range []string{"k1", "k19", "hard", "soft"} {
			if err := readable(m2, k); err != nil {
				t.Fatalf("%s after remount: %v", k, err)
			}
		}
		if err := readable(m2, "k0"); !errors.Is(err, master.ErrObjectNotFound) {
			t.Fatalf("removed object: %v", err)
		}
		// The remount is logged too: a third start knows the segment.
		putObj(t, m2, "after", master.PutOptions{})
		n2.stop(t)
		n3 := start(t, store, false)
		if st := primary(t, n3).Stats(); st.Objects != 22 || st.Segments != 1 {
			t.Fatalf("third start: %+v", st)
		}
	})
}

// A hot standby tails the log; promotion claims the next term, replays
// only what the standby had not applied, and fences the old primary,
// which acknowledges nothing more, says so, and turns not-ready even while
// idle.
func TestStandbyTailsAndPromotionFencesThePrimary(t *testing.T) {
	runBackends(t, func(t *testing.T, store *blobstore.Container) {
		p := start(t, store, false)
		m := primary(t, p)
		mountSeg(t, m, 1)
		putObj(t, m, "before", master.PutOptions{HardPin: true})
		s := start(t, store, true)
		if _, err := s.Serving(); !errors.Is(err, master.ErrNotPrimary) {
			t.Fatalf("a standby serves: %v", err)
		}
		for i := range 30 {
			putObj(t, m, fmt.Sprintf("k%d", i), master.PutOptions{SoftPin: i%2 == 0})
		}
		want := p.Status().Position
		waitFor(t, "the standby to catch up", func() bool { return s.Status().Position == want })
		if err := s.Ready(); err != nil {
			t.Fatalf("caught-up standby not ready: %v", err)
		}
		sm, _ := s.Serving()
		if got := sm.Stats().Objects; got != 31 {
			t.Fatalf("standby holds %d objects, want 31", got)
		}
		// Promote: only what the standby had not applied is replayed.
		res, err := s.Promote(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Term != 2 || res.ReplayedGens != 0 || res.Objects != 31 || res.SegmentsAwaitingRemount != 1 {
			t.Fatalf("promotion %+v", res)
		}
		m2 := primary(t, s)
		if err := readable(m2, "k1"); !errors.Is(err, master.ErrNoReadableReplica) {
			t.Fatalf("the promoted master serves a replica before its segment remounted: %v", err)
		}
		// The old primary learns it lost the log without a write, steps
		// down, and follows the new one as a standby, sending clients
		// there...
		waitFor(t, "the old primary to see it is fenced", func() bool {
			err := p.Status().SteppedDown
			return errors.Is(err, master.ErrFenced) && errors.Is(err, fence.ErrFenced)
		})
		waitFor(t, "the old primary to name the new one", func() bool {
			_, err := p.Serving()
			l, ok := master.LeaderOf(err)
			return errors.Is(err, master.ErrNotPrimary) && ok && l.Term == 2 && l.Node == "test-s"
		})
		if st := p.Status(); st.Role != RoleStandby || st.Term != 0 {
			t.Fatalf("the old primary after stepping down: %+v", st)
		}
		// ...and a change sent to its master directly is not acknowledged.
		err = m.PutEnd(context.Background(), "c1", "t", "k1")
		if !errors.Is(err, master.ErrFenced) {
			t.Fatalf("the zombie acknowledged a change: %v", err)
		}
		// The promoted master serves after the remount, pins kept.
		remountAll(t, m2, 1)
		for _, k := range []string{"before", "k0", "k29"} {
			if err := readable(m2, k); err != nil {
				t.Fatalf("%s after remount: %v", k, err)
			}
		}
		putObj(t, m2, "new", master.PutOptions{})
		if got := m2.Stats().Objects; got != 32 {
			t.Fatalf("promoted master holds %d objects", got)
		}
	})
}

// A standby that lags when promoted replays the tail it had not applied;
// with its tail collected below a newer snapshot, it reloads instead.
func TestPromotionReplaysTheTail(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	p := start(t, store.Container, false)
	m := primary(t, p)
	mountSeg(t, m, 1)
	s := start(t, store.Container, true, func(o *Options) { o.PollInterval = time.Hour })
	waitFor(t, "the standby to load", func() bool { return s.Status().Bootstrapped })
	for i := range 10 {
		putObj(t, m, fmt.Sprintf("k%d", i), master.PutOptions{})
	}
	res, err := s.Promote(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.ReplayedGens == 0 || res.Objects != 10 {
		t.Fatalf("promotion %+v, want the 10 puts replayed", res)
	}
}

// A change is answered only once its generation is in the log: while the
// md create is held, PutEnd waits; when the log fails for good (not
// fenced), the master stops serving and says so.
func TestAnswerWaitsForTheLog(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	p := start(t, store.Container, false)
	m := primary(t, p)
	mountSeg(t, m, 1)
	if _, err := m.PutStart(context.Background(), master.PutRequest{Client: "c1", Tenant: "t", Key: "k", Size: 10}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var held sync.Once
	heldc := make(chan struct{})
	store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpCreateIfAbsent && strings.Contains(r.Key, layout.MDPrefix) {
			held.Do(func() { close(heldc) })
			<-release
		}
		return nil
	}})
	done := make(chan error, 1)
	go func() { done <- m.PutEnd(context.Background(), "c1", "t", "k") }()
	<-heldc
	select {
	case err := <-done:
		t.Fatalf("PutEnd answered (%v) before its md was created", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A failure that is not fencing: the log cannot be written.
	store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpCreateIfAbsent && strings.Contains(r.Key, layout.MDPrefix) {
			return errors.New("access denied")
		}
		return nil
	}})
	if err := m.Remove(context.Background(), "t", "k", true); !errors.Is(err, master.ErrLogFailed) {
		t.Fatalf("Remove with a failing log: %v", err)
	}
	if st := p.Status(); st.Role != RoleFailed {
		t.Fatalf("role %v after the log failed", st.Role)
	}
	if _, err := p.Serving(); !errors.Is(err, master.ErrLogFailed) {
		t.Fatalf("a master whose log failed still serves: %v", err)
	}
	if err := m.MountSegment(context.Background(), "c1", master.SegmentSpec{ID: 2, Size: 10, Endpoint: "e"}); !errors.Is(err, master.ErrLogFailed) {
		t.Fatalf("a later change: %v", err)
	}
}

// Complete snapshots: published as checkpoints of the log, manifest last;
// GC collects the log below them; a restart restores the newest one that
// restores and replays the log after it, falling back past a candidate
// whose clock mapping is malformed.
func TestSnapshotsRestoreAndFallBack(t *testing.T) {
	runBackends(t, func(t *testing.T, store *blobstore.Container) {
		ctx := context.Background()
		p := start(t, store, false)
		m := primary(t, p)
		mountSeg(t, m, 1)
		for i := range 10 {
			putObj(t, m, fmt.Sprintf("a%d", i), master.PutOptions{})
		}
		s1, err := p.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s1.Objects != 10 || s1.Gen < 1 || s1.Unchanged {
			t.Fatalf("first snapshot %+v", s1)
		}
		if again, err := p.Snapshot(ctx); err != nil || !again.Unchanged || again.Key != s1.Key {
			t.Fatalf("a snapshot with nothing new: %+v %v", again, err)
		}
		// The log at and below the snapshot is collected.
		sub, _ := blobstore.Sub(store, p.Shard())
		if _, err := sub.Get(ctx, layout.MDKey(1, 1)); !errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("gen 1 below the snapshot: %v", err)
		}
		for i := range 5 {
			putObj(t, m, fmt.Sprintf("b%d", i), master.PutOptions{})
		}
		// A newer candidate whose clock mapping is malformed but whose
		// files verify: only the restore can refuse it.
		p.mu.Lock()
		sh, lg := p.sh, p.oplog
		p.mu.Unlock()
		pos, _ := lg.Acked()
		files, err := m.Freeze(nil, master.SnapshotV2).WriteFiles(t.TempDir(), "bad")
		if err != nil {
			t.Fatal(err)
		}
		local := make([]seal.LocalFile, len(files))
		for i, f := range files {
			local[i] = seal.LocalFile{Name: f.Name, Path: f.Path}
			if f.Name == master.SnapshotManifestFile {
				local[i].Path = writeTemp(t, "messagepack|2.0.0|bad|not-a-number|5")
			}
		}
		if _, err := seal.PublishCheckpoint(ctx, sub, sh.Chain, pos.Gen, local, seal.PublishOptions{NextSeqNo: pos.NextSeqNo}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			putObj(t, m, fmt.Sprintf("c%d", i), master.PutOptions{})
		}
		p.stop(t)

		before := testCounter(t, p.opts.Metrics.candidateFallbacks)
		n2 := start(t, store, false, func(o *Options) { o.Metrics = p.opts.Metrics })
		m2 := primary(t, n2)
		if got := m2.Stats().Objects; got != 18 {
			t.Fatalf("restored %d objects, want 18 (snapshot + log after it)", got)
		}
		if st := n2.Status(); st.LastSnapshot != s1.Key {
			t.Fatalf("restored from %q, want the good snapshot %q", st.LastSnapshot, s1.Key)
		}
		if got := testCounter(t, p.opts.Metrics.candidateFallbacks) - before; got != 1 {
			t.Fatalf("%v candidate fallbacks counted, want 1", got)
		}
		remountAll(t, m2, 1)
		for _, k := range []string{"a0", "b4", "c2"} {
			if err := readable(m2, k); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
		}
	})
}

// Phase 3, test 13: the checkpoint manifest is the snapshot's last write,
// after every file; a copy of the whole log shard (a backup) restores the
// same state, with the snapshot's manifest line byte for byte.
func TestSnapshotManifestLastAndBackup(t *testing.T) {
	runBackends(t, func(t *testing.T, inner *blobstore.Container) {
		ctx := context.Background()
		store := faulty.New(inner, 1)
		p := start(t, store.Container, false)
		m := primary(t, p)
		mountSeg(t, m, 1)
		for i := range 5 {
			putObj(t, m, fmt.Sprintf("k%d", i), master.PutOptions{SoftPin: true})
		}
		var mu sync.Mutex
		var writes []string
		store.SetHooks(faulty.Hooks{After: func(ctx context.Context, r faulty.Request, err error) {
			if err == nil && (r.Op == blobstore.OpPut || r.Op == blobstore.OpCreateIfAbsent) && strings.Contains(r.Key, layout.CheckpointDir) {
				mu.Lock()
				writes = append(writes, r.Key)
				mu.Unlock()
			}
		}})
		snap, err := p.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		store.SetHooks(faulty.Hooks{})
		mu.Lock()
		if len(writes) < 4 || !strings.HasSuffix(writes[len(writes)-1], snap.Key) {
			t.Fatalf("snapshot writes %q: the manifest %q must come last", writes, snap.Key)
		}
		mu.Unlock()
		p.stop(t)

		// Back the log shard up into another store and restore from the
		// copy.
		backup := mem.New()
		sub, _ := blobstore.Sub(store.Container, p.Shard())
		bsub, _ := blobstore.Sub(backup, p.Shard())
		items, err := blobstore.ListAll(ctx, sub, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			obj, err := sub.Get(ctx, it.Key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bsub.Put(ctx, it.Key, obj.Body); err != nil {
				t.Fatal(err)
			}
		}
		n2 := start(t, backup, false)
		if got := primary(t, n2).Stats().Objects; got != 5 {
			t.Fatalf("restored %d objects from the backup", got)
		}
		key := layout.FilePrefix(1, snap.Gen) + master.SnapshotManifestFile
		a, err1 := sub.Get(ctx, key)
		b, err2 := bsub.Get(ctx, key)
		if err1 != nil || err2 != nil || string(a.Body) != string(b.Body) || !strings.HasPrefix(string(a.Body), "messagepack|2.0.0|") {
			t.Fatalf("manifest line %q / backup %q (%v, %v)", a.Body, b.Body, err1, err2)
		}
	})
}

// Phase 3, test 14: the standby path never takes or publishes a complete
// snapshot, and replaying a log with no snapshot restores none.
func TestStandbyTakesNoSnapshot(t *testing.T) {
	store := mem.New()
	p := start(t, store, false)
	m := primary(t, p)
	mountSeg(t, m, 1)
	putObj(t, m, "k", master.PutOptions{})
	mo := master.NewMetrics(nil)
	s := start(t, store, true, func(o *Options) { o.MasterOptions.Metrics = mo })
	waitFor(t, "the standby to apply the log", func() bool { return s.Status().Position == p.Status().Position })
	if _, err := s.Snapshot(context.Background()); !errors.Is(err, master.ErrNotPrimary) {
		t.Fatalf("standby snapshot: %v", err)
	}
	sub, _ := blobstore.Sub(store, p.Shard())
	if items, err := blobstore.ListAll(context.Background(), sub, layout.CheckpointDir); err != nil || len(items) != 0 {
		t.Fatalf("checkpoints after a standby ran: %v %v", items, err)
	}
	if st := s.Status(); st.LastSnapshot != "" {
		t.Fatalf("standby restored snapshot %q from a log without one", st.LastSnapshot)
	}
}

// v1 snapshots (--snapshot-format=v1) are still written and read.
func TestSnapshotFormatV1RoundTrip(t *testing.T) {
	store := mem.New()
	p := start(t, store, false, func(o *Options) { o.SnapshotFormat = master.SnapshotV1 })
	m := primary(t, p)
	mountSeg(t, m, 1)
	putObj(t, m, "k", master.PutOptions{HardPin: true})
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	mo := master.NewMetrics(nil)
	n2 := start(t, store, false, func(o *Options) { o.MasterOptions.Metrics = mo })
	if got := primary(t, n2).Stats().Objects; got != 1 {
		t.Fatalf("restored %d objects from a v1 snapshot", got)
	}
	sub, _ := blobstore.Sub(store, p.Shard())
	obj, err := sub.Get(context.Background(), layout.FilePrefix(1, snap.Gen)+master.SnapshotManifestFile)
	if err != nil || !strings.HasPrefix(string(obj.Body), "messagepack|1.0.0|") {
		t.Fatalf("v1 manifest %q %v", obj.Body, err)
	}
}

// /healthz answers while the process runs; /readyz follows the role.
func TestHealthAndReadiness(t *testing.T) {
	store := mem.New()
	p := start(t, store, false)
	primary(t, p)
	mux := http.NewServeMux()
	p.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) int {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if get("/healthz") != 200 || get("/readyz") != 200 {
		t.Fatal("a primary is not healthy and ready")
	}
	s := start(t, store, true)
	s.Promote(context.Background())
	// The old primary, fenced, steps down: it stays up, and once it has
	// loaded the log again it is a ready standby that names the primary.
	waitFor(t, "fencing", func() bool { return errors.Is(p.Status().SteppedDown, master.ErrFenced) })
	if get("/healthz") != 200 {
		t.Fatal("a fenced master must stay up")
	}
	waitFor(t, "the old primary to be a ready standby", func() bool {
		res, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode == 200 && strings.Contains(string(body), "ready standby") && strings.Contains(string(body), "at term 2")
	})
}

// A primary whose store stops answering the fence listing cannot prove it
// holds the log: it is not ready (and refuses changes) until a listing
// answers again, and then it is ready without a restart.
func TestReadinessFollowsTheProofOfOwnership(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	p := start(t, store.Container, false)
	primary(t, p)
	waitFor(t, "ready", func() bool { return p.Ready() == nil })
	var down atomic.Bool
	store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if down.Load() && r.Op == blobstore.OpList && strings.Contains(r.Key, "fence/") {
			return blobstore.Unavailable(errors.New("injected: the store does not answer"))
		}
		return nil
	}})
	down.Store(true)
	waitFor(t, "not ready while the fence listing fails", func() bool {
		err := p.Ready()
		return err != nil && strings.Contains(err.Error(), "could not prove")
	})
	if st := p.Status(); st.Role != RolePrimary {
		t.Fatalf("role %v: store trouble is not fencing", st.Role)
	}
	down.Store(false)
	waitFor(t, "ready again once the listing answers", func() bool { return p.Ready() == nil })
}

// A store that stops answering (one holding a resumed process's requests)
// leaves no error to report: the fence listing and the log's CASes just
// wait. The primary's proof then ages past its lease, and that alone makes
// it not ready.
func TestReadinessFollowsAProofThatStopsAnswering(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	p := start(t, store.Container, false)
	primary(t, p)
	waitFor(t, "ready", func() bool { return p.Ready() == nil })
	hang := make(chan struct{})
	var down atomic.Bool
	store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if down.Load() {
			select {
			case <-hang:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	down.Store(true)
	waitFor(t, "not ready while the store does not answer", func() bool {
		err := p.Ready()
		return err != nil && strings.Contains(err.Error(), "more than the")
	})
	if st := p.Status(); st.Role != RolePrimary {
		t.Fatalf("role %v: a store that does not answer is not fencing", st.Role)
	}
	down.Store(false)
	close(hang)
	waitFor(t, "ready again once the store answers", func() bool { return p.Ready() == nil })
}

func testCounter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func writeTemp(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A master that has not learnt it lost the log hands out memory only
// within its allocation lease; the new primary places nothing until that
// lease (plus a margin) has run out since its claim, so the two never
// place into the same free space.
func TestZombieStopsPlacingBeforeTheSuccessorStarts(t *testing.T) {
	store := mem.New()
	lease := 400 * time.Millisecond
	slow := func(o *Options) {
		o.FenceCheckInterval = time.Hour // the zombie learns only by itself
		o.AllocationLease, o.AllocationLeaseMargin = lease, 100*time.Millisecond
	}
	p := start(t, store, false, slow)
	m := primary(t, p)
	mountSeg(t, m, 1)
	putObj(t, m, "k", master.PutOptions{})
	s := start(t, store, true, slow)
	waitFor(t, "the standby to catch up", func() bool { return s.Status().Position == p.Status().Position })
	promoted := time.Now() // before the claim's sweep
	if _, err := s.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2 := primary(t, s)
	remountAll(t, m2, 1)
	if _, err := m2.PutStart(context.Background(), master.PutRequest{Client: "c1", Tenant: "t", Key: "new", Size: 10}); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(promoted); waited < lease {
		t.Fatalf("the new primary placed %v after its promotion, inside its predecessor's %v lease", waited, lease)
	}
	// By now the old primary's proof ran out: it must prove ownership
	// before placing, and learns it is fenced.
	_, err := m.PutStart(context.Background(), master.PutRequest{Client: "c1", Tenant: "t", Key: "zombie", Size: 10})
	if !errors.Is(err, master.ErrFenced) {
		t.Fatalf("the old primary placed after its lease: %v", err)
	}
	if p.Status().Role != RoleFenced {
		t.Fatalf("old primary role %v", p.Status().Role)
	}
}

// A standby that falls behind the log's collection (GC removed the
// generation it needs, below a newer snapshot) reloads from that snapshot
// and tails on from there.
func TestStandbyReloadsAfterCollection(t *testing.T) {
	inner := mem.New()
	keep := func(o *Options) { o.Retain = seal.GCPolicy{RetainCheckpoints: 1} }
	p := start(t, inner, false, keep)
	m := primary(t, p)
	mountSeg(t, m, 1)
	putObj(t, m, "k", master.PutOptions{})
	slow := faulty.New(inner, 1)
	metrics := NewMetrics(nil)
	s := start(t, slow.Container, true, keep, func(o *Options) { o.Metrics = metrics })
	waitFor(t, "the standby to catch up", func() bool { return s.Status().Position == p.Status().Position })
	release := make(chan struct{})
	slow.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpGet && strings.Contains(r.Key, layout.MDPrefix) {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	for i := range 10 {
		putObj(t, m, fmt.Sprintf("a%d", i), master.PutOptions{})
	}
	if _, err := p.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		putObj(t, m, fmt.Sprintf("b%d", i), master.PutOptions{})
	}
	close(release)
	want := p.Status().Position
	waitFor(t, "the standby to reload and catch up", func() bool { return s.Status().Position == want })
	if got := testCounter(t, metrics.standbyRebuilds); got < 1 {
		t.Fatalf("standby caught up without reloading (%v rebuilds): the log it needed was collected", got)
	}
	sm, _ := s.Serving()
	if got := sm.Stats().Objects; got != 14 {
		t.Fatalf("standby holds %d objects, want 14", got)
	}
}

// Two promotions of a standby sent together: one promotes it, the other
// is told the master is already the primary and at which term, not that
// it is "primary, not a standby" as if it had been sent to the wrong
// master.
func TestConcurrentPromotionsTellTheLoserItIsDone(t *testing.T) {
	store := mem.New()
	p := start(t, store, false)
	primary(t, p)
	s := start(t, store, true)
	type out struct {
		res PromoteResult
		err error
	}
	outs := make(chan out, 2)
	for range 2 {
		go func() {
			res, err := s.Promote(context.Background())
			outs <- out{res, err}
		}()
	}
	a, b := <-outs, <-outs
	if (a.err == nil) == (b.err == nil) {
		t.Fatalf("two promotions: %v and %v, want one to promote", a.err, b.err)
	}
	won, lost := a, b
	if a.err != nil {
		won, lost = b, a
	}
	want := fmt.Sprintf("already the primary, at term %d", won.res.Term)
	if !errors.Is(lost.err, master.ErrInvalidArgument) || !strings.Contains(lost.err.Error(), want) {
		t.Fatalf("the second promotion: %v, want %q", lost.err, want)
	}
}
