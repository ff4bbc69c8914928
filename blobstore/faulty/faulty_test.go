package faulty_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func newFaulty(t *testing.T) (*faulty.Container, *blobstore.Container) {
	t.Helper()
	m := mem.New()
	return faulty.New(m, 1), m
}

func wantInjected(t *testing.T, err, class error, op string) {
	t.Helper()
	if !errors.Is(err, class) || !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("error %v, want an injected %v", err, class)
	}
	var oe *blobstore.OpError
	if !errors.As(err, &oe) || oe.Op.String() != op || !strings.HasPrefix(oe.Store, "faulty(") {
		t.Fatalf("error %v is not an OpError for %s on the faulty store", err, op)
	}
}

func TestUnavailableFailsBeforeEffect(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	id := f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpPut), Fault: faulty.Unavailable})
	_, err := f.Put(ctx, "k", []byte("v"))
	wantInjected(t, err, blobstore.ErrUnavailable, "Put")
	if !blobstore.IsRetryable(err) || blobstore.IsAmbiguous(err) {
		t.Errorf("unavailable must be retryable and not ambiguous: %v", err)
	}
	if _, err := m.Get(ctx, "k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("the refused Put reached the store: Get = %v", err)
	}
	if _, err := f.CreateIfAbsent(ctx, "k", []byte("v")); err != nil {
		t.Errorf("a rule for Put disturbed CreateIfAbsent: %v", err)
	}
	if n := f.Injected(blobstore.OpPut, faulty.Unavailable); n != 1 {
		t.Errorf("Injected(Put, Unavailable) = %d, want 1", n)
	}
	if f.Fired(id) != 1 || f.Requests(blobstore.OpPut) != 1 || f.Requests(blobstore.OpCreateIfAbsent) != 1 {
		t.Errorf("Fired = %d, Requests(Put) = %d, Requests(CreateIfAbsent) = %d; want 1, 1, 1", f.Fired(id), f.Requests(blobstore.OpPut), f.Requests(blobstore.OpCreateIfAbsent))
	}
}

func TestLostResponseAppliesThenReportsAmbiguous(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	tok, err := f.Put(ctx, "fence/a", []byte("seq 1"))
	if err != nil {
		t.Fatal(err)
	}
	otherTok, err := f.Put(ctx, "other/a", []byte("seq 1"))
	if err != nil {
		t.Fatal(err)
	}
	// "Lose the response of the next CAS on keys under fence/."
	id := f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Prefix: "fence/", Fault: faulty.LostResponse, Times: 1})

	if _, err := f.CompareAndSwap(ctx, "other/a", otherTok, []byte("seq 2")); err != nil {
		t.Fatalf("CAS outside the rule's prefix: %v", err)
	}
	_, err = f.CompareAndSwap(ctx, "fence/a", tok, []byte("seq 2"))
	wantInjected(t, err, blobstore.ErrAmbiguous, "CompareAndSwap")
	obj, err := m.Get(ctx, "fence/a")
	if err != nil || string(obj.Body) != "seq 2" {
		t.Fatalf("after a lost response the store holds %q (%v), want the write applied", obj.Body, err)
	}
	// The budget is spent: the next CAS goes through untouched.
	if _, err := f.CompareAndSwap(ctx, "fence/a", obj.Token, []byte("seq 3")); err != nil {
		t.Fatalf("second CAS: %v", err)
	}
	if f.Fired(id) != 1 || f.Injected(blobstore.OpCompareAndSwap, faulty.LostResponse) != 1 {
		t.Errorf("Fired = %d, Injected = %d; want 1 and 1", f.Fired(id), f.Injected(blobstore.OpCompareAndSwap, faulty.LostResponse))
	}
}

func TestLostRequestIsAmbiguousButNotApplied(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Fault: faulty.LostRequest})
	_, err := f.CreateIfAbsent(ctx, "md/1", []byte("v"))
	wantInjected(t, err, blobstore.ErrAmbiguous, "CreateIfAbsent")
	if _, err := m.Stat(ctx, "md/1"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("a lost request reached the store: Stat = %v", err)
	}
}

func TestConflictIsRetryableAndNotApplied(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	tok, err := f.Put(ctx, "k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	f.MustAdd(faulty.Rule{Ops: faulty.Conditional, Fault: faulty.Conflict, Times: 2})
	for range 2 {
		_, err = f.CompareAndSwap(ctx, "k", tok, []byte("two"))
		wantInjected(t, err, blobstore.ErrConflict, "CompareAndSwap")
		if !blobstore.IsRetryable(err) || blobstore.IsDefinite(err) {
			t.Errorf("a 409 conflict must be retryable and not definite: %v", err)
		}
	}
	if obj, _ := m.Get(ctx, "k"); string(obj.Body) != "one" {
		t.Errorf("a conflicting CAS changed the store to %q", obj.Body)
	}
	if _, err := f.CompareAndSwap(ctx, "k", tok, []byte("two")); err != nil {
		t.Errorf("retry after the conflicts: %v", err)
	}
}

func TestDropDeleteIsOnlySeenByRelisting(t *testing.T) {
	ctx := t.Context()
	f, _ := newFaulty(t)
	for i := range 6 {
		if _, err := f.Put(ctx, fmt.Sprintf("fence/%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Every other delete under fence/ is silently skipped, like a batch
	// delete that reports success for keys it never removed.
	f.MustAdd(faulty.Rule{Ops: faulty.Deletes, Prefix: "fence/", Fault: faulty.DropDelete, Probability: 0.5})
	for i := range 6 {
		if err := f.Delete(ctx, fmt.Sprintf("fence/%d", i)); err != nil {
			t.Fatalf("Delete reported %v; a dropped delete must look successful", err)
		}
	}
	left, err := blobstore.ListAll(ctx, f.Container, "fence/")
	if err != nil {
		t.Fatal(err)
	}
	dropped := f.Injected(blobstore.OpDelete, faulty.DropDelete)
	if dropped == 0 || int64(len(left)) != dropped {
		t.Errorf("%d deletes dropped, re-LIST finds %d survivors; want them equal and non-zero (seed 1)", dropped, len(left))
	}

	for _, bad := range []faulty.Rule{
		{Fault: faulty.DropDelete},
		{Ops: faulty.Ops(blobstore.OpPut, blobstore.OpDelete), Fault: faulty.DropDelete},
		{Fault: faulty.PreconditionIgnored},
		{Probability: 1.5},
		{Latency: faulty.Fixed(-time.Second)},
	} {
		if _, err := f.Add(bad); err == nil {
			t.Errorf("Add(%+v) accepted a rule it cannot honour", bad)
		}
	}
}

func TestIgnorePreconditionsIsRefusedByTheProbe(t *testing.T) {
	ctx := t.Context()
	f, _ := newFaulty(t)
	f.SetIgnorePreconditions(true)

	tok, err := f.CreateIfAbsent(ctx, "k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.CreateIfAbsent(ctx, "k", []byte("two")); err != nil {
		t.Errorf("ignoring store refused a second create: %v", err)
	}
	if _, err := f.CompareAndSwap(ctx, "k", tok, []byte("three")); err != nil {
		t.Errorf("ignoring store refused a stale CAS: %v", err)
	}
	if f.InjectedTotal(faulty.PreconditionIgnored) != 3 {
		t.Errorf("InjectedTotal(PreconditionIgnored) = %d, want 3", f.InjectedTotal(faulty.PreconditionIgnored))
	}

	err = blobstore.ProbePreconditions(ctx, f.Container)
	if !errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
		t.Fatalf("ProbePreconditions = %v, want ErrPreconditionsNotEnforced", err)
	}
	if !strings.Contains(err.Error(), "faulty(mem://") {
		t.Errorf("refusal %q does not name the store", err)
	}

	f.SetIgnorePreconditions(false)
	if err := blobstore.ProbePreconditions(ctx, f.Container); err != nil {
		t.Errorf("ProbePreconditions after restoring enforcement: %v", err)
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	f, m := newFaulty(t)
	f.MustAdd(faulty.Rule{Ops: faulty.Writes, Latency: faulty.Fixed(time.Hour)})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := f.Put(ctx, "k", []byte("v"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put delayed past its deadline returned %v, want DeadlineExceeded", err)
	}
	if _, err := m.Stat(t.Context(), "k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("a request whose context ended during the delay reached the store")
	}
	if f.Delayed(blobstore.OpPut) != 1 || f.Delayed(blobstore.OpGet) != 0 {
		t.Errorf("Delayed(Put) = %d, Delayed(Get) = %d; want 1 and 0", f.Delayed(blobstore.OpPut), f.Delayed(blobstore.OpGet))
	}
	if _, err := f.Get(t.Context(), "k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Get (not delayed): %v", err)
	}
}

func TestInvalidKeysAndDeadContextsAreNotFaulted(t *testing.T) {
	f, _ := newFaulty(t)
	f.MustAdd(faulty.Rule{Fault: faulty.Unavailable})
	if _, err := f.Get(t.Context(), "a/../b"); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Errorf("Get of an invalid key = %v, want ErrInvalidKey before any fault", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.Put(ctx, "k", nil); !errors.Is(err, context.Canceled) || errors.Is(err, faulty.ErrInjected) {
		t.Errorf("Put with a cancelled context = %v, want context.Canceled, not a fault", err)
	}
}

// pattern returns which of n Gets failed under a 50% rule.
func pattern(seed uint64, n int) string {
	f := faulty.New(mem.New(), seed)
	f.MustAdd(faulty.Rule{Ops: faulty.Reads, Fault: faulty.Unavailable, Probability: 0.5})
	var b strings.Builder
	for range n {
		if _, err := f.Get(context.Background(), "k"); errors.Is(err, faulty.ErrInjected) {
			b.WriteByte('x')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

func TestSameSeedSameFaults(t *testing.T) {
	a, b, c := pattern(7, 200), pattern(7, 200), pattern(8, 200)
	if a != b {
		t.Errorf("seed 7 gave two fault patterns:\n%s\n%s", a, b)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave the same 200-request pattern")
	}
	if n := strings.Count(a, "x"); n < 60 || n > 140 {
		t.Errorf("a 50%% rule fired %d times in 200 requests", n)
	}
}

func TestHooksHoldAndFailRequests(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	tok, err := f.Put(ctx, "fence/k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan faulty.Request)
	release := make(chan struct{})
	var mu sync.Mutex
	var after []string
	f.SetHooks(faulty.Hooks{
		Before: func(ctx context.Context, r faulty.Request) error {
			switch {
			case r.Op == blobstore.OpCompareAndSwap:
				held <- r
				<-release
			case r.Key == "refused":
				return errors.New("refused by the checker")
			}
			return nil
		},
		After: func(_ context.Context, r faulty.Request, err error) {
			mu.Lock()
			defer mu.Unlock()
			after = append(after, fmt.Sprintf("%v %s %v", r.Op, r.Key, err != nil))
		},
	})
	casErr := make(chan error, 1)
	go func() {
		_, err := f.CompareAndSwap(ctx, "fence/k", tok, []byte("two"))
		casErr <- err
	}()
	r := <-held
	if r.Op != blobstore.OpCompareAndSwap || r.Key != "fence/k" || r.Seq == 0 {
		t.Errorf("held request %+v", r)
	}
	// While the CAS is held, another writer moves the key on.
	if _, err := m.Put(ctx, "fence/k", []byte("other")); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-casErr; !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Errorf("held CAS released after a concurrent write: %v, want ErrPreconditionFailed", err)
	}
	if _, err := f.Put(ctx, "refused", []byte("x")); err == nil || !strings.Contains(err.Error(), "refused by the checker") {
		t.Errorf("Put refused by the Before hook: %v", err)
	}
	if _, err := m.Stat(ctx, "refused"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("a request refused by the hook reached the store")
	}
	f.SetHooks(faulty.Hooks{})
	if _, err := f.Get(ctx, "fence/k"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"CompareAndSwap fence/k true", "Put refused true"}
	if fmt.Sprint(after) != fmt.Sprint(want) {
		t.Errorf("After saw %q, want %q", after, want)
	}
}

// TestRulesChangeWhileRequestsRun is for the race detector: rules, hooks and
// the precondition switch change under concurrent traffic.
func TestRulesChangeWhileRequestsRun(t *testing.T) {
	ctx := t.Context()
	f, _ := newFaulty(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = f.Put(ctx, key, []byte{byte(i)})
				_, _ = f.Get(ctx, key)
				_, _ = f.List(ctx, "", "", 10)
			}
		})
	}
	// Change rules only once traffic flows, so the two overlap.
	for f.Requests(blobstore.OpPut) == 0 {
		runtime.Gosched()
	}
	for i := range 200 {
		id := f.MustAdd(faulty.Rule{Fault: faulty.Fault(1 + i%4), Probability: 0.3, Latency: faulty.Uniform(0, time.Microsecond)})
		f.SetIgnorePreconditions(i%2 == 0)
		f.SetHooks(faulty.Hooks{After: func(context.Context, faulty.Request, error) {}})
		_ = f.Fired(id)
		if i%3 == 0 {
			f.Remove(id)
		}
		if i%50 == 0 {
			f.Clear()
		}
	}
	close(stop)
	wg.Wait()
}

func TestLandLaterHoldsTheRequestUntilLand(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	tok1, err := f.Put(ctx, "fence/k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap, blobstore.OpCreateIfAbsent), Fault: faulty.LandLater, Times: 2})

	body := []byte("two")
	_, err = f.CompareAndSwap(ctx, "fence/k", tok1, body)
	wantInjected(t, err, blobstore.ErrAmbiguous, "CompareAndSwap")
	copy(body, "XXX") // the caller reuses its buffer; the held request must not see it
	created := []byte("created late")
	if _, err := f.CreateIfAbsent(ctx, "md/1", created); !errors.Is(err, blobstore.ErrAmbiguous) {
		t.Fatalf("held create: %v", err)
	}
	if obj, _ := m.Get(ctx, "fence/k"); string(obj.Body) != "one" || f.Pending() != 2 {
		t.Fatalf("before Land the store holds %q with %d held requests, want \"one\" and 2", obj.Body, f.Pending())
	}

	// The held CAS was overtaken: a retry on the same token lands first.
	if _, err := f.CompareAndSwap(ctx, "fence/k", tok1, []byte("three")); err != nil {
		t.Fatalf("overtaking CAS: %v", err)
	}
	landed := f.Land(ctx)
	if len(landed) != 2 || f.Pending() != 0 {
		t.Fatalf("Land returned %d landings, %d still held", len(landed), f.Pending())
	}
	if landed[0].Request.Op != blobstore.OpCompareAndSwap || !errors.Is(landed[0].Err, blobstore.ErrPreconditionFailed) {
		t.Errorf("late CAS landing: %+v, want a refused CompareAndSwap", landed[0])
	}
	if landed[1].Request.Op != blobstore.OpCreateIfAbsent || landed[1].Err != nil || landed[1].Request.Seq <= landed[0].Request.Seq {
		t.Errorf("late create landing: %+v, want success after the CAS", landed[1])
	}
	if obj, _ := m.Get(ctx, "fence/k"); string(obj.Body) != "three" {
		t.Errorf("the stale late CAS overwrote the store: %q", obj.Body)
	}
	if obj, err := m.Get(ctx, "md/1"); err != nil || string(obj.Body) != "created late" {
		t.Errorf("late create: %q, %v", obj.Body, err)
	}
	if f.Injected(blobstore.OpCompareAndSwap, faulty.LandLater) != 1 || f.Injected(blobstore.OpCreateIfAbsent, faulty.LandLater) != 1 {
		t.Errorf("LandLater counts: CAS %d, create %d", f.Injected(blobstore.OpCompareAndSwap, faulty.LandLater), f.Injected(blobstore.OpCreateIfAbsent, faulty.LandLater))
	}
}

func TestLandLaterAppliesAHeldWriteThatStillFits(t *testing.T) {
	ctx := t.Context()
	f, m := newFaulty(t)
	tok, err := f.Put(ctx, "k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	f.MustAdd(faulty.Rule{Fault: faulty.LandLater, Times: 1})
	if _, err := f.CompareAndSwap(ctx, "k", tok, []byte("two")); !errors.Is(err, blobstore.ErrAmbiguous) {
		t.Fatalf("held CAS: %v", err)
	}
	if got := f.Land(ctx); len(got) != 1 || got[0].Err != nil {
		t.Fatalf("landing: %+v", got)
	}
	if obj, _ := m.Get(ctx, "k"); string(obj.Body) != "two" {
		t.Errorf("after landing the store holds %q, want the held write", obj.Body)
	}
}

// Streams go through the rules like any read, and a pin is a version the
// layer's own tokens name.
func TestStreamsTakeFaultsAndRestartingTokens(t *testing.T) {
	ctx := t.Context()
	f, _ := newFaulty(t)
	tok, err := f.Put(ctx, "k", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	f.MustAdd(faulty.Rule{Ops: faulty.Reads, Fault: faulty.LostResponse, Times: 1})
	_, _, err = f.NewRangeReader(ctx, "k", 0, -1, tok)
	wantInjected(t, err, blobstore.ErrAmbiguous, "GetRange")

	f.SetRestartingTokens(true)
	t1, err := f.Put(ctx, "r", []byte("one"))
	if err != nil || t1 != "1" {
		t.Fatalf("restarting token %q (%v), want 1", t1, err)
	}
	rc, attrs, err := f.NewRangeReader(ctx, "r", 1, -1, t1)
	if err != nil || attrs.Token != "1" {
		t.Fatalf("range pinned to the layer's token: %+v, %v", attrs, err)
	}
	if b, _ := io.ReadAll(rc); string(b) != "ne" {
		t.Errorf("range read %q", b)
	}
	_ = rc.Close()
	if _, err := f.Put(ctx, "r", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.NewRangeReader(ctx, "r", 0, -1, t1); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("range pinned to a replaced version: %v", err)
	}
}
