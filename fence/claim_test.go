package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
)

const shard = "idx/0"

func opts(extra ...Option) []Option {
	return append([]Option{WithClock(NewAutoClock()), WithBackoff(Backoff{Initial: time.Millisecond, Max: 8 * time.Millisecond, Attempts: 6})}, extra...)
}

func mustClaim(t *testing.T, store *blobstore.Container, term int64, alloc string) *Chain {
	t.Helper()
	c, err := Claim(context.Background(), store, shard, term, alloc, opts()...)
	if err != nil {
		t.Fatalf("claim term %d by %s: %v", term, alloc, err)
	}
	return c
}

func readRecord(t *testing.T, store *blobstore.Container, term int64) (Record, bool) {
	t.Helper()
	o, err := store.Get(context.Background(), layout.FenceKey(term))
	if errors.Is(err, blobstore.ErrNotFound) {
		return Record{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRecord(shard, layout.FenceKey(term), o.Body)
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

func wantFenced(t *testing.T, err error, successor int64) {
	t.Helper()
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want ErrFenced", err)
	}
	got, _ := SuccessorTerm(err)
	if got != successor {
		t.Fatalf("successor term %d, want %d (error: %v)", got, successor, err)
	}
}

func TestClaimCreatesKeyAndDeletesLowerTerms(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	c1 := mustClaim(t, store, 1, "a1")
	if _, err := c1.Advance(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c3 := mustClaim(t, store, 3, "a3")
	if !c3.Created() {
		t.Fatal("a fresh claim must report that it created its key")
	}
	if got := c3.Predecessors(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("predecessors %v, want [1]", got)
	}
	if _, ok := readRecord(t, store, 1); ok {
		t.Fatal("term 1 key survived the claim of term 3")
	}
	r, ok := readRecord(t, store, 3)
	if !ok || r != (Record{Shard: shard, Term: 3, Allocation: "a3", Nonce: r.Nonce}) || r.Nonce == "" {
		t.Fatalf("term 3 key holds %+v, %v", r, ok)
	}
}

func TestHigherTermWinsAgainstActiveIncumbent(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	old := mustClaim(t, store, 1, "old")
	for g := int64(1); g <= 3; g++ {
		if _, err := old.Advance(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	succ := mustClaim(t, store, 2, "new")
	_, err := old.Advance(ctx, 4)
	wantFenced(t, err, 2)
	// Fenced is terminal: later calls fail the same way without a request.
	_, err = old.Advance(ctx, 5)
	wantFenced(t, err, 2)
	// A fenced instance cannot claim another term, not even a higher one.
	_, err = old.Instance().Claim(ctx, 3)
	wantFenced(t, err, 2)
	if _, ok := readRecord(t, store, 3); ok {
		t.Fatal("a fenced instance wrote a fence key")
	}
	if _, err := succ.Advance(ctx, 4); err != nil {
		t.Fatalf("successor: %v", err)
	}
}

func TestStaleGrantCannotDisplaceSuccessor(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	succ := mustClaim(t, store, 5, "new")
	_, err := Claim(ctx, store, shard, 4, "stale", opts()...)
	wantFenced(t, err, 5)
	if _, ok := readRecord(t, store, 4); ok {
		t.Fatal("the stale grant created its key")
	}
	if _, err := succ.Advance(ctx, 1); err != nil {
		t.Fatalf("successor disturbed by a stale grant: %v", err)
	}
}

func TestHigherTermAppearingDuringClaimWithdrawsOurKey(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	var once sync.Once
	// While term 2 verifies its sweep, term 3 claims.
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpList {
			if _, ok := readRecordRaw(fs.Inner(), 2); ok {
				once.Do(func() {
					if _, err := Claim(ctx, fs.Inner(), shard, 3, "third", opts()...); err != nil {
						t.Errorf("claim of term 3: %v", err)
					}
				})
			}
		}
		return nil
	}})
	_, err := Claim(ctx, fs.Container, shard, 2, "second", opts()...)
	wantFenced(t, err, 3)
	if _, ok := readRecord(t, fs.Inner(), 2); ok {
		t.Fatal("term 2 did not withdraw the key it created")
	}
	if _, ok := readRecord(t, fs.Inner(), 3); !ok {
		t.Fatal("term 3's key is gone")
	}
}

func readRecordRaw(c *blobstore.Container, term int64) ([]byte, bool) {
	o, err := c.Get(context.Background(), layout.FenceKey(term))
	return o.Body, err == nil
}

func TestConcurrentClaimsOfOneTermAdmitOneOwner(t *testing.T) {
	for round := range 30 {
		store := mem.New()
		var wg sync.WaitGroup
		results := make([]error, 4)
		for i := range results {
			wg.Go(func() {
				_, results[i] = Claim(context.Background(), store, shard, 7, fmt.Sprintf("a%d", i), opts()...)
			})
		}
		wg.Wait()
		owners := 0
		for _, err := range results {
			switch {
			case err == nil:
				owners++
			case errors.Is(err, ErrFenced):
			default:
				t.Fatalf("round %d: unexpected error %v", round, err)
			}
		}
		if owners != 1 {
			t.Fatalf("round %d: %d owners of term 7, want exactly 1 (%v)", round, owners, results)
		}
	}
}

func TestRestartOfSameAllocationAdoptsItsChain(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	c := mustClaim(t, store, 2, "a")
	if _, err := c.Advance(ctx, 10); err != nil {
		t.Fatal(err)
	}
	again := mustClaim(t, store, 2, "a")
	if again.Created() {
		t.Fatal("a restart must not report that it created the key")
	}
	if st := again.State(); st.Record.Seq != 1 || st.Record.Gen != 10 {
		t.Fatalf("restart adopted %+v, want seq 1 gen 10", st.Record)
	}
	if _, err := again.Advance(ctx, 11); err != nil {
		t.Fatal(err)
	}
}

func TestSweepLeavingLowerKeyIsRetryable(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	mustClaim(t, fs.Container, 1, "old")
	fs.MustAdd(faulty.Rule{Ops: faulty.Deletes, Fault: faulty.DropDelete})
	_, err := Claim(ctx, fs.Container, shard, 2, "new", opts()...)
	if !errors.Is(err, ErrSweepIncomplete) || !blobstore.IsRetryable(err) || errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want a retryable ErrSweepIncomplete that is not fencing", err)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Shard != shard || fe.Key != layout.FenceKey(2) {
		t.Fatalf("error %v does not name the shard and key", err)
	}
	// Once deletes work again, the same allocation's claim goes through.
	fs.Clear()
	c, err := Claim(ctx, fs.Container, shard, 2, "new", opts()...)
	if err != nil {
		t.Fatalf("retried claim: %v", err)
	}
	if _, ok := readRecord(t, fs.Container, 1); ok {
		t.Fatal("term 1 key survived the retried claim")
	}
	if c.State().Record.Seq != 0 {
		t.Fatalf("retried claim state %+v", c.State())
	}
}

func TestClaimSettlesLostCreateAndRetriesStoreTrouble(t *testing.T) {
	ctx := context.Background()
	for name, f := range map[string]faulty.Fault{"lost response": faulty.LostResponse, "lost request": faulty.LostRequest, "5xx": faulty.Unavailable, "409": faulty.Conflict} {
		t.Run(name, func(t *testing.T) {
			fs := faulty.New(mem.New(), 1)
			id := fs.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Prefix: layout.FencePrefix, Fault: f, Times: 1})
			c, err := Claim(ctx, fs.Container, shard, 1, "a", opts()...)
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			if fs.Fired(id) != 1 {
				t.Fatal("the fault did not fire")
			}
			if st := c.State(); st.Record.Allocation != "a" || st.Token == "" {
				t.Fatalf("state %+v", st)
			}
			if _, err := c.Advance(ctx, 1); err != nil {
				t.Fatalf("advance after a settled create: %v", err)
			}
		})
	}
}

func TestClaimGivesUpWithRetryableErrorWhenStoreStaysDown(t *testing.T) {
	fs := faulty.New(mem.New(), 1)
	fs.MustAdd(faulty.Rule{Fault: faulty.Unavailable})
	_, err := Claim(context.Background(), fs.Container, shard, 1, "a", opts()...)
	if !blobstore.IsRetryable(err) || errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want retryable and not fenced", err)
	}
}

func TestClaimRejectsBadArguments(t *testing.T) {
	store := mem.New()
	if _, err := Claim(context.Background(), store, shard, 0, "a", opts()...); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("term 0: %v", err)
	}
	if _, err := Claim(context.Background(), store, "s|x", 1, "a", opts()...); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("separator in shard: %v", err)
	}
	in, err := NewInstance(store, shard, "a", opts()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Claim(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Claim(context.Background(), 3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("claiming below a held term: %v", err)
	}
}

func TestForeignFenceBodyIsNotAFencingVerdict(t *testing.T) {
	store := mem.New()
	body, _ := Record{Shard: "other", Term: 1, Allocation: "x"}.Encode()
	if _, err := store.Put(context.Background(), layout.FenceKey(1), body); err != nil {
		t.Fatal(err)
	}
	_, err := Claim(context.Background(), store, shard, 1, "a", opts()...)
	if !errors.Is(err, ErrForeignShard) || errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want ErrForeignShard and not fenced", err)
	}
}

func TestSweptAtUsesTheInjectedClock(t *testing.T) {
	clk := NewFakeClock()
	clk.Advance(5 * time.Second)
	c, err := Claim(context.Background(), mem.New(), shard, 1, "a", WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if c.SweptAt() != int64(5*time.Second) {
		t.Fatalf("SweptAt %d, want %d", c.SweptAt(), int64(5*time.Second))
	}
}

func TestHigherTermPrevailsOverRacingLowerClaim(t *testing.T) {
	ctx := context.Background()
	for round := range 30 {
		fs := faulty.New(mem.New(), uint64(round))
		fs.MustAdd(faulty.Rule{Latency: faulty.Uniform(0, 300*time.Microsecond)})
		mustClaim(t, fs.Container, 1, "one")
		var wg sync.WaitGroup
		var c2, c3 *Chain
		var err2, err3 error
		wg.Go(func() { c2, err2 = Claim(ctx, fs.Container, shard, 2, "two", opts()...) })
		wg.Go(func() { c3, err3 = Claim(ctx, fs.Container, shard, 3, "three", opts()...) })
		wg.Wait()
		if err3 != nil {
			t.Fatalf("round %d: term 3 lost to a lower term: %v", round, err3)
		}
		var fe *FencedError
		switch {
		case err2 == nil:
			if _, err := c2.Advance(ctx, 1); !errors.Is(err, ErrFenced) {
				t.Fatalf("round %d: term 2 still advances beside term 3: %v", round, err)
			}
		case errors.As(err2, &fe) && fe.Successor == 0 && fe.Reason == "fence key deleted during the claim":
			// Term 3 deletes lower keys beside its create (PROTOCOL.md,
			// section 4): term 2 can find its key gone before term 3's
			// exists, even on the LIST that looks for the successor.
			// Fenced all the same; the successor is unknown.
			t.Logf("round %d: term 2 fenced before term 3's key was listed: %v", round, err2)
		default:
			wantFenced(t, err2, 3)
		}
		if _, err := c3.Advance(ctx, 1); err != nil {
			t.Fatalf("round %d: term 3: %v", round, err)
		}
	}
}

func TestLeaseWaitCountsFromTheSweep(t *testing.T) {
	clk := NewFakeClock()
	store := mem.New()
	if _, err := Claim(context.Background(), store, shard, 1, "old", WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		c   *Chain
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Claim(context.Background(), store, shard, 2, "new", WithClock(clk))
		if err == nil {
			err = c.WaitOutLease(context.Background(), 12*time.Second)
		}
		done <- result{c, err}
	}()
	for clk.Waiters() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	clk.Advance(12*time.Second - 1)
	select {
	case r := <-done:
		t.Fatalf("the wait ended before the lease ran out: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(1)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if clk.Now()-r.c.SweptAt() < int64(12*time.Second) {
		t.Fatalf("returned %v after the sweep", time.Duration(clk.Now()-r.c.SweptAt()))
	}
}

// lateCreates holds back a claim's first create: the caller hears an
// ambiguous answer, and the test decides whether and when the request
// lands (land), as a request stuck in a network queue would.
type lateCreates struct {
	*blobstore.Container // the store through the hold-back
	inner                *blobstore.Container
	mu                   sync.Mutex
	bodies               [][]byte
	held                 []byte
	// landFirst: the held create reaches the store just before the next
	// create does.
	landFirst bool
}

func newLateCreates(inner *blobstore.Container, landFirst bool) *lateCreates {
	l := &lateCreates{inner: inner, landFirst: landFirst}
	l.Container = inner.With("", l.intercept)
	return l
}

func (l *lateCreates) intercept(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
	if call.Op != blobstore.OpCreateIfAbsent || call.Refusal != nil {
		return next(ctx, call)
	}
	l.mu.Lock()
	l.bodies = append(l.bodies, append([]byte(nil), call.Body...))
	n := len(l.bodies)
	l.mu.Unlock()
	switch {
	case n == 1:
		l.held = l.bodies[0]
		return blobstore.Result{}, blobstore.Ambiguous(errors.New("response lost"))
	case n == 2 && l.landFirst:
		held := call
		held.Body = l.held
		if _, err := next(ctx, held); err != nil {
			return blobstore.Result{}, err
		}
	}
	return next(ctx, call)
}

func TestEveryClaimAttemptSendsItsOwnBody(t *testing.T) {
	// On S3 the token is the body's MD5: if the held create could carry
	// the body of the create that succeeded, landing after a successor
	// deleted the key would give back the token the claim holds, and the
	// primary's next CAS would succeed on a key that should be gone.
	ctx := context.Background()
	store := newLateCreates(mem.New(), false)
	c, err := Claim(ctx, store.Container, shard, 1, "a", opts()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(store.bodies) != 2 {
		t.Fatalf("%d creates, want 2", len(store.bodies))
	}
	if string(store.bodies[0]) == string(store.bodies[1]) {
		t.Fatalf("both claim attempts sent %q: a late landing would repeat the held token on hash-token stores", store.bodies[0])
	}
	// The successor deletes the key; the held create lands. The chain
	// must see a key that is not its own.
	if err := store.Container.Delete(ctx, layout.FenceKey(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Container.CreateIfAbsent(ctx, layout.FenceKey(1), store.held); err != nil {
		t.Fatal(err)
	}
	if r, _ := readRecord(t, store.Container, 1); r == c.State().Record {
		t.Fatalf("the late create wrote the record the chain holds: %+v", r)
	}
	if _, err := c.Advance(ctx, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("advance over a resurrected key: %v, want fenced", err)
	}
}

func TestClaimAdoptsAnEarlierAttemptAsItsOwnCreate(t *testing.T) {
	// The first create is answered ambiguously and the read finds no key;
	// it lands just before the resend, which meets AlreadyExists. The key
	// holds the first attempt, not the last: still
	// this claim's create, so the claim must know it created the key (a
	// withdrawal deletes only keys the claim created).
	ctx := context.Background()
	store := newLateCreates(mem.New(), true)
	c, err := Claim(ctx, store.Container, shard, 1, "a", opts()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(store.bodies) != 2 {
		t.Fatalf("%d creates, want 2", len(store.bodies))
	}
	if !c.Created() {
		t.Fatal("a claim whose first create landed reports that it did not create the key")
	}
	first, err := DecodeRecord(shard, layout.FenceKey(1), store.bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	if c.State().Record != first {
		t.Fatalf("chain holds %+v, want the first attempt %+v", c.State().Record, first)
	}
	if _, err := c.Advance(ctx, 1); err != nil {
		t.Fatalf("advance: %v", err)
	}
}
