package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

const shard = "s1"

var fastRetry = fence.Backoff{Initial: 100 * time.Microsecond, Max: 2 * time.Millisecond, Attempts: 8}

// backend is one store the scenario table runs against. Every store is
// wrapped by faulty so a scenario can hold a request at the exact step it
// needs; the "faulty" backend also injects lost responses, 409s, 5xx and
// jitter throughout.
type backend struct {
	name string
	open func(t *testing.T) *faulty.Container
}

func backends() []backend {
	return []backend{
		{"mem", func(t *testing.T) *faulty.Container { return faulty.New(mem.New(), 1) }},
		{"fs", func(t *testing.T) *faulty.Container {
			c, err := fs.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return faulty.New(c, 1)
		}},
		{"faulty", func(t *testing.T) *faulty.Container {
			f := faulty.New(mem.New(), 3)
			f.MustAdd(faulty.Rule{Latency: faulty.Uniform(0, 200*time.Microsecond)})
			f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap), Fault: faulty.LostResponse, Probability: 0.1})
			f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap, blobstore.OpCreateIfAbsent), Fault: faulty.Conflict, Probability: 0.05})
			f.MustAdd(faulty.Rule{Ops: faulty.Reads, Fault: faulty.Unavailable, Probability: 0.05})
			return f
		}},
	}
}

// scenarios are the recovery scenarios every backend runs.
func scenarios() []struct {
	name string
	run  func(t *testing.T, store *faulty.Container)
} {
	return []struct {
		name string
		run  func(t *testing.T, store *faulty.Container)
	}{
		{"FreshShardThenTakeoverRestoresEverything", scenarioFreshShardThenTakeoverRestoresEverything},
		{"SuccessorPoisonsTheGapAndZombieMDCreateFails", scenarioSuccessorPoisonsTheGapAndZombieMDCreateFails},
		{"RacingSuccessorsLateMarkerOrphansTheLoser", scenarioRacingSuccessorsLateMarkerOrphansTheLoser},
		{"LeaseModeWaitsBeforeReadingTheLineage", scenarioLeaseModeWaitsBeforeReadingTheLineage},
		{"StaleTermFailsAtTheSeal", scenarioStaleTermFailsAtTheSeal},
		{"CorruptMDStopsRecoveryNamingTheKey", scenarioCorruptMDStopsRecoveryNamingTheKey},
		{"CorruptDataObjectStopsReplay", scenarioCorruptDataObjectStopsReplay},
		{"RetryOfFailedOpenIsIdempotent", scenarioRetryOfFailedOpenIsIdempotent},
		{"RestartOfAnOpenedTermIsRefused", scenarioRestartOfAnOpenedTermIsRefused},
		{"CheckpointWithMissingFileFallsBackToThePreviousOne", scenarioCheckpointWithMissingFileFallsBackToThePreviousOne},
		{"CheckpointOffTheLineageIsNeverUsed", scenarioCheckpointOffTheLineageIsNeverUsed},
		{"NoAckedWriteLossAcrossTakeovers", scenarioNoAckedWriteLossAcrossTakeovers},
		{"CheckpointTheCallerRefusesFallsBack", scenarioCheckpointTheCallerRefusesFallsBack},
		{"ResumeReplaysOnlyWhatFollows", scenarioResumeReplaysOnlyWhatFollows},
	}
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			for _, b := range backends() {
				t.Run(b.name, func(t *testing.T) { sc.run(t, b.open(t)) })
			}
		})
	}
}

// log collects replayed ops in order.
type log struct {
	mu  sync.Mutex
	ops []string
}

func (l *log) apply(_ context.Context, b translog.Batch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, op := range b.Ops {
		l.ops = append(l.ops, string(op))
	}
	return nil
}

func (l *log) set() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]bool{}
	for _, op := range l.ops {
		m[op] = true
	}
	return m
}

func options(l *log) recovery.Options {
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry, Parallelism: 4}
	o.Writer.Backoff = fastRetry
	o.Writer.InlineLimit = 64 // small, so data objects are exercised too
	if l != nil {
		o.Apply = l.apply
	}
	return o
}

func open(t *testing.T, store *blobstore.Container, term int64, alloc string, o recovery.Options) *recovery.Shard {
	t.Helper()
	sh, err := recovery.Open(context.Background(), store, shard, term, alloc, o)
	if err != nil {
		t.Fatalf("open term %d: %v", term, err)
	}
	t.Cleanup(func() { _ = sh.Writer.Close(context.Background()) })
	return sh
}

func appendOps(t *testing.T, w *translog.Writer, ops ...string) translog.Ack {
	t.Helper()
	b := make([][]byte, len(ops))
	for i, op := range ops {
		b[i] = []byte(op)
	}
	ack, err := w.Append(context.Background(), b)
	if err != nil {
		t.Fatalf("append %v: %v", ops, err)
	}
	return ack
}

func closeW(t *testing.T, w *translog.Writer) {
	t.Helper()
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func scenarioFreshShardThenTakeoverRestoresEverything(t *testing.T, store *faulty.Container) {
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	if r := sh1.Restore(); r != (seal.RestorePoint{}) {
		t.Fatalf("a new shard restores from %+v, want the empty restore point", r)
	}
	var want []string
	for i := range 5 {
		op := fmt.Sprintf("op-%d-%s", i, strings.Repeat("x", i*30))
		appendOps(t, sh1.Writer, op)
		want = append(want, op)
	}
	closeW(t, sh1.Writer)

	var l log
	sh2 := open(t, store.Container, 2, "a2", options(&l))
	// The term opened: its marker is stored and names the restore point.
	obj, err := store.Inner().Get(context.Background(), layout.MarkerKey(2))
	if err != nil {
		t.Fatalf("term 2 opened without a readable marker: %v", err)
	}
	if m, err := seal.DecodeMarker(shard, layout.MarkerKey(2), obj.Body); err != nil || m != sh2.Seal.Marker {
		t.Fatalf("stored marker %+v (%v), Open reports %+v", m, err, sh2.Seal.Marker)
	}
	if got := sh2.Restore(); got.Term != 1 || got.Gen != 5 || got.MDKey != layout.MDKey(1, 5) {
		t.Fatalf("restore point %+v, want term 1 gen 5", got)
	}
	if fmt.Sprint(l.ops) != fmt.Sprint(want) {
		t.Fatalf("replayed %q, want %q", l.ops, want)
	}
	if sh2.NextSeqNo != 5 || sh2.Writer.NextGen() != 6 {
		t.Fatalf("writer opens at gen %d seq %d, want gen 6 seq 5", sh2.Writer.NextGen(), sh2.NextSeqNo)
	}
	ack := appendOps(t, sh2.Writer, "after")
	if ack.Gen != 6 || ack.FirstSeqNo != 5 || ack.Term != 2 {
		t.Fatalf("first ack of term 2: %+v", ack)
	}
	closeW(t, sh2.Writer)

	// A third term follows the chain 3 -> 2 -> 1 across terms.
	var l3 log
	sh3 := open(t, store.Container, 3, "a3", options(&l3))
	if fmt.Sprint(l3.ops) != fmt.Sprint(append(want, "after")) {
		t.Fatalf("term 3 replayed %q", l3.ops)
	}
	if n := len(sh3.Seal.Lineage.Chain); n != 2 {
		t.Fatalf("term 3 followed %d markers, want 2", n)
	}
}

// holdRequests blocks the first request matching match until release is
// called, and reports it on held. Later matches (a successor's request on
// the same key) pass.
func holdRequests(store *faulty.Container, match func(faulty.Request) bool) (held chan faulty.Request, release func()) {
	held = make(chan faulty.Request, 16)
	gate := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	taken := false
	store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		mu.Lock()
		hold := !taken && match(r)
		taken = taken || hold
		mu.Unlock()
		if !hold {
			return nil
		}
		held <- r
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	return held, func() { once.Do(func() { close(gate) }) }
}

func scenarioSuccessorPoisonsTheGapAndZombieMDCreateFails(t *testing.T, store *faulty.Container) {
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "g1")
	appendOps(t, sh1.Writer, "g2")
	gap := layout.MDKey(1, 3)
	held, release := holdRequests(store, func(r faulty.Request) bool { return r.Op == blobstore.OpCreateIfAbsent && r.Key == gap })
	defer release()
	type result struct {
		ack translog.Ack
		err error
	}
	done := make(chan result, 1)
	go func() {
		ack, err := sh1.Writer.Append(context.Background(), [][]byte{[]byte("g3")})
		done <- result{ack, err}
	}()
	<-held // the zombie's md create for gen 3 is on the wire; its CAS is not held
	waitFenceGen(t, store, 1, 3)

	var l log
	sh2 := open(t, store.Container, 2, "a2", options(&l))
	release()
	r := <-done
	if !errors.Is(r.err, fence.ErrFenced) {
		t.Fatalf("zombie append of gen 3: ack %+v err %v, want fenced", r.ack, r.err)
	}
	if succ, ok := fence.SuccessorTerm(r.err); !ok || succ != 2 {
		t.Fatalf("fencing error names successor %d (%v), want 2: %v", succ, ok, r.err)
	}
	if got := sh2.Restore(); got.Gen != 2 || sh2.Seal.Marker.Poisoned != gap || sh2.Seal.Found != "created" {
		t.Fatalf("restore %+v poisoned %q (%s), want gen 2 and poison at %q", got, sh2.Seal.Marker.Poisoned, sh2.Seal.Found, gap)
	}
	md, err := translog.NewReader(store.Inner(), shard).ReadMD(context.Background(), 1, 3)
	if err != nil || md.Kind != translog.KindPoison || md.SealedBy != 2 {
		t.Fatalf("gen 3 of term 1 holds %+v (%v), want term 2's poison", md, err)
	}
	if fmt.Sprint(l.ops) != "[g1 g2]" {
		t.Fatalf("restored %q", l.ops)
	}
}

// waitFenceGen waits until term's fence key commits gen: the zombie's CAS
// landed while its md is held, the race the poison closes.
func waitFenceGen(t *testing.T, store *faulty.Container, term, gen int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		obj, err := store.Inner().Get(context.Background(), layout.FenceKey(term))
		if err == nil {
			if rec, err := fence.DecodeRecord(shard, layout.FenceKey(term), obj.Body); err == nil && rec.Gen >= gen {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("fence key of term %d never committed gen %d", term, gen)
}

func scenarioRacingSuccessorsLateMarkerOrphansTheLoser(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh4 := open(t, store.Container, 4, "a4", options(nil))
	for i := 1; i <= 3; i++ {
		appendOps(t, sh4.Writer, fmt.Sprintf("t4-%d", i))
	}
	marker5 := layout.MarkerKey(5)
	held, release := holdRequests(store, func(r faulty.Request) bool { return r.Op == blobstore.OpCreateIfAbsent && r.Key == marker5 })
	defer release()
	type result struct {
		sh  *recovery.Shard
		err error
	}
	done5 := make(chan result, 1)
	go func() {
		sh, err := recovery.Open(ctx, store.Container, shard, 5, "a5", options(nil))
		done5 <- result{sh, err}
	}()
	<-held // 5 has poisoned term 4 and its marker is on the wire

	var l6 log
	sh6 := open(t, store.Container, 6, "a6", options(&l6))
	if got := sh6.Restore(); got.Term != 4 || got.Gen != 3 || sh6.Seal.Found != "found" {
		t.Fatalf("term 6 restore %+v (%s), want term 4 gen 3 cut at 5's poison", got, sh6.Seal.Found)
	}
	appendOps(t, sh6.Writer, "t6-a")
	appendOps(t, sh6.Writer, "t6-b")

	release() // 5's marker lands late
	r5 := <-done5
	if r5.err == nil {
		// 5 opened behind a fence key 6 deleted: it can write an
		// md (an orphan) but never acknowledge.
		_, err := r5.sh.Writer.Append(ctx, [][]byte{[]byte("t5-never")})
		if !errors.Is(err, fence.ErrFenced) {
			t.Fatalf("term 5 append after term 6 opened: %v, want fenced", err)
		}
		_ = r5.sh.Writer.Close(ctx)
	} else if !errors.Is(r5.err, fence.ErrFenced) {
		t.Fatalf("term 5 open: %v, want success-then-fenced or fenced", r5.err)
	}
	closeW(t, sh6.Writer)

	var l7 log
	sh7 := open(t, store.Container, 7, "a7", options(&l7))
	want := "[t4-1 t4-2 t4-3 t6-a t6-b]"
	if fmt.Sprint(l7.ops) != want {
		t.Fatalf("term 7 restored %q, want %s", l7.ops, want)
	}
	rep, err := seal.Inspect(ctx, store.Container, shard, seal.Options{Backoff: fastRetry})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	for _, o := range rep.Orphans {
		if p, ok := layout.ParseMDKey(o.Key); ok && p.Term != 5 {
			t.Fatalf("orphan %q is not term 5's", o.Key)
		}
	}
	if rep.OffChain == nil || !contains(rep.OffChain, marker5) {
		t.Fatalf("term 5's late marker is not reported off the chain: %+v", rep.OffChain)
	}
	_ = sh7
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func scenarioLeaseModeWaitsBeforeReadingTheLineage(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	o1 := options(nil)
	o1.Writer.FencingMode, o1.Writer.LeaseInterval = translog.Lease, 5*time.Second
	sh1 := open(t, store.Container, 1, "a1", o1)
	appendOps(t, sh1.Writer, "x")
	clock := clock.NewFake()
	o := options(nil)
	o.Clock = clock
	o.Backoff = fence.Backoff{Attempts: 1}
	o.Writer.FencingMode = translog.Lease
	o.Writer.LeaseInterval = 5 * time.Second
	o.LeaseMargin = time.Second
	done := make(chan error, 1)
	go func() {
		sh, err := recovery.Open(ctx, store.Container, shard, 2, "a2", o)
		if err == nil {
			err = sh.Writer.Close(ctx)
		}
		done <- err
	}()
	for clock.Waiters() == 0 {
		select {
		case err := <-done:
			t.Fatalf("Open returned before the lease wait: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	clock.Advance(5*time.Second + 900*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if _, err := store.Inner().Stat(ctx, layout.MarkerKey(2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("marker of term 2 written %v before lease + margin elapsed (stat: %v)", time.Duration(clock.Now()), err)
	}
	if _, err := store.Inner().Stat(ctx, layout.MDKey(1, 2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the lineage was poisoned before the lease ran out (stat: %v)", err)
	}
	clock.Advance(200 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("open after the lease wait: %v", err)
	}
}

func scenarioStaleTermFailsAtTheSeal(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "x")
	closeW(t, sh1.Writer)
	// A replica claimed term 5 and stalled before its seal; term 6
	// then claimed and sealed.
	chain5, err := fence.Claim(ctx, store.Container, shard, 5, "a5", fence.WithBackoff(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	sh6 := open(t, store.Container, 6, "a6", options(nil))
	_, err = seal.Seal(ctx, store.Container, chain5, seal.Options{Backoff: fastRetry})
	if !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale term 5 sealed: %v, want fenced", err)
	}
	if succ, _ := fence.SuccessorTerm(err); succ != 6 {
		t.Fatalf("fencing error names successor %d, want 6: %v", succ, err)
	}
	if _, err := store.Inner().Stat(ctx, layout.MarkerKey(5)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the stale term wrote a marker (stat: %v)", err)
	}
	if _, err := store.Inner().Stat(ctx, layout.MDKey(6, 2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the stale term poisoned the live term (stat: %v)", err)
	}
	appendOps(t, sh6.Writer, "still-open")
}

func scenarioCorruptMDStopsRecoveryNamingTheKey(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	for i := range 4 {
		appendOps(t, sh1.Writer, fmt.Sprintf("op%d", i))
	}
	closeW(t, sh1.Writer)
	bad := layout.MDKey(1, 2)
	if _, err := store.Inner().Put(ctx, bad, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	_, err := recovery.Open(ctx, store.Container, shard, 2, "a2", options(&log{}))
	var be *fence.BodyError
	if !errors.As(err, &be) || be.Key != bad || !strings.Contains(err.Error(), bad) {
		t.Fatalf("open over a corrupt md: %v, want an error naming %q", err, bad)
	}
	if _, err := store.Inner().Stat(ctx, layout.MarkerKey(2)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("a marker was written past a corrupt lineage (stat: %v)", err)
	}
}

func scenarioCorruptDataObjectStopsReplay(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, strings.Repeat("a", 200)) // over the inline limit
	appendOps(t, sh1.Writer, "b")
	closeW(t, sh1.Writer)
	bad := layout.DataKey(1, 1)
	if _, err := store.Inner().Put(ctx, bad, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	_, err := recovery.Open(ctx, store.Container, shard, 2, "a2", options(&log{}))
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("replay over a corrupt data object: %v, want an error naming %q", err, bad)
	}
	// The failure came after the seal: a retry is idempotent and
	// fails the same way, never skipping the generation.
	_, err = recovery.Open(ctx, store.Container, shard, 2, "a2", options(&log{}))
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("retried open: %v", err)
	}
}

func scenarioRetryOfFailedOpenIsIdempotent(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "a")
	appendOps(t, sh1.Writer, "b")
	o := options(nil)
	boom := errors.New("disk full")
	o.Apply = func(context.Context, translog.Batch) error { return boom }
	if _, err := recovery.Open(ctx, store.Container, shard, 2, "a2", o); !errors.Is(err, boom) {
		t.Fatalf("open with a failing apply: %v", err)
	}
	// The zombie keeps writing: its next generation was poisoned.
	if _, err := sh1.Writer.Append(ctx, [][]byte{[]byte("c")}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("term 1 after term 2's seal: %v, want fenced", err)
	}
	var l log
	sh2 := open(t, store.Container, 2, "a2", options(&l))
	if !sh2.Seal.Reused || sh2.Restore().Gen != 2 || fmt.Sprint(l.ops) != "[a b]" {
		t.Fatalf("retry: reused %v restore %+v ops %q", sh2.Seal.Reused, sh2.Restore(), l.ops)
	}
	if _, err := recovery.Open(ctx, store.Container, shard, 2, "other", options(nil)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("another allocation opening the same term: %v, want fenced", err)
	}
}

func scenarioRestartOfAnOpenedTermIsRefused(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "a")
	closeW(t, sh1.Writer)
	_, err := recovery.Open(ctx, store.Container, shard, 1, "a1", options(nil))
	if !errors.Is(err, seal.ErrTermAlreadyOpen) || !strings.Contains(err.Error(), "new, higher term") {
		t.Fatalf("reopening a term that wrote: %v, want ErrTermAlreadyOpen", err)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) []seal.LocalFile {
	t.Helper()
	var out []seal.LocalFile
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, strings.ReplaceAll(n, "/", "_"))
		if err := os.WriteFile(p, []byte(files[n]), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, seal.LocalFile{Name: n, Path: p})
	}
	return out
}

func scenarioCheckpointWithMissingFileFallsBackToThePreviousOne(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	src := t.TempDir()
	appendOps(t, sh1.Writer, "a")
	appendOps(t, sh1.Writer, "b")
	po := seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 2}
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 2, writeFiles(t, src, map[string]string{"state": "a,b", "meta/info": "v1"}), po); err != nil {
		t.Fatalf("publish at gen 2: %v", err)
	}
	appendOps(t, sh1.Writer, "c")
	appendOps(t, sh1.Writer, "d")
	po.NextSeqNo = 4
	m4, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 4, writeFiles(t, src, map[string]string{"state": "a,b,c,d", "meta/info": "v1"}), po)
	if err != nil {
		t.Fatalf("publish at gen 4: %v", err)
	}
	appendOps(t, sh1.Writer, "e")
	closeW(t, sh1.Writer)
	missing := layout.FilePrefix(1, 4) + "state"
	if err := store.Inner().Delete(ctx, missing); err != nil {
		t.Fatal(err)
	}

	var l log
	o := options(&l)
	o.Dir = t.TempDir()
	var progress []recovery.Progress
	var pmu sync.Mutex
	o.Progress = func(p recovery.Progress) { pmu.Lock(); progress = append(progress, p); pmu.Unlock() }
	sh2 := open(t, store.Container, 2, "a2", o)
	if sh2.Checkpoint == nil || sh2.Checkpoint.Gen != 2 {
		t.Fatalf("hydrated %+v, want the checkpoint at gen 2", sh2.Checkpoint)
	}
	if len(sh2.Refused) != 1 || sh2.Refused[0].Key != m4.Key() || !strings.Contains(sh2.Refused[0].Reason, missing) {
		t.Fatalf("refused %+v, want the gen-4 checkpoint refused for %q", sh2.Refused, missing)
	}
	state, err := os.ReadFile(filepath.Join(o.Dir, "state"))
	if err != nil || string(state) != "a,b" {
		t.Fatalf("hydrated state %q (%v)", state, err)
	}
	if fmt.Sprint(l.ops) != "[c d e]" || sh2.Replay.From != 3 || sh2.Replay.To != 5 {
		t.Fatalf("replayed %q (gens %d..%d), want c d e from gen 3", l.ops, sh2.Replay.From, sh2.Replay.To)
	}
	var sawFiles bool
	for _, p := range progress {
		if p.Phase == "hydrate" && p.Files == 2 && p.FilesTotal == 2 && p.Bytes == p.BytesTotal {
			sawFiles = true
		}
	}
	if !sawFiles {
		t.Fatalf("progress never reported the whole checkpoint: %+v", progress)
	}
}

func scenarioCheckpointOffTheLineageIsNeverUsed(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "a")
	closeW(t, sh1.Writer)
	// A zombie of term 1 publishes a checkpoint at a generation its
	// lineage never reached (gen 3 while the cut is at 1).
	src := t.TempDir()
	po := seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 9}
	sh2 := open(t, store.Container, 2, "a2", options(nil))
	appendOps(t, sh2.Writer, "b")
	appendOps(t, sh2.Writer, "c")
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 3, writeFiles(t, src, map[string]string{"state": "zombie"}), po); !errors.Is(err, seal.ErrSuperseded) && !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("a superseded term published: %v", err)
	}
	// Even if it lands (the fence was unreadable), it is off the
	// lineage: put it there by hand.
	body, _ := seal.EncodeManifest(seal.Manifest{Shard: shard, Term: 1, Gen: 3, NextSeqNo: 9, Files: []seal.ManifestFile{}})
	if _, err := store.Inner().CreateIfAbsent(ctx, layout.ManifestKey(1, 3), body); err != nil {
		t.Fatal(err)
	}
	closeW(t, sh2.Writer)
	var l log
	o := options(&l)
	o.Dir = t.TempDir()
	sh3 := open(t, store.Container, 3, "a3", o)
	if sh3.Checkpoint != nil || fmt.Sprint(l.ops) != "[a b c]" {
		t.Fatalf("used checkpoint %+v and replayed %q", sh3.Checkpoint, l.ops)
	}
}

// NoAckedWriteLoss through recovery.Open: a primary keeps appending through
// a jittery store while successors claim and seal; every op it acknowledged
// must be restored by the successor.
func scenarioNoAckedWriteLossAcrossTakeovers(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Prefix: layout.MDPrefix, Latency: faulty.Uniform(0, 2*time.Millisecond)})
	var acked []string
	var mu sync.Mutex
	prev := open(t, store.Container, 1, "a1", options(nil))
	total := 0
	for term := int64(2); term <= 6; term++ {
		var wg sync.WaitGroup
		for a := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					op := fmt.Sprintf("t%d-a%d-%d", term-1, a, i)
					if _, err := prev.Writer.Append(ctx, [][]byte{[]byte(op)}); err != nil {
						if !errors.Is(err, fence.ErrFenced) {
							t.Errorf("append: %v", err)
						}
						return
					}
					mu.Lock()
					acked = append(acked, op)
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Duration(2+term%3) * time.Millisecond)
		var l log
		next := open(t, store.Container, term, fmt.Sprintf("a%d", term), options(&l))
		wg.Wait()
		restored := l.set()
		mu.Lock()
		for _, op := range acked {
			if !restored[op] {
				t.Fatalf("term %d: acknowledged op %q is not in the restore point", term, op)
			}
		}
		total += len(acked)
		mu.Unlock()
		prev = next
	}
	if total == 0 {
		t.Fatal("no op was ever acknowledged: the test checked nothing")
	}
}

// A checkpoint whose files verify but whose content the caller refuses
// (AcceptCheckpoint) is passed over like a corrupt one: the next older one
// is hydrated and the replay starts after it.
func scenarioCheckpointTheCallerRefusesFallsBack(t *testing.T, store *faulty.Container) {
	ctx := context.Background()
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	src := t.TempDir()
	appendOps(t, sh1.Writer, "a")
	po := seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 1}
	if _, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 1, writeFiles(t, src, map[string]string{"state": "a"}), po); err != nil {
		t.Fatal(err)
	}
	appendOps(t, sh1.Writer, "b")
	po.NextSeqNo = 2
	m2, err := seal.PublishCheckpoint(ctx, store.Container, sh1.Chain, 2, writeFiles(t, src, map[string]string{"state": "garbled"}), po)
	if err != nil {
		t.Fatal(err)
	}
	appendOps(t, sh1.Writer, "c")
	closeW(t, sh1.Writer)

	var l log
	o := options(&l)
	o.Dir = t.TempDir()
	var judged []int64
	o.AcceptCheckpoint = func(m seal.Manifest, paths []string) error {
		judged = append(judged, m.Gen)
		b, err := os.ReadFile(paths[0])
		if err != nil {
			return err
		}
		if string(b) == "garbled" {
			return errors.New("state does not decode")
		}
		return nil
	}
	sh2 := open(t, store.Container, 2, "a2", o)
	if sh2.Checkpoint == nil || sh2.Checkpoint.Gen != 1 || fmt.Sprint(judged) != "[2 1]" {
		t.Fatalf("hydrated %+v after judging %v, want the gen-1 checkpoint after refusing gen 2", sh2.Checkpoint, judged)
	}
	if len(sh2.Refused) != 1 || sh2.Refused[0].Key != m2.Key() || !strings.Contains(sh2.Refused[0].Reason, "does not decode") {
		t.Fatalf("refused %+v", sh2.Refused)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "state")); err != nil {
		t.Fatalf("the accepted checkpoint's file: %v", err)
	}
	if fmt.Sprint(l.ops) != "[b c]" {
		t.Fatalf("replayed %q, want b c", l.ops)
	}
}

// Resume: a caller that already applied the lineage up to a generation
// (a hot standby) replays only what follows; a position the sealed
// lineage does not hold is refused before anything opens, and the same
// term can then be opened without it.
func scenarioResumeReplaysOnlyWhatFollows(t *testing.T, store *faulty.Container) {
	sh1 := open(t, store.Container, 1, "a1", options(nil))
	appendOps(t, sh1.Writer, "a")
	ack := appendOps(t, sh1.Writer, "b")
	appendOps(t, sh1.Writer, "c")
	closeW(t, sh1.Writer)

	// Off the lineage: a generation past the restore point.
	o := options(nil)
	o.Resume = &recovery.Position{Term: 1, Gen: 9, NextSeqNo: 9}
	if _, err := recovery.Open(context.Background(), store.Container, shard, 2, "a2", o); !errors.Is(err, recovery.ErrResumeOffLineage) {
		t.Fatalf("resume past the restore point: %v", err)
	}
	// The same term and allocation open with a good position.
	var l log
	o = options(&l)
	o.Resume = &recovery.Position{Term: 1, Gen: ack.Gen, NextSeqNo: ack.FirstSeqNo + 1}
	sh2 := open(t, store.Container, 2, "a2", o)
	if fmt.Sprint(l.ops) != "[c]" || sh2.Replay.From != 3 || sh2.NextSeqNo != 3 {
		t.Fatalf("resumed replay %q from gen %d, next seq %d; want c from gen 3, next 3", l.ops, sh2.Replay.From, sh2.NextSeqNo)
	}
	// A position whose sequence number disagrees with the log is caught
	// by the replay's continuity check.
	closeW(t, sh2.Writer)
	o = options(nil)
	o.Resume = &recovery.Position{Term: 1, Gen: ack.Gen, NextSeqNo: 7}
	if _, err := recovery.Open(context.Background(), store.Container, shard, 3, "a3", o); !errors.Is(err, fence.ErrCorruptBody) {
		t.Fatalf("resume with a wrong sequence number: %v", err)
	}
}
