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
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container { return mem.New() })
}

func TestSubOfMem(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container {
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
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container {
		f := faulty.New(mem.New(), 42)
		f.MustAdd(faulty.Rule{Latency: faulty.Uniform(0, 200*time.Microsecond)})
		return f
	})
}

func TestMetered(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container {
		m := metered.New(mem.New(), "conformance")
		t.Cleanup(func() {
			if m.Snapshot().Requests() == 0 {
				t.Errorf("the check made no request through the metered store")
			}
		})
		return m
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

// broken is a store with one deliberate defect; the suite must catch each.
type broken struct {
	blobstore.Container
	emptyTokenIsWildcard bool // CAS with "" overwrites, as a driver that omits If-Match would
	neverMore            bool // List never says more keys remain
	ignoresContext       bool // requests run on a background context
	bareErrors           bool // errors lose their OpError
	staleReads           bool // Get serves a cached version until every third read

	mu    sync.Mutex
	cache map[string]blobstore.Object
	reads int
}

func (b *broken) ctx(ctx context.Context) context.Context {
	if b.ignoresContext {
		return context.Background()
	}
	return ctx
}

func (b *broken) err(err error) error {
	var oe *blobstore.OpError
	if b.bareErrors && errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

func (b *broken) Get(ctx context.Context, key string) (blobstore.Object, error) {
	if b.staleReads {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.reads++
		if o, ok := b.cache[key]; ok && b.reads%3 != 0 {
			return o, nil
		}
	}
	o, err := b.Container.Get(b.ctx(ctx), key)
	if err == nil && b.staleReads {
		b.cache[key] = o
	}
	return o, b.err(err)
}

func (b *broken) Stat(ctx context.Context, key string) (blobstore.Attrs, error) {
	a, err := b.Container.Stat(b.ctx(ctx), key)
	return a, b.err(err)
}

func (b *broken) Put(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	tok, err := b.Container.Put(b.ctx(ctx), key, body)
	return tok, b.err(err)
}

func (b *broken) CreateIfAbsent(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	tok, err := b.Container.CreateIfAbsent(b.ctx(ctx), key, body)
	return tok, b.err(err)
}

func (b *broken) CompareAndSwap(ctx context.Context, key string, expected blobstore.Token, body []byte) (blobstore.Token, error) {
	if expected == "" && b.emptyTokenIsWildcard {
		return b.Container.Put(ctx, key, body)
	}
	tok, err := b.Container.CompareAndSwap(b.ctx(ctx), key, expected, body)
	return tok, b.err(err)
}

func (b *broken) Delete(ctx context.Context, key string) error {
	return b.err(b.Container.Delete(b.ctx(ctx), key))
}

func (b *broken) List(ctx context.Context, prefix, startAfter string, limit int) (blobstore.ListPage, error) {
	p, err := b.Container.List(b.ctx(ctx), prefix, startAfter, limit)
	if b.neverMore {
		p.More = false
	}
	return p, b.err(err)
}

// TestSuiteHasTeeth runs deliberately broken stores through Run and requires
// the checks that guard each defect to fail, so a broken driver cannot pass.
func TestSuiteHasTeeth(t *testing.T) {
	ignoring := func() blobstore.Container {
		f := faulty.New(mem.New(), 1)
		f.SetIgnorePreconditions(true)
		return f
	}
	for _, tc := range []struct {
		name     string
		store    func() blobstore.Container
		mustFail []string
	}{
		{"ignores preconditions", ignoring, []string{"crud", "tokens-unique", "create-if-absent-race", "cas-increments", "cas-stale", "cas-missing-key", "delete-if-match", "errors-typed", "linearizable", "probe-preconditions"}},
		{"empty token is a wildcard", func() blobstore.Container { return &broken{Container: mem.New(), emptyTokenIsWildcard: true} }, []string{"cas-stale"}},
		{"list never reports more", func() blobstore.Container { return &broken{Container: mem.New(), neverMore: true} }, []string{"list-pagination", "list-prefix", "list-order-unicode"}},
		{"ignores its context", func() blobstore.Container { return &broken{Container: mem.New(), ignoresContext: true} }, []string{"context-cancelled"}},
		{"bare errors", func() blobstore.Container { return &broken{Container: mem.New(), bareErrors: true} }, []string{"crud", "errors-typed", "context-cancelled"}},
		{"stale reads", func() blobstore.Container {
			return &broken{Container: mem.New(), staleReads: true, cache: map[string]blobstore.Object{}}
		}, []string{"linearizable"}},
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

// hanging blocks every Get until released, whatever its context says.
type hanging struct {
	blobstore.Container
	release chan struct{}
}

func (h hanging) Get(ctx context.Context, key string) (blobstore.Object, error) {
	<-h.release
	return h.Container.Get(ctx, key)
}

func TestRunAbandonsACheckThatIgnoresItsContext(t *testing.T) {
	h := hanging{Container: mem.New(), release: make(chan struct{})}
	defer close(h.release)
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
