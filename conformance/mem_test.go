package conformance_test

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
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/conformance"
)

func TestMem(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) *blobstore.Container { return mem.New() })
}

func TestSubOfMem(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) *blobstore.Container {
		// A key beside the prefix proves Sub hides what is outside it.
		m := mem.New()
		if _, err := m.Put(t.Context(), "outside", []byte("x")); err != nil {
			t.Fatal(err)
		}
		c, err := blobstore.Sub(m, "p")
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

func TestFaultyWithJitter(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) *blobstore.Container {
		f := faulty.New(mem.New(), 42)
		f.MustAdd(faulty.Rule{Latency: faulty.Uniform(0, 200*time.Microsecond)})
		return f.Container
	})
}

func TestMetered(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) *blobstore.Container {
		m := metered.New(mem.New(), "conformance")
		t.Cleanup(func() {
			if m.Snapshot().Requests() == 0 {
				t.Errorf("the check made no request through the metered store")
			}
		})
		return m.Container
	})
}

func TestRunReportsEveryCheckAndCleansUp(t *testing.T) {
	ctx := t.Context()
	m := mem.New()
	if _, err := m.Put(ctx, "user/data", []byte("keep me")); err != nil {
		t.Fatal(err)
	}
	var progress []string
	rep := conformance.Run(ctx, m, conformance.Options{Progress: func(r conformance.CheckResult) { progress = append(progress, r.Name) }})
	for _, r := range rep.Results {
		if r.Status != conformance.Pass {
			t.Errorf("%s: %s %q", r.Name, r.Status, r.Details)
		}
	}
	checks := conformance.Checks()
	if len(rep.Results) != len(checks) || len(progress) != len(checks) || !rep.OK() || rep.Count(conformance.Pass) != len(checks) {
		t.Errorf("%d results, %d progress calls, OK=%v for %d checks", len(rep.Results), len(progress), rep.OK(), len(checks))
	}
	if !strings.HasPrefix(rep.Prefix, "shardfence-conformance/") || rep.Store != m.String() {
		t.Errorf("report names prefix %q and store %q", rep.Prefix, rep.Store)
	}
	items, err := blobstore.ListAll(ctx, m, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Key != "user/data" || rep.CleanupError != "" {
		t.Errorf("after Run the store holds %+v (cleanup error %q), want only the user's key", items, rep.CleanupError)
	}

	second := conformance.Run(ctx, m, conformance.Options{Only: []string{"crud"}})
	if second.Prefix == rep.Prefix {
		t.Errorf("two runs shared the scratch prefix %q", rep.Prefix)
	}
	if r, _ := second.Result("crud"); r.Status != conformance.Pass {
		t.Errorf("selected check: %+v", r)
	}
	if r, _ := second.Result("linearizable"); r.Status != conformance.Skip {
		t.Errorf("unselected check: %+v", r)
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	n := 0
	rep := conformance.Run(ctx, mem.New(), conformance.Options{Progress: func(conformance.CheckResult) {
		n++
		if n == 2 {
			cancel()
		}
	}})
	if r := rep.Results[len(rep.Results)-1]; r.Status != conformance.Skip || !strings.Contains(strings.Join(r.Details, ""), "canceled") {
		t.Errorf("last check after cancel: %+v", r)
	}
	if rep.Count(conformance.Pass) != 2 {
		t.Errorf("%d checks passed before the cancel, want 2", rep.Count(conformance.Pass))
	}
}

// broken is a layer with one deliberate defect, between the container's
// checks and the store; the suite must catch each.
type broken struct {
	emptyTokenIsWildcard bool // CAS with "" overwrites, as a driver that omits If-Match would
	neverMore            bool // List never says more keys remain
	ignoresContext       bool // requests run on a background context, whatever the caller's says
	mislabelled          bool // errors name the wrong operation and key
	staleReads           bool // Get serves a cached version until every third read

	mu    sync.Mutex
	cache map[string]blobstore.Object
	reads int
}

func (b *broken) store() *blobstore.Container { return mem.New().With("", b.intercept) }

func (b *broken) intercept(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
	switch {
	case b.emptyTokenIsWildcard && call.Op == blobstore.OpCompareAndSwap && call.Expected == "":
		call.Op, call.Refusal = blobstore.OpPut, nil
	case b.ignoresContext:
		if ctx.Err() != nil && errors.Is(call.Refusal, ctx.Err()) {
			call.Refusal = nil
		}
		ctx = context.Background()
	case b.staleReads && call.Op == blobstore.OpGet:
		b.mu.Lock()
		defer b.mu.Unlock()
		b.reads++
		if o, ok := b.cache[call.Key]; ok && b.reads%3 != 0 {
			return blobstore.Result{Object: o}, nil
		}
	}
	res, err := next(ctx, call)
	if b.staleReads && call.Op == blobstore.OpGet && err == nil {
		b.cache[call.Key] = res.Object
	}
	if b.neverMore {
		res.Page.More = false
	}
	if b.mislabelled && err != nil {
		err = &blobstore.OpError{Op: blobstore.OpGet, Store: "elsewhere", Key: "not/" + call.Key, Err: err}
	}
	return res, err
}

// TestSuiteHasTeeth runs deliberately broken stores through Run and requires
// the checks that guard each defect to fail, so a broken driver cannot pass.
func TestSuiteHasTeeth(t *testing.T) {
	ignoring := func() *blobstore.Container {
		f := faulty.New(mem.New(), 1)
		f.SetIgnorePreconditions(true)
		return f.Container
	}
	for _, tc := range []struct {
		name     string
		store    func() *blobstore.Container
		mustFail []string
	}{
		{"ignores preconditions", ignoring, []string{"crud", "tokens-unique", "create-if-absent-race", "cas-increments", "cas-stale", "cas-missing-key", "delete-if-match", "errors-typed", "linearizable", "probe-preconditions"}},
		{"empty token is a wildcard", (&broken{emptyTokenIsWildcard: true}).store, []string{"cas-stale"}},
		{"list never reports more", (&broken{neverMore: true}).store, []string{"list-pagination", "list-prefix", "list-order-unicode"}},
		{"ignores its context", (&broken{ignoresContext: true}).store, []string{"context-cancelled"}},
		{"mislabelled errors", (&broken{mislabelled: true}).store, []string{"crud", "errors-typed", "context-cancelled"}},
		{"stale reads", (&broken{staleReads: true, cache: map[string]blobstore.Object{}}).store, []string{"linearizable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := conformance.Run(t.Context(), tc.store(), conformance.Options{Only: tc.mustFail})
			for _, name := range tc.mustFail {
				r, ok := rep.Result(name)
				if !ok || r.Status != conformance.Fail {
					t.Errorf("check %s on a store that %s: %s, want FAIL", name, tc.name, r.Status)
					continue
				}
				t.Logf("%s fails as it should: %s", name, r.Details[0])
			}
			if rep.OK() {
				t.Errorf("a store that %s passed the suite", tc.name)
			}
		})
	}
}

func TestRunAbandonsACheckThatIgnoresItsContext(t *testing.T) {
	// Every Get blocks until released, whatever its context says.
	release := make(chan struct{})
	defer close(release)
	h := mem.New().With("", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		if call.Op == blobstore.OpGet {
			<-release
		}
		return next(ctx, call)
	})
	rep := conformance.Run(t.Context(), h, conformance.Options{Only: []string{"crud", "cas-stale"}, CheckTimeout: 50 * time.Millisecond})
	for _, name := range []string{"crud", "cas-stale"} {
		r, _ := rep.Result(name)
		if r.Status != conformance.Fail || !strings.Contains(strings.Join(r.Details, "\n"), "ignores cancellation") {
			t.Errorf("%s on a store whose Get hangs: %+v", name, r)
		}
	}
}

func TestRunReportsABadPrefix(t *testing.T) {
	rep := conformance.Run(t.Context(), mem.New(), conformance.Options{Prefix: "a//b", Only: []string{"crud"}})
	if r, _ := rep.Result("crud"); r.Status != conformance.Fail || !strings.Contains(r.Details[0], "invalid key") {
		t.Errorf("crud under an invalid prefix: %+v", r)
	}
	if rep.CleanupError == "" {
		t.Errorf("no cleanup error for an invalid prefix")
	}
}
