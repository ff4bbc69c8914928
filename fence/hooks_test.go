package fence

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/layout"
)

// recordOps returns a faulty store that logs every request as "Op key".
func recordOps(t *testing.T) (*faulty.Container, func() []string) {
	t.Helper()
	fs := faulty.New(mem.New(), 1)
	var mu sync.Mutex
	var log []string
	fs.SetHooks(faulty.Hooks{Before: func(_ context.Context, r faulty.Request) error {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, r.Op.String()+" "+r.Key)
		return nil
	}})
	return fs, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), log...)
	}
}

func TestClaimVerifiesItsOwnKeyFromTheListing(t *testing.T) {
	ctx := context.Background()
	fs, log := recordOps(t)
	mustClaim(t, fs.Container, 1, "old")
	first := len(log())
	if _, err := Claim(ctx, fs.Container, shard, 2, "new", opts()...); err != nil {
		t.Fatal(err)
	}
	sent := log()[first:]
	// The create and the delete go side by side, in either order.
	if len(sent) == 4 && sent[1] > sent[2] {
		sent[1], sent[2] = sent[2], sent[1]
	}
	got := strings.Join(sent, "\n")
	want := strings.Join([]string{"List " + layout.FencePrefix, "CreateIfAbsent " + layout.FenceKey(2), "Delete " + layout.FenceKey(1), "List " + layout.FencePrefix}, "\n")
	if got != want {
		t.Fatalf("a takeover claim sent\n%s\nwant\n%s", got, want)
	}
}

// TestClaimDeletesBesideItsCreate: the delete of the lower key and the
// create of our key wait for each other (sent one after the other, the
// claim would stall and fail), and the Swept hook starts only once both
// were answered.
func TestClaimDeletesBesideItsCreate(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	mustClaim(t, fs.Container, 1, "old")
	created, deleting := make(chan struct{}, 1), make(chan struct{}, 1)
	meet := func(signal, wait chan struct{}) error {
		signal <- struct{}{}
		select {
		case <-wait:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the claim's create and delete were not sent side by side")
		}
	}
	var mu sync.Mutex
	answered := map[string]bool{}
	fs.SetHooks(faulty.Hooks{
		Before: func(ctx context.Context, r faulty.Request) error {
			switch {
			case r.Op == blobstore.OpCreateIfAbsent && r.Key == layout.FenceKey(2):
				return meet(created, deleting)
			case r.Op == blobstore.OpDelete && r.Key == layout.FenceKey(1):
				return meet(deleting, created)
			}
			return nil
		},
		After: func(ctx context.Context, r faulty.Request, err error) {
			mu.Lock()
			defer mu.Unlock()
			answered[r.Op.String()+" "+r.Key] = err == nil
		},
	})
	var before []bool
	in, err := NewInstance(fs.Container, shard, "new", opts(WithBackoff(Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.ClaimWith(ctx, 2, Hooks{Swept: func(ctx context.Context, swept []int64) error {
		mu.Lock()
		defer mu.Unlock()
		before = append(before, answered["CreateIfAbsent "+layout.FenceKey(2)], answered["Delete "+layout.FenceKey(1)])
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 || !before[0] || !before[1] {
		t.Fatalf("Swept ran with create and delete answered: %v, want once with both", before)
	}
	if p := c.Predecessors(); len(p) != 1 || p[0] != 1 {
		t.Fatalf("predecessors %v, want [1]", p)
	}
}

// A claim whose create finds another allocation's key is fenced, and the
// delete sent beside it was still answered before the claim returned
// (the other allocation claimed the term: deleting the lower key is what
// it does too).
func TestClaimFencedAtItsCreateWaitsForItsDeletes(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	mustClaim(t, fs.Container, 1, "old")
	mustClaim(t, fs.Container, 2, "other")
	body, _ := Record{Shard: shard, Term: 1, Allocation: "old", Nonce: "again"}.Encode()
	if _, err := fs.Put(ctx, layout.FenceKey(1), body); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent, answered := 0, 0
	fs.SetHooks(faulty.Hooks{
		Before: func(ctx context.Context, r faulty.Request) error {
			if r.Op == blobstore.OpDelete {
				mu.Lock()
				sent++
				mu.Unlock()
			}
			return nil
		},
		After: func(ctx context.Context, r faulty.Request, err error) {
			if r.Op == blobstore.OpDelete {
				mu.Lock()
				answered++
				mu.Unlock()
			}
		},
	})
	_, err := Claim(ctx, fs.Container, shard, 2, "mine", opts()...)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("error %v, want fenced (term 2 is another allocation's)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent != 1 || answered != 1 {
		t.Fatalf("%d deletes sent, %d answered when the claim returned; want 1 and 1", sent, answered)
	}
}

func TestClaimFencedWhenItsKeyWasReplaced(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	// Another writer replaces our key between our create and the
	// verifying LIST: the listed token is not ours, the key is read, and
	// the claim is fenced.
	replaced := false
	c := store.With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		res, err := next(ctx, call)
		if call.Op == blobstore.OpCreateIfAbsent && call.Key == layout.FenceKey(3) && err == nil && !replaced {
			replaced = true
			body, _ := Record{Shard: shard, Term: 3, Allocation: "other", Nonce: "x"}.Encode()
			if _, perr := store.Put(ctx, layout.FenceKey(3), body); perr != nil {
				t.Error(perr)
			}
		}
		return res, err
	})
	_, err := Claim(ctx, c, shard, 3, "mine", opts()...)
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "other") {
		t.Fatalf("error %v, want fenced naming the new owner", err)
	}
}

func TestClaimHooksRunBesideItsLists(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	mustClaim(t, fs.Container, 1, "old")
	// Each fence LIST and the hook of its round wait for each other: run
	// before or after the LIST instead of beside it, the claim would
	// stall and fail.
	started := make(chan struct{}, 8)
	listed := make(chan struct{}, 8)
	meet := func(signal, wait chan struct{}) error {
		signal <- struct{}{}
		select {
		case <-wait:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the claim's LIST and its hook did not run side by side")
		}
	}
	fs.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpList && r.Key == layout.FencePrefix {
			return meet(listed, started)
		}
		return nil
	}})
	var sweptWith [][]int64
	h := Hooks{
		Before: func(ctx context.Context) error { return meet(started, listed) },
		Swept: func(ctx context.Context, swept []int64) error {
			sweptWith = append(sweptWith, swept)
			return meet(started, listed)
		},
	}
	in, err := NewInstance(fs.Container, shard, "new", opts(WithBackoff(Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.ClaimWith(ctx, 2, h)
	if err != nil {
		t.Fatal(err)
	}
	if len(sweptWith) != 1 || len(sweptWith[0]) != 1 || sweptWith[0][0] != 1 || len(c.Predecessors()) != 1 {
		t.Fatalf("Swept ran with %v, predecessors %v; want once with [1]", sweptWith, c.Predecessors())
	}
}

func TestClaimRunsSweptAgainWhenADeleteDidNotApply(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	mustClaim(t, fs.Container, 1, "old")
	fs.MustAdd(faulty.Rule{Ops: faulty.Deletes, Fault: faulty.DropDelete, Times: 1})
	var rounds int
	var keyGone []bool
	c, err := NewInstance(fs.Container, shard, "new", opts()...)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.ClaimWith(ctx, 2, Hooks{Swept: func(ctx context.Context, swept []int64) error {
		rounds++
		_, err := fs.Get(ctx, layout.FenceKey(1))
		keyGone = append(keyGone, errors.Is(err, blobstore.ErrNotFound))
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The first round's work was done while the old key survived; the
	// claim kept only the second, after the delete applied.
	if rounds != 2 || keyGone[0] || !keyGone[1] {
		t.Fatalf("Swept ran %d times, saw the old key gone: %v; want twice, [false true]", rounds, keyGone)
	}
	if chain.Term() != 2 {
		t.Fatalf("term %d", chain.Term())
	}
}

func TestClaimBeforeHookErrorWritesNothing(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	in, err := NewInstance(store, shard, "a", opts()...)
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused by the caller")
	_, err = in.ClaimWith(ctx, 1, Hooks{Before: func(context.Context) error { return refused }})
	if !errors.Is(err, refused) {
		t.Fatalf("error %v, want the hook's", err)
	}
	if _, ok := readRecord(t, store, 1); ok {
		t.Fatal("a claim whose Before hook failed created its key")
	}
	// The instance is not fenced by a refusal: the same claim goes on.
	if _, err := in.Claim(ctx, 1); err != nil {
		t.Fatalf("claim after a refused one: %v", err)
	}
}

func TestClaimSweptHookErrorEndsTheClaim(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	in, err := NewInstance(store, shard, "a", opts()...)
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("settings refused")
	if _, err := in.ClaimWith(ctx, 1, Hooks{Swept: func(context.Context, []int64) error { return refused }}); !errors.Is(err, refused) {
		t.Fatalf("error %v, want the hook's", err)
	}
	if errors.Is(in.Fenced(), ErrFenced) {
		t.Fatal("a hook's error fenced the instance")
	}
}
