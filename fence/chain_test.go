package fence

import (
	"context"
	"errors"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
)

func TestAdvanceSettlesLostResponsesWithoutFencing(t *testing.T) {
	ctx := context.Background()
	for name, f := range map[string]faulty.Fault{
		"lost response": faulty.LostResponse, "lost request": faulty.LostRequest,
		"5xx before effect": faulty.Unavailable, "409 conflict": faulty.Conflict,
	} {
		t.Run(name, func(t *testing.T) {
			fs := faulty.New(mem.New(), 1)
			c := mustClaim(t, fs.Container, 1, "a")
			id := fs.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: f, Times: 1})
			st, err := c.Advance(ctx, 1)
			if err != nil {
				t.Fatalf("advance: %v", err)
			}
			if fs.Fired(id) != 1 {
				t.Fatal("the fault did not fire")
			}
			if st.Record.Gen != 1 || st.Record.Seq != 1 {
				t.Fatalf("state %+v, want gen 1 seq 1", st.Record)
			}
			if _, err := c.Advance(ctx, 2); err != nil {
				t.Fatalf("next advance: %v", err)
			}
			if r, _ := readRecord(t, fs.Container, 1); r.Gen != 2 || r.Seq != 2 {
				t.Fatalf("stored %+v, want gen 2 seq 2", r)
			}
		})
	}
}

// landLater applies, straight to the store behind the injector, the CAS the
// chain sent earlier and was told nothing about: a request that timed out
// on the client and reached the store late.
func landLater(t *testing.T, fs *faulty.Container, expected blobstore.Token, r Record) {
	t.Helper()
	if _, err := fs.Inner().CompareAndSwap(context.Background(), layout.FenceKey(r.Term), expected, mustEncode(t, r)); err != nil {
		t.Errorf("late landing: %v", err)
	}
}

// withSeqGen is r as a later write of the chain: same nonce, new seq and gen.
func withSeqGen(r Record, seq, gen int64) Record {
	r.Seq, r.Gen = seq, gen
	return r
}

func TestAdvanceAdoptsOwnWriteReportedAsPreconditionFailed(t *testing.T) {
	// An SDK retryer resends a CAS whose first send timed out; the first
	// send lands just before the resend, which then fails on the token our
	// own write changed.
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	c := mustClaim(t, fs.Container, 1, "a")
	before := c.State()
	calls := 0
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op != blobstore.OpCompareAndSwap {
			return nil
		}
		calls++
		switch calls {
		case 1:
			return blobstore.Ambiguous(errors.New("timed out"))
		case 2:
			landLater(t, fs, before.Token, withSeqGen(before.Record, 1, 1))
		}
		return nil
	}})
	st, err := c.Advance(ctx, 1)
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
	if st.Record.Seq != 1 || st.Record.Gen != 1 || calls != 2 {
		t.Fatalf("state %+v after %d CAS requests", st.Record, calls)
	}
}

func TestDelayedWriteFromEarlierCallIsAdoptedNotFenced(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	c := mustClaim(t, fs.Container, 1, "a")
	before := c.State()
	// Advance(1) gives up when its context ends while the CAS is in
	// flight: the outcome is unknown and the request is still travelling.
	// (A context already done before the CAS left is refused before
	// sending: a definite failure, nothing in flight.)
	short, cancel := context.WithCancel(ctx)
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCompareAndSwap {
			cancel()
			return blobstore.Ambiguous(context.Canceled)
		}
		return nil
	}})
	if _, err := c.Advance(short, 1); err == nil || errors.Is(err, ErrFenced) {
		t.Fatalf("advance under a cancelled context: %v", err)
	}
	// Advance(2): the stray request for gen 1 lands first, then ours runs
	// into it. It is ours, so the chain adopts it and writes gen 2 on top.
	first := true
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpCompareAndSwap && first {
			first = false
			landLater(t, fs, before.Token, withSeqGen(before.Record, 1, 1))
		}
		return nil
	}})
	st, err := c.Advance(ctx, 2)
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
	if st.Record.Gen != 2 || st.Record.Seq != 2 {
		t.Fatalf("state %+v, want gen 2 at seq 2", st.Record)
	}
	if r, _ := readRecord(t, fs.Container, 1); r != st.Record {
		t.Fatalf("stored %+v, chain holds %+v", r, st.Record)
	}
}

func TestAdvanceGivesUpRetryablyWhenStoreStaysDown(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	c := mustClaim(t, fs.Container, 1, "a")
	fs.MustAdd(faulty.Rule{Fault: faulty.LostRequest})
	_, err := c.Advance(ctx, 1)
	if !blobstore.IsRetryable(err) || errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want retryable and not fenced", err)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Shard != shard || fe.Key != layout.FenceKey(1) {
		t.Fatalf("error %v does not name the shard and key", err)
	}
	fs.Clear()
	if _, err := c.Advance(ctx, 1); err != nil {
		t.Fatalf("advance once the store is back: %v", err)
	}
}

func TestEveryFenceWriteTakesAHigherSeq(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	src := mustClaim(t, store, 1, "src")
	steps := []func() error{
		func() error { _, err := src.Advance(ctx, 1); return err },
		func() error { _, err := src.Advance(ctx, 1); return err }, // the same gen again
		func() error { _, err := src.TransferTo(ctx, "dst", "n2"); return err },
		func() error {
			ok, err := src.Revert(ctx)
			if !ok && err == nil {
				err = errors.New("revert stood down")
			}
			return err
		},
		func() error { _, err := src.Advance(ctx, 2); return err },
		func() error { _, err := src.TransferTo(ctx, "dst", "n2"); return err },
	}
	seen := map[string]bool{}
	last := int64(-1)
	for i := -1; i < len(steps); i++ {
		if i >= 0 {
			if err := steps[i](); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		o, err := store.Get(ctx, layout.FenceKey(1))
		if err != nil {
			t.Fatal(err)
		}
		if seen[string(o.Body)] {
			t.Fatalf("step %d wrote body %q a second time (ABA)", i, o.Body)
		}
		seen[string(o.Body)] = true
		r, err := DecodeRecord(shard, layout.FenceKey(1), o.Body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq != last+1 {
			t.Fatalf("step %d: seq %d after %d", i, r.Seq, last)
		}
		last = r.Seq
	}
}

func TestRelocationHandoff(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	src := mustClaim(t, store, 4, "src")
	if _, err := src.Advance(ctx, 9); err != nil {
		t.Fatal(err)
	}
	y, err := src.TransferTo(ctx, "dst", "node-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Advance(ctx, 10); !errors.Is(err, ErrHandedOff) {
		t.Fatalf("source advance after transfer: %v", err)
	}
	dstIn, err := NewInstance(store, shard, "dst", opts(WithNode("node-2"))...)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := dstIn.Accept(ctx, 4, y.Token)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	if _, err := dst.Advance(ctx, 10); err != nil {
		t.Fatal(err)
	}
	// The source's abort comes too late: it stands down, not an error.
	resumed, err := src.Revert(ctx)
	if resumed || err != nil {
		t.Fatalf("revert after the target wrote: resumed=%v err=%v", resumed, err)
	}
	if _, err := src.Advance(ctx, 11); !errors.Is(err, ErrFenced) {
		t.Fatalf("source after standing down: %v", err)
	}
	if r, _ := readRecord(t, store, 4); r.Allocation != "dst" || r.Gen != 10 {
		t.Fatalf("key %+v, want owned by dst at gen 10", r)
	}
}

func TestRevertBeforeTargetWritesResumesSource(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	src := mustClaim(t, store, 4, "src")
	y, err := src.TransferTo(ctx, "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := src.Revert(ctx)
	if !resumed || err != nil {
		t.Fatalf("revert: resumed=%v err=%v", resumed, err)
	}
	if _, err := src.Advance(ctx, 1); err != nil {
		t.Fatalf("source after revert: %v", err)
	}
	dstIn, _ := NewInstance(store, shard, "dst", opts()...)
	if _, err := dstIn.Accept(ctx, 4, y.Token); !errors.Is(err, ErrFenced) {
		t.Fatalf("target accepting a reverted handoff: %v", err)
	}
}

func TestTransferWithLostResponseAfterTargetContinued(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	src := mustClaim(t, fs.Container, 4, "src")
	before := src.State()
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op != blobstore.OpCompareAndSwap {
			return nil
		}
		// The transfer lands, its response is lost, and the target (told
		// out of band) continues before the source re-reads.
		landLater(t, fs, before.Token, Record{Shard: shard, Term: 4, Allocation: "dst", Seq: 1})
		o, _ := fs.Inner().Get(ctx, q.Key)
		landLater(t, fs, o.Token, Record{Shard: shard, Term: 4, Allocation: "dst", Seq: 2, Gen: 1})
		return blobstore.Ambiguous(errors.New("response lost"))
	}})
	st, err := src.TransferTo(ctx, "dst", "")
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if st.Record.Allocation != "dst" {
		t.Fatalf("state %+v", st.Record)
	}
	if _, err := src.Advance(ctx, 2); !errors.Is(err, ErrHandedOff) {
		t.Fatalf("source advance after the handoff: %v", err)
	}
}

func mustEncode(t *testing.T, r Record) []byte {
	t.Helper()
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSuperseded(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	c := mustClaim(t, store, 2, "a")
	if s, err := c.Superseded(ctx); err != nil || s != 0 {
		t.Fatalf("Superseded = %d, %v", s, err)
	}
	// A missing own key is not supersession.
	if err := store.Delete(ctx, layout.FenceKey(2)); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Superseded(ctx); err != nil || s != 0 {
		t.Fatalf("missing own key: Superseded = %d, %v", s, err)
	}
	mustClaim(t, store, 6, "b")
	if s, err := c.Superseded(ctx); err != nil || s != 6 {
		t.Fatalf("after term 6: Superseded = %d, %v", s, err)
	}
}

func TestAdvanceRejectsGenerationRegression(t *testing.T) {
	c := mustClaim(t, mem.New(), 1, "a")
	if _, err := c.Advance(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Advance(context.Background(), 4); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("regression: %v", err)
	}
}

func TestChainSendsNoRetryOnceTheInstanceIsFenced(t *testing.T) {
	// The first CAS is refused (unavailable) and, while it backs off, the
	// writer's md path finds a poison and fences the instance. The retry
	// must not go out: a fenced instance writes nothing.
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	c := mustClaim(t, fs.Container, 1, "a")
	calls := 0
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op != blobstore.OpCompareAndSwap {
			return nil
		}
		calls++
		if calls == 1 {
			c.Fence(2, "poison found at generation 1")
			return blobstore.Unavailable(errors.New("503"))
		}
		return nil
	}})
	_, err := c.Advance(ctx, 1)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("advance: %v, want fenced", err)
	}
	if calls != 1 {
		t.Fatalf("%d CAS requests, want 1: the chain retried after the instance was fenced", calls)
	}
	if r, _ := readRecord(t, fs.Container, 1); r.Seq != 0 {
		t.Fatalf("fence key at seq %d: a fenced instance advanced it", r.Seq)
	}
}

// A context already done when Advance is called is refused before any
// request leaves: a definite failure, so the next Advance has nothing to
// settle and writes at once.
func TestAdvanceWithADoneContextLeavesNothingToSettle(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	c := mustClaim(t, fs.Container, 1, "a")
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Advance(done, 1); !errors.Is(err, context.Canceled) || errors.Is(err, ErrFenced) {
		t.Fatalf("advance under a done context: %v", err)
	}
	gets := fs.Requests(blobstore.OpGet)
	st, err := c.Advance(ctx, 1)
	if err != nil || st.Record.Seq != 1 || st.Record.Gen != 1 {
		t.Fatalf("advance: %+v, %v", st.Record, err)
	}
	if got := fs.Requests(blobstore.OpGet) - gets; got != 0 {
		t.Fatalf("%d reads before the CAS: a write that never left was settled", got)
	}
}

func TestTransferAtRecordsTheGenerationAndRefusesOneBelowTheKey(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	src := mustClaim(t, store, 1, "src")
	if _, err := src.Advance(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := src.TransferAt(ctx, "dst", "", 2); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("transfer at generation 2 below the key's 3: %v, want ErrInvalidArgument", err)
	}
	st, err := src.TransferAt(ctx, "dst", "", 5)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := readRecord(t, store, 1); rec.Gen != 5 || rec.Allocation != "dst" || st.Record.Gen != 5 {
		t.Fatalf("transferred record %+v (state %+v), want gen 5 owned by dst", rec, st.Record)
	}
}
