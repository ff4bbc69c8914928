package translog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

var fastRetry = fence.Backoff{Initial: 100 * time.Microsecond, Max: time.Millisecond, Attempts: 4}

type rig struct {
	t     *testing.T
	inner *blobstore.Container
	store *faulty.Container
	chain *fence.Chain
	w     *Writer
}

// newRig claims term on a faulty-wrapped mem store and opens a writer.
func newRig(t *testing.T, term int64, o Options) *rig {
	t.Helper()
	return newSeededRig(t, term, o, 7)
}

// newSeededRig is newRig with the fault injector's seed.
func newSeededRig(t *testing.T, term int64, o Options, seed uint64) *rig {
	t.Helper()
	inner := mem.New()
	r := &rig{t: t, inner: inner, store: faulty.New(inner, seed)}
	r.open(term, "a1", o)
	return r
}

func (r *rig) open(term int64, alloc string, o Options) {
	r.t.Helper()
	if o.Clock == nil {
		o.Clock = clock.NewAuto()
	}
	if o.Backoff == (fence.Backoff{}) {
		o.Backoff = fastRetry
	}
	var err error
	if !o.FencingDisabled {
		r.chain, err = fence.Claim(context.Background(), r.store.Container, shard, term, alloc, fence.WithClock(o.Clock), fence.WithBackoff(o.Backoff))
		if err != nil {
			r.t.Fatalf("claim: %v", err)
		}
	}
	r.w, err = Open(context.Background(), r.store.Container, r.chain, o)
	if err != nil {
		r.t.Fatalf("open: %v", err)
	}
	r.t.Cleanup(func() { _ = r.w.Close(context.Background()) })
}

func (r *rig) append(ops ...string) (Ack, error) {
	b := make([][]byte, len(ops))
	for i, op := range ops {
		b[i] = []byte(op)
	}
	return r.w.Append(context.Background(), b)
}

func (r *rig) mustAppend(ops ...string) Ack {
	r.t.Helper()
	a, err := r.append(ops...)
	if err != nil {
		r.t.Fatalf("append: %v", err)
	}
	return a
}

// fenceGen reads the generation the term's fence key commits.
func (r *rig) fenceGen(term int64) int64 {
	r.t.Helper()
	o, err := r.inner.Get(context.Background(), layout.FenceKey(term))
	if err != nil {
		r.t.Fatalf("read fence key: %v", err)
	}
	rec, err := fence.DecodeRecord(shard, layout.FenceKey(term), o.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return rec.Gen
}

// readAll returns every op of term's generations from..to via the reader.
func (r *rig) readAll(term, from, to int64) []string {
	r.t.Helper()
	var out []string
	err := NewReader(r.inner, shard).Iterate(context.Background(), term, from, to, func(b Batch) error {
		for _, op := range b.Ops {
			out = append(out, string(op))
		}
		return nil
	})
	if err != nil {
		r.t.Fatalf("read back: %v", err)
	}
	return out
}

func TestAppendAcksWithGenerationAndSeqNos(t *testing.T) {
	r := newRig(t, 2, Options{StartSeqNo: 50})
	a1 := r.mustAppend("a", "b")
	a2 := r.mustAppend("c")
	if a1 != (Ack{Term: 2, Gen: 1, FirstSeqNo: 50, Count: 2}) || a2 != (Ack{Term: 2, Gen: 2, FirstSeqNo: 52, Count: 1}) {
		t.Fatalf("acks %+v %+v", a1, a2)
	}
	if g := r.fenceGen(2); g != 2 {
		t.Fatalf("fence key commits gen %d, want 2", g)
	}
	if got := r.readAll(2, 1, 2); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("read back %v", got)
	}
	if got := r.store.Requests(blobstore.OpCompareAndSwap); got != 2 {
		t.Fatalf("%d CAS requests for 2 syncs", got)
	}
}

func TestLargePayloadGoesToDataObjectFirst(t *testing.T) {
	r := newRig(t, 1, Options{InlineLimit: 100})
	var order []string
	var mu sync.Mutex
	r.store.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpPut || q.Op == blobstore.OpCreateIfAbsent {
			mu.Lock()
			order = append(order, q.Op.String())
			mu.Unlock()
		}
		return nil
	}})
	big := string(bytes.Repeat([]byte("x"), 500))
	r.mustAppend(big, "small")
	if fmt.Sprint(order) != "[Put CreateIfAbsent]" {
		t.Fatalf("request order %v, want the data PUT before the md create", order)
	}
	if got := r.readAll(1, 1, 1); len(got) != 2 || got[0] != big {
		t.Fatalf("read back %d ops", len(got))
	}
	if s := r.w.Stats(); s.DataObjects != 1 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := r.inner.Stat(context.Background(), layout.DataKey(1, 1)); err != nil {
		t.Fatalf("data object: %v", err)
	}
}

func TestGroupCommitCoalescesConcurrentAppends(t *testing.T) {
	r := newRig(t, 1, Options{})
	r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Fixed(2 * time.Millisecond)})
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := r.append(fmt.Sprintf("op-%04d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := r.w.Stats()
	if s.Ops != n || s.Syncs > n/10 {
		t.Fatalf("%d ops in %d syncs, want far fewer syncs than appends", s.Ops, s.Syncs)
	}
	got := r.readAll(1, 1, s.Syncs)
	sort.Strings(got)
	for i, op := range got {
		if op != fmt.Sprintf("op-%04d", i) {
			t.Fatalf("op %d = %q: lost or duplicated ops", i, op)
		}
	}
	t.Logf("%d appends in %d syncs", n, s.Syncs)
}

func TestAcksStayInOrderUnderLatencyJitter(t *testing.T) {
	for _, order := range []AckOrder{Concurrent, Sequenced} {
		t.Run(order.String(), func(t *testing.T) {
			r := newRig(t, 1, Options{AckOrder: order})
			r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Uniform(0, 3*time.Millisecond)})
			var wg sync.WaitGroup
			var maxAcked atomic.Int64
			for i := range 16 {
				wg.Go(func() {
					last := int64(0)
					for j := range 12 {
						a, err := r.append(fmt.Sprintf("%d-%d", i, j))
						if err != nil {
							t.Error(err)
							return
						}
						if a.Gen <= last {
							t.Errorf("appender %d: gen %d after gen %d", i, a.Gen, last)
						}
						last = a.Gen
						// AckOrder: an acked gen implies every lower gen
						// is durable and the fence commits at least it.
						for g := int64(1); g <= a.Gen; g++ {
							if _, err := r.inner.Stat(context.Background(), layout.MDKey(1, g)); err != nil {
								t.Errorf("gen %d acked but gen %d has no md: %v", a.Gen, g, err)
							}
						}
						if fg := r.fenceGen(1); fg < a.Gen {
							t.Errorf("gen %d acked but the fence commits only gen %d", a.Gen, fg)
						}
						for {
							m := maxAcked.Load()
							if a.Gen <= m || maxAcked.CompareAndSwap(m, a.Gen) {
								break
							}
						}
					}
				})
			}
			wg.Wait()
			if got := len(r.readAll(1, 1, maxAcked.Load())); got != 16*12 {
				t.Fatalf("%d ops read back, want %d", got, 16*12)
			}
		})
	}
}

func TestLostResponsesAndStoreTroubleDoNotFence(t *testing.T) {
	cases := map[string]faulty.Rule{
		"lost response on the ack CAS":   {Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: faulty.LostResponse, Times: 3},
		"lost request on the ack CAS":    {Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: faulty.LostRequest, Times: 3},
		"lost response on md create":     {Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Prefix: layout.MDPrefix, Fault: faulty.LostResponse, Times: 3},
		"lost request on md create":      {Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Prefix: layout.MDPrefix, Fault: faulty.LostRequest, Times: 3},
		"409 conflicts":                  {Ops: faulty.Conditional, Fault: faulty.Conflict, Probability: 0.3},
		"5xx before the store saw it":    {Ops: faulty.Writes, Fault: faulty.Unavailable, Probability: 0.3},
		"timeouts on every request kind": {Fault: faulty.LostRequest, Probability: 0.2},
	}
	for name, rule := range cases {
		for _, order := range []AckOrder{Concurrent, Sequenced} {
			t.Run(name+"/"+order.String(), func(t *testing.T) {
				r := newRig(t, 1, Options{AckOrder: order})
				id := r.store.MustAdd(rule)
				var want []string
				for i := range 8 {
					op := fmt.Sprintf("op%d", i)
					want = append(want, op)
					a, err := r.append(op)
					if err != nil {
						t.Fatalf("append %d: %v", i, err)
					}
					if a.Gen != int64(i+1) {
						t.Fatalf("append %d acked in gen %d", i, a.Gen)
					}
				}
				if r.store.Fired(id) == 0 {
					t.Fatal("the fault never fired")
				}
				r.store.Clear()
				if got := r.readAll(1, 1, 8); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("read back %v, want %v", got, want)
				}
				if r.chain.Err() != nil || r.w.Err() != nil {
					t.Fatalf("fenced without a successor: %v %v", r.chain.Err(), r.w.Err())
				}
			})
		}
	}
}

func TestHigherTermFencesActiveWriter(t *testing.T) {
	for _, order := range []AckOrder{Concurrent, Sequenced} {
		t.Run(order.String(), func(t *testing.T) {
			r := newRig(t, 1, Options{AckOrder: order})
			r.mustAppend("before")
			if _, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clock.NewAuto())); err != nil {
				t.Fatal(err)
			}
			_, err := r.append("after")
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("append after the successor's claim: %v", err)
			}
			if s, ok := fence.SuccessorTerm(err); !ok || s != 2 {
				t.Fatalf("successor term %d, %v (error %v)", s, ok, err)
			}
			// Terminal: the next append fails at once with the same error.
			if _, err2 := r.append("later"); !errors.Is(err2, ErrFenced) {
				t.Fatalf("later append: %v", err2)
			}
		})
	}
}

func TestPoisonAtNextGenFencesEvenIfCASSucceeded(t *testing.T) {
	r := newRig(t, 1, Options{})
	r.mustAppend("g1")
	// A successor (term 2) found gen 2 missing and poisoned it; our key was
	// not deleted yet, so the CAS for gen 2 still succeeds.
	poison, err := EncodePoison(shard, 1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.inner.CreateIfAbsent(context.Background(), layout.MDKey(1, 2), poison); err != nil {
		t.Fatal(err)
	}
	// The md create and the CAS go out side by side; hold the md create
	// until the CAS answered, so the CAS succeeds first whatever the
	// machine's load (else the writer stops before sending it).
	casDone := make(chan struct{})
	var once sync.Once
	r.store.SetHooks(faulty.Hooks{
		Before: func(ctx context.Context, q faulty.Request) error {
			if q.Op == blobstore.OpCreateIfAbsent && q.Key == layout.MDKey(1, 2) {
				select {
				case <-casDone:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
		After: func(_ context.Context, q faulty.Request, _ error) {
			if q.Op == blobstore.OpCompareAndSwap && q.Key == layout.FenceKey(1) {
				once.Do(func() { close(casDone) })
			}
		},
	})
	_, err = r.append("g2")
	r.store.SetHooks(faulty.Hooks{})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("append into a poisoned generation: %v", err)
	}
	if s, _ := fence.SuccessorTerm(err); s != 2 {
		t.Fatalf("successor %d, want 2 from the poison (%v)", s, err)
	}
	if g := r.fenceGen(1); g != 2 {
		t.Fatalf("fence key commits gen %d: the test wants the CAS for gen 2 to have succeeded", g)
	}
	if _, err := r.chain.Advance(context.Background(), 3); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("the chain's instance must be fenced too: %v", err)
	}
}

func TestFencingDisabledSendsNoCAS(t *testing.T) {
	r := newRig(t, 1, Options{FencingDisabled: true, Shard: shard, Term: 1, Allocation: "a1"})
	r.mustAppend("x")
	r.mustAppend("y")
	if n := r.store.Requests(blobstore.OpCompareAndSwap); n != 0 {
		t.Fatalf("%d CAS requests with fencing disabled", n)
	}
	if got := r.readAll(1, 1, 2); fmt.Sprint(got) != "[x y]" {
		t.Fatalf("read back %v", got)
	}
}

func TestSequencedCreatesMDBeforeCAS(t *testing.T) {
	r := newRig(t, 1, Options{AckOrder: Sequenced})
	var mu sync.Mutex
	var order []blobstore.Op
	r.store.SetHooks(faulty.Hooks{After: func(_ context.Context, q faulty.Request, err error) {
		mu.Lock()
		order = append(order, q.Op)
		mu.Unlock()
	}})
	r.mustAppend("x")
	r.mustAppend("y")
	want := []blobstore.Op{blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap, blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("requests %v, want %v", order, want)
	}
}

func TestConcurrentModeSendsMDAndCASTogether(t *testing.T) {
	r := newRig(t, 1, Options{})
	// Hold the md create until the CAS has been sent: in concurrent mode
	// that must happen without deadlock.
	casSent := make(chan struct{})
	var once sync.Once
	r.store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, q faulty.Request) error {
		switch q.Op {
		case blobstore.OpCompareAndSwap:
			once.Do(func() { close(casSent) })
		case blobstore.OpCreateIfAbsent:
			select {
			case <-casSent:
			case <-time.After(10 * time.Second):
				return errors.New("the CAS was not sent while the md create was in flight")
			}
		}
		return nil
	}})
	r.mustAppend("x")
}

func TestStartGenerationContinuesRestorePoint(t *testing.T) {
	r := newRig(t, 3, Options{StartGen: 41, StartSeqNo: 1000})
	a := r.mustAppend("x")
	if a.Gen != 41 || a.FirstSeqNo != 1000 {
		t.Fatalf("ack %+v", a)
	}
	md, err := NewReader(r.inner, shard).ReadMD(context.Background(), 3, 41)
	if err != nil || md.PrevGen != 40 {
		t.Fatalf("md %+v, %v", md, err)
	}
	// Opening below what the fence already commits would rewrite history.
	if _, err := Open(context.Background(), r.store.Container, r.chain, Options{StartGen: 41}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("reopening at a committed generation: %v", err)
	}
}

// noPreconditions is a store that enforces no conditional operation.
type noPreconditions struct{ *mem.Bucket }

func (noPreconditions) Capabilities() blobstore.Capabilities { return blobstore.Capabilities{} }

func TestOpenRefusesStoreWithoutPreconditions(t *testing.T) {
	_, err := Open(context.Background(), blobstore.New(noPreconditions{mem.NewBucket("no-preconditions")}), nil, Options{FencingDisabled: true, Shard: shard, Term: 1, Allocation: "a"})
	if !errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
		t.Fatalf("open: %v", err)
	}
	if _, err := Open(context.Background(), mem.New(), nil, Options{}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("open fenced without a chain: %v", err)
	}
}

func TestBackpressure(t *testing.T) {
	release := make(chan struct{})
	hold := faulty.Hooks{Before: func(ctx context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCreateIfAbsent {
			<-release
		}
		return nil
	}}
	t.Run("fail fast", func(t *testing.T) {
		r := newRig(t, 1, Options{MaxInFlightBytes: 200, FailFast: true})
		r.store.SetHooks(hold)
		first := make(chan error, 1)
		go func() { _, err := r.append(string(bytes.Repeat([]byte("a"), 150))); first <- err }()
		waitFor(t, func() bool { return r.w.inflightBytes() > 0 })
		if _, err := r.append(string(bytes.Repeat([]byte("b"), 100))); !errors.Is(err, ErrBackpressure) {
			t.Fatalf("second append: %v", err)
		}
		release <- struct{}{}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		r.store.SetHooks(faulty.Hooks{})
		r.mustAppend(string(bytes.Repeat([]byte("b"), 100)))
	})
	t.Run("wait", func(t *testing.T) {
		r := newRig(t, 1, Options{MaxInFlightBytes: 200})
		r.store.SetHooks(hold)
		first := make(chan error, 1)
		go func() { _, err := r.append(string(bytes.Repeat([]byte("a"), 150))); first <- err }()
		waitFor(t, func() bool { return r.w.inflightBytes() > 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := r.w.Append(ctx, [][]byte{bytes.Repeat([]byte("b"), 100)}); !errors.Is(err, context.DeadlineExceeded) || blobstore.IsAmbiguous(err) {
			t.Fatalf("append that never got room: %v (it was never queued, so not ambiguous)", err)
		}
		second := make(chan error, 1)
		go func() { _, err := r.append(string(bytes.Repeat([]byte("b"), 100))); second <- err }()
		release <- struct{}{}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		release <- struct{}{}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
	})
	r := newRig(t, 1, Options{MaxInFlightBytes: 100})
	if _, err := r.append(string(bytes.Repeat([]byte("c"), 200))); !errors.Is(err, blobstore.ErrTooLarge) {
		t.Fatalf("oversized append: %v", err)
	}
}

func (w *Writer) inflightBytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.p.inflight
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestCloseDrainsAndRefusesLaterAppends(t *testing.T) {
	r := newRig(t, 1, Options{})
	r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Fixed(time.Millisecond)})
	var wg sync.WaitGroup
	var acked atomic.Int64
	for i := range 20 {
		wg.Go(func() {
			if _, err := r.append(fmt.Sprint(i)); err == nil {
				acked.Add(1)
			} else if !errors.Is(err, ErrClosed) {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool { return r.w.inflightBytes() > 0 })
	if err := r.w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := r.append("late"); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	// Everything acknowledged is readable.
	if got := int64(len(r.readAll(1, 1, r.w.NextGen()-1))); got < acked.Load() {
		t.Fatalf("%d ops durable, %d acknowledged", got, acked.Load())
	}
}

func TestCloseWithExpiredContextAbandonsStuckSync(t *testing.T) {
	r := newRig(t, 1, Options{})
	r.store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Fault: faulty.Unavailable})
	res := make(chan error, 1)
	go func() { _, err := r.append("stuck"); res <- err }()
	waitFor(t, func() bool { return r.store.Injected(blobstore.OpCreateIfAbsent, faulty.Unavailable) > 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.w.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("close: %v", err)
	}
	if err := <-res; !errors.Is(err, ErrClosed) || errors.Is(err, ErrFenced) {
		t.Fatalf("stuck append: %v", err)
	}
}

// holdMD holds the create of md (1, gen) inside the store wrapper until
// release is closed; the request then goes on to the store.
func holdMD(r *rig, gen int64) (release func()) {
	ch := make(chan struct{})
	r.store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCreateIfAbsent && q.Key == layout.MDKey(1, gen) {
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func TestNoAckOnceTheWriterLearnedItIsFenced(t *testing.T) {
	// Gen 1's CAS lands and its md is slow. A successor claims; gen 2's
	// CAS finds the key gone and the writer learns it is fenced. When gen
	// 1's md lands afterwards, gen 1 must fail too: fenced is terminal,
	// every pending append fails (the write may be durable, unacked).
	r := newRig(t, 1, Options{AckOrder: Concurrent})
	release := holdMD(r, 1)
	defer release()
	type result struct {
		ack Ack
		err error
	}
	g1 := make(chan result, 1)
	go func() { a, err := r.append("g1"); g1 <- result{a, err} }()
	waitFor(t, func() bool { return r.fenceGen(1) == 1 })
	if _, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clock.NewAuto())); err != nil {
		t.Fatal(err)
	}
	g2 := make(chan result, 1)
	go func() { a, err := r.append("g2"); g2 <- result{a, err} }()
	waitFor(t, func() bool { return errors.Is(r.w.Err(), ErrFenced) })
	release()
	for name, ch := range map[string]chan result{"g1": g1, "g2": g2} {
		if res := <-ch; !errors.Is(res.err, ErrFenced) {
			t.Errorf("append %s after the writer learned it is fenced: ack %+v, error %v; want fenced", name, res.ack, res.err)
		}
	}
}

func TestNoAckOnceTheInstanceIsFencedElsewhere(t *testing.T) {
	// Gen 1's CAS lands and its md is slow; meanwhile another path of the
	// instance (a poison seen, another chain's verdict) fences it. The md
	// landing must not produce an ack.
	r := newRig(t, 1, Options{AckOrder: Concurrent})
	release := holdMD(r, 1)
	defer release()
	g1 := make(chan error, 1)
	go func() { _, err := r.append("g1"); g1 <- err }()
	waitFor(t, func() bool { return r.fenceGen(1) == 1 })
	r.chain.Fence(2, "poison found by another path")
	release()
	if err := <-g1; !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the instance was fenced: %v, want fenced", err)
	}
	if err := r.w.Err(); !errors.Is(err, ErrFenced) {
		t.Fatalf("writer error %v, want fenced", err)
	}
	if _, err := r.append("later"); !errors.Is(err, ErrFenced) {
		t.Fatalf("later append: %v, want fenced", err)
	}
}

// A store outage is visible while syncs retry it: StoreHealth names the
// last error and how long steps have been retrying, and clears the
// retrying state (keeping the last error) once a sync lands.
func TestStoreHealthShowsAnOutageWhileSyncsRetry(t *testing.T) {
	r := newRig(t, 1, Options{})
	r.mustAppend("before")
	h := r.w.StoreHealth()
	if h.Retrying() || h.LastError != nil || h.LastSync.IsZero() {
		t.Fatalf("healthy writer reports %+v", h)
	}
	outage := r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Fault: faulty.Unavailable})
	done := make(chan error, 1)
	go func() { _, err := r.append("during"); done <- err }()
	deadline := time.Now().Add(30 * time.Second)
	for h = r.w.StoreHealth(); !h.Retrying() || h.Retries < 3; h = r.w.StoreHealth() {
		if time.Now().After(deadline) {
			t.Fatalf("no retrying state after 30s of outage: %+v", h)
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(h.LastError, blobstore.ErrUnavailable) || h.LastErrorAt.IsZero() {
		t.Fatalf("health during the outage: %+v, want the injected unavailable error", h)
	}
	select {
	case err := <-done:
		t.Fatalf("append returned during the outage: %v", err)
	default:
	}
	r.store.Remove(outage)
	if err := <-done; err != nil {
		t.Fatalf("append after the outage: %v", err)
	}
	after := r.w.StoreHealth()
	if after.Retrying() || after.LastError == nil || !after.LastSync.After(h.LastSync) {
		t.Fatalf("health after the outage: %+v (during: %+v)", after, h)
	}
}

// A store that holds a sync's request without answering (a partition that
// drops packets) shows in StoreHealth.WaitingSince while the request is
// out, before any error; it clears once the request is answered.
func TestStoreHealthShowsAnUnansweredRequest(t *testing.T) {
	r := newRig(t, 1, Options{})
	r.mustAppend("before")
	if h := r.w.StoreHealth(); !h.WaitingSince.IsZero() {
		t.Fatalf("idle writer reports a request in flight: %+v", h)
	}
	hold := r.store.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Fixed(time.Hour)})
	sent := time.Now()
	done := make(chan error, 1)
	go func() { _, err := r.append("during"); done <- err }()
	deadline := time.Now().Add(30 * time.Second)
	h := r.w.StoreHealth()
	for ; h.WaitingSince.IsZero(); h = r.w.StoreHealth() {
		if time.Now().After(deadline) {
			t.Fatalf("no request in flight after 30s: %+v", h)
		}
		time.Sleep(time.Millisecond)
	}
	if h.WaitingSince.Before(sent) || h.Retrying() || h.LastError != nil {
		t.Fatalf("health while the store holds a request: %+v", h)
	}
	// The held request stays out until the writer closes: a rule removed
	// later does not shorten a delay already drawn.
	r.store.Remove(hold)
	select {
	case err := <-done:
		t.Fatalf("append returned while its request was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.w.Close(ctx) // gives the held sync up
	<-done
	if h := r.w.StoreHealth(); !h.WaitingSince.IsZero() {
		t.Fatalf("closed writer still reports a request in flight: %+v", h)
	}
}
