package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestAdvanceSettlesLostResponsesWithoutFencing(t *testing.T) {
	ctx := context.Background()
	for name, f := range map[string]fault{
		"lost response": loseResp, "lost request": loseReq, "5xx before effect": failBefore, "409 conflict": conflict,
	} {
		t.Run(name, func(t *testing.T) {
			fs := newFaultStore(mem.New())
			c := mustClaim(t, fs, 1, "a")
			fs.setHook(nth("CompareAndSwap", KeyPrefix, 1, f))
			st, err := c.Advance(ctx, 1)
			if err != nil {
				t.Fatalf("advance: %v", err)
			}
			if st.Record.Gen != 1 || st.Record.Seq != 1 {
				t.Fatalf("state %+v, want gen 1 seq 1", st.Record)
			}
			if _, err := c.Advance(ctx, 2); err != nil {
				t.Fatalf("next advance: %v", err)
			}
			if r, _ := readRecord(t, fs, 1); r.Gen != 2 || r.Seq != 2 {
				t.Fatalf("stored %+v, want gen 2 seq 2", r)
			}
		})
	}
}

func TestAdvanceAdoptsOwnWriteReportedAsPreconditionFailed(t *testing.T) {
	// An SDK retryer resends a CAS whose response was lost; the resend
	// fails on the token our own first send changed.
	ctx := context.Background()
	fs := newFaultStore(mem.New())
	c := mustClaim(t, fs, 1, "a")
	calls := 0
	fs.setHook(func(op, key string) fault {
		if op != "CompareAndSwap" {
			return pass
		}
		calls++
		if calls == 1 {
			return holdReq
		}
		if calls == 2 {
			fs.release() // the first send lands just before the second
		}
		return pass
	})
	st, err := c.Advance(ctx, 1)
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
	if st.Record.Seq != 1 || st.Record.Gen != 1 {
		t.Fatalf("state %+v", st.Record)
	}
}

func TestDelayedWriteFromEarlierCallIsAdoptedNotFenced(t *testing.T) {
	ctx := context.Background()
	fs := newFaultStore(mem.New())
	c := mustClaim(t, fs, 1, "a")
	// Advance(1) never gets an answer within its context; its request is
	// still travelling.
	fs.setHook(func(op, key string) fault {
		if op == "CompareAndSwap" {
			return holdReq
		}
		if op == "Get" {
			return loseReq
		}
		return pass
	})
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Advance(short, 1); err == nil || errors.Is(err, ErrFenced) {
		t.Fatalf("advance under a cancelled context: %v", err)
	}
	// Advance(2): the held write lands first, then ours runs into it.
	first := true
	fs.setHook(func(op, key string) fault {
		if op == "CompareAndSwap" && first {
			first = false
			fs.release()
		}
		return pass
	})
	st, err := c.Advance(ctx, 2)
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
	if st.Record.Gen != 2 {
		t.Fatalf("state %+v, want gen 2", st.Record)
	}
	if r, _ := readRecord(t, fs, 1); r != st.Record {
		t.Fatalf("stored %+v, chain holds %+v", r, st.Record)
	}
}

func TestAdvanceGivesUpRetryablyWhenStoreStaysDown(t *testing.T) {
	ctx := context.Background()
	fs := newFaultStore(mem.New())
	c := mustClaim(t, fs, 1, "a")
	fs.setHook(func(op, key string) fault { return loseReq })
	_, err := c.Advance(ctx, 1)
	if !blobstore.IsRetryable(err) || errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want retryable and not fenced", err)
	}
	fs.setHook(nil)
	if _, err := c.Advance(ctx, 1); err != nil {
		t.Fatalf("advance once the store is back: %v", err)
	}
}

func TestEveryFenceWriteTakesAHigherSeq(t *testing.T) {
	ctx := context.Background()
	fs := newFaultStore(mem.New())
	src := mustClaim(t, fs, 1, "src")
	steps := []func() error{
		func() error { _, err := src.Advance(ctx, 1); return err },
		func() error { _, err := src.Advance(ctx, 1); return err }, // same gen again
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
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	bodies := fs.written(Key(1))
	seen := map[string]bool{}
	last := int64(-1)
	for _, b := range bodies {
		if seen[string(b)] {
			t.Fatalf("body %q written twice (ABA)", b)
		}
		seen[string(b)] = true
		r, err := DecodeRecord(shard, Key(1), b)
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq <= last {
			t.Fatalf("seq %d after %d", r.Seq, last)
		}
		last = r.Seq
	}
	if len(bodies) != len(steps)+1 {
		t.Fatalf("%d writes, want %d", len(bodies), len(steps)+1)
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
	fs := newFaultStore(mem.New())
	src := mustClaim(t, fs, 4, "src")
	fs.setHook(func(op, key string) fault {
		if op == "CompareAndSwap" {
			// The transfer lands, its response is lost, and the target
			// (told out of band) continues before the source re-reads.
			if _, err := fs.Container.CompareAndSwap(ctx, key, src.state.Token, mustEncode(t, Record{Shard: shard, Term: 4, Allocation: "dst", Seq: 1})); err != nil {
				t.Errorf("transfer: %v", err)
			}
			o, _ := fs.Container.Get(ctx, key)
			if _, err := fs.Container.CompareAndSwap(ctx, key, o.Token, mustEncode(t, Record{Shard: shard, Term: 4, Allocation: "dst", Seq: 2, Gen: 1})); err != nil {
				t.Errorf("target write: %v", err)
			}
			return loseReq
		}
		return pass
	})
	st, err := src.TransferTo(ctx, "dst", "")
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if st.Record.Allocation != "dst" {
		t.Fatalf("state %+v", st.Record)
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
	if err := store.Delete(ctx, Key(2)); err != nil {
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

func TestFakeClock(t *testing.T) {
	clk := NewFakeClock()
	ch := clk.After(time.Second)
	if clk.Waiters() != 1 {
		t.Fatalf("waiters %d", clk.Waiters())
	}
	clk.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	clk.Advance(time.Millisecond)
	<-ch
	if clk.Now() != int64(time.Second) {
		t.Fatalf("now %d", clk.Now())
	}
	auto := NewAutoClock()
	if err := Sleep(context.Background(), auto, time.Minute); err != nil || auto.Now() != int64(time.Minute) {
		t.Fatalf("auto clock: %v, now %d", err, auto.Now())
	}
	sys := SystemClock()
	a := sys.Now()
	<-sys.After(time.Millisecond)
	if sys.Now()-a < int64(time.Millisecond) {
		t.Fatal("system clock did not move")
	}
}
