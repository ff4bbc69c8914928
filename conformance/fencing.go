package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// FencingVersion is the fencing suite's version (see Suite.Version).
const FencingVersion = 2

// The invariants of docs/PROTOCOL.md section 8, as the fencing checks name
// them in Check.Guards and in every failure.
const (
	NoAckedWriteLoss   = "NoAckedWriteLoss"
	AckOrder           = "AckOrder"
	SingleAcker        = "SingleAcker"
	NoSpuriousFencing  = "NoSpuriousFencing"
	FencedTerminal     = "FencedTerminal"
	GCSafety           = "GCSafety"
	HigherTermPrevails = "HigherTermPrevails"
)

// fencingShard is the shard id every fencing check writes: each check's
// scratch container is the shard's prefix.
const fencingShard = "fencing-check"

// finalTerm is the term of the reader that recovers each check's shard at
// its end: above every term a check claims.
const finalTerm = 100

// fencingBackoff retries store trouble quickly: a check stages races on a
// real store and should not sleep through them.
func fencingBackoff() fence.Backoff {
	return fence.Backoff{Initial: time.Millisecond, Max: 50 * time.Millisecond, Attempts: 12}
}

// violated records that the store, run through the protocol's own code,
// broke invariant inv. The message starts with the invariant's name, so a
// report says which guarantee a store cannot give.
func violated(t T, inv, format string, args ...any) {
	t.Helper()
	t.Errorf("%s violated: %s", inv, fmt.Sprintf(format, args...))
}

// unstaged stops a check whose scenario could not be set up: the store
// answered in a way the check did not get to judge. It is a failure (the
// store was not certified), but not an invariant's.
func unstaged(t T, format string, args ...any) {
	t.Helper()
	t.Fatalf("could not stage the scenario: %s", fmt.Sprintf(format, args...))
}

// fencingEnv is one fencing check's world: the check's scratch container as
// the store holds it, the actors that write to it through their own fault
// injectors, what was acknowledged, and everything to stop at the end.
type fencingEnv struct {
	t     T
	ctx   context.Context
	store *blobstore.Container // the truth: no faults, no holds
	clock clock.Clock

	mu      sync.Mutex
	actors  []*actor
	writers []*translog.Writer
	acked   []ackRecord
	dirs    []string
	// fenceBodies counts every body stored at each fence key, to find a
	// body written twice (an ABA on stores whose token hashes the body).
	fenceBodies map[string]map[string]int
	// mode is the fencing mode every writer of the check asks for (the
	// shard stores it at its first open); zero is the translog's default.
	mode translog.FencingMode
}

// ackRecord is one acknowledged op: who acknowledged it, and where.
type ackRecord struct {
	op   string
	who  string
	term int64
	gen  int64
	seq  int64
}

// newFencingEnv sets up a check over c (its scratch prefix, empty). Every
// writer is closed and every held request released when the check ends.
func newFencingEnv(t T, c *blobstore.Container) *fencingEnv {
	e := &fencingEnv{t: t, ctx: t.Context(), clock: clock.System(), fenceBodies: map[string]map[string]int{}}
	e.store = c.With("", e.recordFenceWrites)
	t.Cleanup(e.stop)
	return e
}

// stop releases every held request, then closes the writers: a writer
// retries store trouble for as long as it is open.
func (e *fencingEnv) stop() {
	e.mu.Lock()
	actors, writers, dirs := e.actors, e.writers, e.dirs
	e.mu.Unlock()
	for _, a := range actors {
		a.releaseAll()
	}
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 10*time.Second)
			defer cancel()
			_ = w.Close(ctx)
		})
	}
	wg.Wait()
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// recordFenceWrites notes every body the store took at a fence key. It sits
// under every actor's fault injector, so it sees what reached the store.
func (e *fencingEnv) recordFenceWrites(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
	res, err := next(ctx, call)
	if err == nil && call.Op.Mutates() && call.Op != blobstore.OpDelete && call.Op != blobstore.OpDeleteIfMatch && strings.HasPrefix(call.Key, layout.FencePrefix) {
		e.mu.Lock()
		m := e.fenceBodies[call.Key]
		if m == nil {
			m = map[string]int{}
			e.fenceBodies[call.Key] = m
		}
		m[string(call.Body)]++
		e.mu.Unlock()
	}
	return res, err
}

// checkFenceBodies fails the check if any body was stored twice at one
// fence key: on a store whose token is a hash of the body (S3 ETags), the
// second write hands back the first one's token, and a stale CAS expecting
// it passes again (PROTOCOL.md section 6, step 6).
func (e *fencingEnv) checkFenceBodies() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(e.fenceBodies)) {
		for body, n := range e.fenceBodies[k] {
			if n > 1 {
				violated(e.t, SingleAcker, "the body %q was stored %d times at %s: on a store whose token hashes the body (S3 ETags are MD5s) a repeated body brings back a token a stale writer may hold (ABA), so every fence write must carry a new seq or nonce", body, n, k)
			}
		}
	}
}

// actor is one client of the store (a primary, a successor, a relocation
// target) with its own fault injector, so a rule or a hold applies to that
// client's requests only.
type actor struct {
	name  string
	f     *faulty.Container
	store *blobstore.Container

	mu      sync.Mutex
	pending []*hold // holds not yet taken, in the order they were set
	all     []*hold
}

func (e *fencingEnv) actor(name string) *actor {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := &actor{name: name, f: faulty.New(e.store, uint64(len(e.actors))+1)}
	a.store = a.f.Container
	a.f.SetHooks(faulty.Hooks{Before: a.before})
	e.actors = append(e.actors, a)
	return a
}

// hold is one request held on the wire: the store does not see it until
// released, and its sender waits, as it would for a slow network.
type hold struct {
	what    string
	match   func(faulty.Request) bool
	arrived chan faulty.Request
	gate    chan struct{}
	once    sync.Once
}

// hold holds the actor's next request that match accepts.
func (a *actor) hold(what string, match func(faulty.Request) bool) *hold {
	h := &hold{what: what, match: match, arrived: make(chan faulty.Request, 1), gate: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending = append(a.pending, h)
	a.all = append(a.all, h)
	return h
}

func (a *actor) before(ctx context.Context, r faulty.Request) error {
	a.mu.Lock()
	var h *hold
	for i, x := range a.pending {
		if x.match(r) {
			h = x
			a.pending = slices.Delete(a.pending, i, i+1)
			break
		}
	}
	a.mu.Unlock()
	if h == nil {
		return nil
	}
	h.arrived <- r
	select {
	case <-h.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hold) release() { h.once.Do(func() { close(h.gate) }) }

func (a *actor) releaseAll() {
	a.mu.Lock()
	all := a.all
	a.mu.Unlock()
	for _, h := range all {
		h.release()
	}
}

// request matches one op on one key.
func request(op blobstore.Op, key string) func(faulty.Request) bool {
	return func(r faulty.Request) bool { return r.Op == op && r.Key == key }
}

// await waits until the held request was sent.
func (e *fencingEnv) await(h *hold) {
	e.t.Helper()
	select {
	case <-h.arrived:
	case <-e.ctx.Done():
		unstaged(e.t, "%s was never sent (%v)", h.what, context.Cause(e.ctx))
	}
}

// rule adds a fault rule to an actor's injector; fired tells later whether
// it fired, so a check never passes without the fault it is about.
func (a *actor) rule(r faulty.Rule) faulty.RuleID { return a.f.MustAdd(r) }

func (e *fencingEnv) expectFired(a *actor, id faulty.RuleID, what string) {
	e.t.Helper()
	if a.f.Fired(id) == 0 {
		unstaged(e.t, "%s never happened: the fault was not injected, so nothing was checked", what)
	}
}

func (e *fencingEnv) sealOptions() seal.Options {
	return seal.Options{Clock: e.clock, Backoff: fencingBackoff(), Parallelism: 8}
}

func (e *fencingEnv) writerOptions() translog.Options {
	// A small inline limit, so the larger ops go through data objects;
	// no gather delay, so each append is one generation.
	return translog.Options{Clock: e.clock, Backoff: fencingBackoff(), MaxGatherDelay: -1, InlineLimit: 256, FencingMode: e.mode}
}

func (e *fencingEnv) recoveryOptions(col *collector) recovery.Options {
	o := recovery.Options{Clock: e.clock, Backoff: fencingBackoff(), Parallelism: 8, Writer: e.writerOptions()}
	if col != nil {
		o.Apply = col.apply
	}
	return o
}

// open runs recovery.Open for the actor. A retryable error (an incomplete
// sweep, store trouble) is retried a few times, as a cluster retries a grant.
func (e *fencingEnv) open(a *actor, term int64, alloc string, col *collector) (*recovery.Shard, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var sh *recovery.Shard
		o := e.recoveryOptions(col)
		if col != nil {
			col.reset()
		}
		sh, err = recovery.Open(e.ctx, a.store, fencingShard, term, alloc, o)
		if err == nil {
			e.track(sh.Writer)
			return sh, nil
		}
		if !blobstore.IsRetryable(err) || e.ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// mustOpen is open for an actor nothing stands in the way of.
func (e *fencingEnv) mustOpen(a *actor, term int64, alloc string, col *collector) *recovery.Shard {
	e.t.Helper()
	sh, err := e.open(a, term, alloc, col)
	switch {
	case errors.Is(err, fence.ErrFenced):
		violated(e.t, HigherTermPrevails, "term %d (%s) was fenced opening the shard, though no higher term claims it: %v", term, alloc, err)
		e.t.Fatalf("stopping: the rest of the check builds on this open")
	case err != nil:
		unstaged(e.t, "open term %d as %s: %v", term, alloc, err)
	}
	return sh
}

type opened struct {
	sh  *recovery.Shard
	err error
}

// openAsync runs open in the background; the check reads the result later.
func (e *fencingEnv) openAsync(a *actor, term int64, alloc string, col *collector) <-chan opened {
	ch := make(chan opened, 1)
	go func() {
		sh, err := e.open(a, term, alloc, col)
		ch <- opened{sh, err}
	}()
	return ch
}

// receive waits for a background result, bounded by the check's context.
func receive[V any](e *fencingEnv, ch <-chan V, what string) V {
	e.t.Helper()
	select {
	case v := <-ch:
		return v
	case <-e.ctx.Done():
		unstaged(e.t, "%s did not finish (%v)", what, context.Cause(e.ctx))
		panic("unreachable")
	}
}

func (e *fencingEnv) track(w *translog.Writer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writers = append(e.writers, w)
}

// appendOp appends one op and notes it if acknowledged. who names the
// writer in messages ("term 1", "the relocation target").
func (e *fencingEnv) appendOp(w *translog.Writer, who, op string) (translog.Ack, error) {
	ack, err := w.Append(e.ctx, [][]byte{[]byte(op)})
	if err == nil {
		e.mu.Lock()
		e.acked = append(e.acked, ackRecord{op: op, who: who, term: ack.Term, gen: ack.Gen, seq: ack.FirstSeqNo})
		e.mu.Unlock()
	}
	return ack, err
}

type appended struct {
	op  string
	ack translog.Ack
	err error
}

func (e *fencingEnv) appendAsync(w *translog.Writer, who, op string) <-chan appended {
	ch := make(chan appended, 1)
	go func() {
		ack, err := e.appendOp(w, who, op)
		ch <- appended{op, ack, err}
	}()
	return ch
}

// mustAppend appends on the writer that owns the shard now: with no
// successor and no handoff, it must be acknowledged.
func (e *fencingEnv) mustAppend(w *translog.Writer, who, op string) translog.Ack {
	e.t.Helper()
	ack, err := e.appendOp(w, who, op)
	switch {
	case errors.Is(err, fence.ErrFenced):
		violated(e.t, NoSpuriousFencing, "%s, which no successor or handoff displaced, was fenced appending %q: %v", who, op, err)
		e.t.Fatalf("stopping: the rest of the check builds on this append")
	case err != nil:
		unstaged(e.t, "%s could not append %q: %v", who, op, err)
	}
	return ack
}

// expectFenced appends on a writer that lost the shard: it must fail with a
// fencing error, never be acknowledged. inv is the invariant an ack breaks.
func (e *fencingEnv) expectFenced(w *translog.Writer, who, op, inv, why string) {
	e.t.Helper()
	_, err := e.appendOp(w, who, op)
	e.expectRefused(appended{op: op, err: err}, who, inv, 0, why)
}

// expectRefused judges the outcome of an append that must not be
// acknowledged; successor, when not 0, is the term its fencing error must
// name.
func (e *fencingEnv) expectRefused(r appended, who, inv string, successor int64, why string) {
	e.t.Helper()
	switch {
	case r.err == nil:
		violated(e.t, inv, "%s acknowledged %q (term %d gen %d): %s", who, r.op, r.ack.Term, r.ack.Gen, why)
	case !errors.Is(r.err, fence.ErrFenced) && !errors.Is(r.err, fence.ErrHandedOff) && !errors.Is(r.err, translog.ErrClosed):
		violated(e.t, FencedTerminal, "%s's append of %q ended with %v; a writer that lost the shard must fail with a fencing error", who, r.op, r.err)
	case successor != 0:
		if got, ok := fence.SuccessorTerm(r.err); ok && got != successor {
			violated(e.t, FencedTerminal, "%s's fencing error names successor term %d, want %d: %v", who, got, successor, r.err)
		}
	}
}

// waitFenceGen waits until term's fence key commits gen: the CAS of a sync
// landed, whatever happened to its md.
func (e *fencingEnv) waitFenceGen(term, gen int64) {
	e.t.Helper()
	key := layout.FenceKey(term)
	for {
		obj, err := e.store.Get(e.ctx, key)
		if err == nil {
			if rec, err := fence.DecodeRecord(fencingShard, key, obj.Body); err == nil && rec.Gen >= gen {
				return
			}
		}
		select {
		case <-e.ctx.Done():
			unstaged(e.t, "the fence key of term %d never committed generation %d (%v)", term, gen, context.Cause(e.ctx))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// expectPoison checks that key holds the poison term sealedBy created.
func (e *fencingEnv) expectPoison(key string, sealedBy int64, inv, when string) {
	e.t.Helper()
	obj, err := e.store.Get(e.ctx, key)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		violated(e.t, inv, "%s the poison at %s is gone: a zombie's late md create can land there and complete an acknowledgement no restore point holds", when, key)
		return
	case err != nil:
		unstaged(e.t, "read the poison at %s: %v", key, err)
	}
	md, err := translog.DecodeMD(fencingShard, key, obj.Body)
	switch {
	case err != nil:
		violated(e.t, inv, "%s %s holds a body that is not term %d's poison (%v): something replaced it", when, key, sealedBy, err)
	case md.Kind != translog.KindPoison || md.SealedBy != sealedBy:
		violated(e.t, inv, "%s %s holds %s, not term %d's poison: a create-if-absent replaced an existing object, so If-None-Match: * is not enforced", when, key, describeMD(md), sealedBy)
	}
}

func describeMD(m translog.MD) string {
	if m.Kind == translog.KindPoison {
		return fmt.Sprintf("a poison by term %d", m.SealedBy)
	}
	return fmt.Sprintf("a sync record of %s (term %d gen %d)", m.Allocation, m.Term, m.Gen)
}

// entry is one op of a restored lineage, with where it lies.
type entry struct {
	op   string
	term int64
	gen  int64
	seq  int64
}

// collector gathers what recovery.Open replays.
type collector struct {
	mu      sync.Mutex
	entries []entry
}

func (c *collector) apply(_ context.Context, b translog.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, op := range b.Ops {
		c.entries = append(c.entries, entry{op: string(op), term: b.Term, gen: b.Gen, seq: b.FirstSeqNo + int64(i)})
	}
	return nil
}

func (c *collector) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = nil
}

func (c *collector) all() []entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.entries)
}

func (c *collector) has(op string) bool {
	return slices.ContainsFunc(c.all(), func(x entry) bool { return x.op == op })
}

// ackedBy returns what who acknowledged, in ack order.
func (e *fencingEnv) ackedBy(who string) []entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []entry
	for _, a := range e.acked {
		if a.who == who {
			out = append(out, entry{op: a.op, term: a.term, gen: a.gen, seq: a.seq})
		}
	}
	return out
}

// checkpointFiles writes the state entries up to gen as one checkpoint
// file ("term gen seq op" per line) and returns it for PublishCheckpoint.
func (e *fencingEnv) checkpointFiles(entries []entry) []seal.LocalFile {
	e.t.Helper()
	dir := e.tempDir()
	var b bytes.Buffer
	for _, x := range entries {
		fmt.Fprintf(&b, "%d %d %d %s\n", x.term, x.gen, x.seq, x.op)
	}
	path := filepath.Join(dir, "state")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		unstaged(e.t, "write the checkpoint file: %v", err)
	}
	return []seal.LocalFile{{Name: "state", Path: path}}
}

func (e *fencingEnv) tempDir() string {
	e.t.Helper()
	dir, err := os.MkdirTemp("", "shardfence-fencing-")
	if err != nil {
		unstaged(e.t, "temporary directory: %v", err)
	}
	e.mu.Lock()
	e.dirs = append(e.dirs, dir)
	e.mu.Unlock()
	return dir
}

func readCheckpointFile(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) != 4 {
			return nil, fmt.Errorf("checkpoint line %q is not \"term gen seq op\"", sc.Text())
		}
		var x entry
		var errs [3]error
		x.term, errs[0] = strconv.ParseInt(parts[0], 10, 64)
		x.gen, errs[1] = strconv.ParseInt(parts[1], 10, 64)
		x.seq, errs[2] = strconv.ParseInt(parts[2], 10, 64)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("checkpoint line %q: %w", sc.Text(), err)
		}
		x.op = parts[3]
		out = append(out, x)
	}
	return out, sc.Err()
}

// verifyLineage ends a check: a fresh allocation recovers the shard at
// finalTerm (hydrating the newest lineage checkpoint) and every op any
// writer acknowledged must be in what it restores, exactly once, where it
// was acknowledged, in acknowledgement order. hint says what in the store
// would explain a loss. It returns the final shard for further checks.
func (e *fencingEnv) verifyLineage(hint string) *recovery.Shard {
	e.t.Helper()
	col := &collector{}
	a := e.actor("final reader")
	o := e.recoveryOptions(col)
	o.Dir = e.tempDir()
	var sh *recovery.Shard
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		col.reset()
		sh, err = recovery.Open(e.ctx, a.store, fencingShard, finalTerm, "final-reader", o)
		if err == nil || !blobstore.IsRetryable(err) {
			break
		}
	}
	if err != nil {
		violated(e.t, HigherTermPrevails, "the final reader could not open the shard at term %d, above every other claim: %v", finalTerm, err)
		return nil
	}
	e.track(sh.Writer)
	var lineage []entry
	if sh.Checkpoint != nil {
		for _, p := range sh.Files {
			got, err := readCheckpointFile(p)
			if err != nil {
				violated(e.t, NoAckedWriteLoss, "the final reader hydrated checkpoint %s, which does not read back: %v", sh.Checkpoint.Key(), err)
				return sh
			}
			lineage = append(lineage, got...)
		}
	}
	lineage = append(lineage, col.all()...)
	e.checkAcked(lineage, sh, hint)
	e.checkFenceBodies()
	return sh
}

func (e *fencingEnv) checkAcked(lineage []entry, sh *recovery.Shard, hint string) {
	e.t.Helper()
	pos := map[string]int{}
	for i, x := range lineage {
		if _, dup := pos[x.op]; dup {
			violated(e.t, NoAckedWriteLoss, "op %q appears twice in the lineage restored at term %d: the restore is not the acknowledged history", x.op, finalTerm)
		}
		pos[x.op] = i
	}
	e.mu.Lock()
	acked := slices.Clone(e.acked)
	e.mu.Unlock()
	rp := sh.Restore()
	for _, a := range acked {
		i, ok := pos[a.op]
		switch {
		case !ok:
			violated(e.t, NoAckedWriteLoss, "op %q, acknowledged by %s at term %d gen %d, is missing from the lineage restored at term %d (restore point term %d gen %d)%s", a.op, a.who, a.term, a.gen, finalTerm, rp.Term, rp.Gen, hint)
		case lineage[i].term != a.term || lineage[i].gen != a.gen:
			violated(e.t, NoAckedWriteLoss, "op %q was acknowledged by %s at term %d gen %d but the lineage holds it at term %d gen %d", a.op, a.who, a.term, a.gen, lineage[i].term, lineage[i].gen)
		}
	}
	// AckOrder: acknowledged generations lie on the lineage in the order
	// they were acknowledged, and so do the ops of one generation.
	sort.SliceStable(acked, func(i, j int) bool {
		if acked[i].gen != acked[j].gen {
			return acked[i].gen < acked[j].gen
		}
		return acked[i].seq < acked[j].seq
	})
	last := -1
	var prev ackRecord
	for _, a := range acked {
		i, ok := pos[a.op]
		if !ok {
			continue
		}
		if i < last {
			violated(e.t, AckOrder, "op %q (gen %d) lies before %q (gen %d) in the restored lineage, though it was acknowledged at a later generation or sequence number", a.op, a.gen, prev.op, prev.gen)
		}
		last, prev = i, a
	}
	e.t.Logf("final reader at term %d: restore point term %d gen %d, %d ops on the lineage, %d acknowledged by the check's writers", finalTerm, rp.Term, rp.Gen, len(lineage), len(acked))
}
