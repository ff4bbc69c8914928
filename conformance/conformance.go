// Package conformance certifies a store for the fencing protocol, in two
// suites.
//
// The blob suite is the contract every blobstore driver must pass: CRUD with
// version tokens, listing order and pagination, create-if-absent and
// compare-and-swap races, conditional delete, key rules, cancellation, typed
// errors and a linearizability check of concurrent histories.
//
// The fencing suite runs the real fence, translog, seal, recovery and
// relocation code against the store, with faults injected on the client side
// of it (requests held on the wire and released after a successor's seal,
// responses lost after the store applied the request, requests refused), and
// checks the invariants of docs/PROTOCOL.md section 8 on the outcome: claim
// races, zombies whose md create or CAS lands late, lost responses that must
// not fence, same-body rewrites of the fence key, handoffs, GC beside a live
// zombie and the checkpoint publish gate. Each check names the invariants it
// guards, and each failure says which one broke and what in the store breaks
// it.
//
// The same checks run under go test (RunContainer and RunSuiteWithLimits, one
// subtest per check) and from the shardfence conformance command against a
// live store (Run, which keeps every check under its own scratch prefix and
// reports per check). The command records the outcome in a Certificate in
// the store, which shardfence serve reads at start-up.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// T is the part of testing.TB the checks use, so the same checks run under go
// test and under the CLI.
type T interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Context() context.Context
	Cleanup(func())
}

// Check is one named contract check. Names are stable: they are the rows of
// the conformance report and the subtest names.
type Check struct {
	Name        string
	Description string
	// Advisory marks a property that many stores lack and the fencing
	// protocol never relies on (its key layout avoids it). A failing
	// advisory check is reported as Warn: worth knowing for other users of
	// the bucket, not a reason to refuse the store.
	Advisory bool
	// Guards names the invariants of docs/PROTOCOL.md section 8 a fencing
	// check guards; empty for the blob checks.
	Guards []string
	run    func(t T, c *blobstore.Container)
}

// Suite is a set of checks: the blob contract or the fencing protocol.
type Suite string

// The suites, in the order shardfence conformance runs them.
const (
	// BlobSuite is the blobstore contract (checks.go).
	BlobSuite Suite = "blob"
	// FencingSuite runs the protocol's code against the store (fencing.go).
	FencingSuite Suite = "fencing"
)

// Suites returns every suite, in the order they run.
func Suites() []Suite { return []Suite{BlobSuite, FencingSuite} }

// Checks returns the suite's checks, in the order they run; nil for an
// unknown suite.
func (s Suite) Checks() []Check {
	switch s {
	case BlobSuite:
		return allChecks
	case FencingSuite:
		return fencingChecks()
	}
	return nil
}

// Version is the suite's version: it grows when a check is added or made
// stricter, so a certificate says which checks the store passed.
func (s Suite) Version() int {
	switch s {
	case BlobSuite:
		return BlobVersion
	case FencingSuite:
		return FencingVersion
	}
	return 0
}

// BlobVersion is the blob suite's version.
const BlobVersion = 3

// Checks returns every check of the blob suite, in the order they run.
func Checks() []Check {
	return BlobSuite.Checks()
}

// SuiteOf returns the suite that has a check named name.
func SuiteOf(name string) (Suite, bool) {
	for _, s := range Suites() {
		for _, ch := range s.Checks() {
			if ch.Name == name {
				return s, true
			}
		}
	}
	return "", false
}

// RunContainer runs every check as a subtest, each on a fresh, empty
// container from newContainer. Everything in that container is deleted when
// the subtest ends, so it must be the test's own (a temporary directory, a
// unique prefix of a test bucket), never shared data.
func RunContainer(t *testing.T, newContainer func(t *testing.T) *blobstore.Container) {
	t.Helper()
	for _, ch := range Checks() {
		t.Run(ch.Name, func(t *testing.T) {
			c := newContainer(t)
			// Registered before the check's own cleanups so it runs after
			// them: a real store should not keep a failed run's keys.
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := removeAll(ctx, c); err != nil {
					t.Logf("removing scratch keys: %v", err)
				}
			})
			if ch.Advisory {
				// Run through the recorder so a failure becomes a
				// skip with the reason, not a test failure.
				res := runOne(t.Context(), c, "", ch, 2*time.Minute)
				if res.Status == Warn {
					t.Skipf("advisory check failed (the protocol does not rely on it): %s", strings.Join(res.Details, "; "))
				}
				return
			}
			ch.run(t, c)
		})
	}
}

// Options tunes Run.
type Options struct {
	// Suite is the suite to run; empty means BlobSuite.
	Suite Suite
	// Prefix is the scratch prefix every check runs under; empty means a
	// unique "shardfence-conformance/<random>" so concurrent runs on one
	// bucket never meet.
	Prefix string
	// Only, when not empty, limits the run to the named checks; others are
	// reported as skipped.
	Only []string
	// CheckTimeout bounds each check (default 2 minutes). The context given to
	// Run bounds the whole run.
	CheckTimeout time.Duration
	// Progress, if set, is called after each check with its result, so a
	// command can print rows as they finish.
	Progress func(CheckResult)
}

// Status is a check's outcome.
type Status string

// The outcomes of a check.
const (
	Pass Status = "ok"
	Fail Status = "FAIL"
	Skip Status = "skip"
	// Warn is a failed advisory check: reported, not counted as a failure.
	Warn Status = "warn"
)

// CheckResult is one row of a Report.
type CheckResult struct {
	Name     string        `json:"name"`
	Status   Status        `json:"status"`
	Duration time.Duration `json:"duration_ns"`
	// Details holds every failure message, or the skip reason.
	Details []string `json:"details,omitempty"`
	// Logs holds what the check logged, for a failure's context.
	Logs []string `json:"logs,omitempty"`
}

// Report is the outcome of Run.
type Report struct {
	Suite        Suite         `json:"suite"`
	SuiteVersion int           `json:"suite_version"`
	Store        string        `json:"store"`
	Prefix       string        `json:"prefix"`
	Started      time.Time     `json:"started"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	Results      []CheckResult `json:"results"`
	// CleanupError says which scratch keys could not be removed, if any.
	CleanupError string `json:"cleanup_error,omitempty"`
}

// Count returns how many checks ended with status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == s {
			n++
		}
	}
	return n
}

// OK reports whether no check failed.
func (r Report) OK() bool { return r.Count(Fail) == 0 }

// Result returns the row of the named check.
func (r Report) Result(name string) (CheckResult, bool) {
	for _, res := range r.Results {
		if res.Name == name {
			return res, true
		}
	}
	return CheckResult{}, false
}

// ScratchPrefix returns a new unique prefix for one run's scratch keys:
// timestamped, so a leftover from an interrupted run says when it was made.
func ScratchPrefix() string {
	return "shardfence-conformance/" + time.Now().UTC().Format("20060102T150405Z") + "-" + randomHex(4)
}

// Run runs the checks outside go test (for the shardfence conformance
// command): each check under its own scratch prefix (blobstore.Sub under a
// unique run prefix), scratch keys removed afterwards, with per-check result
// and latency. Run never fails as a whole; problems are in the report.
func Run(ctx context.Context, c *blobstore.Container, opts Options) Report {
	suite := opts.Suite
	if suite == "" {
		suite = BlobSuite
	}
	checks := suite.Checks()
	rep := Report{Suite: suite, SuiteVersion: suite.Version(), Store: c.String(), Started: time.Now()}
	prefix := strings.Trim(opts.Prefix, "/")
	if prefix == "" {
		prefix = ScratchPrefix()
	}
	rep.Prefix = prefix + "/"
	timeout := opts.CheckTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if checks == nil {
		rep.CleanupError = fmt.Sprintf("no suite named %q", suite)
		return rep
	}
	for _, ch := range checks {
		var res CheckResult
		switch {
		case len(opts.Only) > 0 && !slices.Contains(opts.Only, ch.Name):
			res = CheckResult{Name: ch.Name, Status: Skip, Details: []string{"not selected"}}
		case ctx.Err() != nil:
			res = CheckResult{Name: ch.Name, Status: Skip, Details: []string{"run stopped: " + context.Cause(ctx).Error()}}
		default:
			res = runOne(ctx, c, prefix+"/"+ch.Name, ch, timeout)
		}
		rep.Results = append(rep.Results, res)
		if opts.Progress != nil {
			opts.Progress(res)
		}
	}
	// Every check cleans its own prefix; this sweeps what a failed cleanup
	// or a cancelled run left behind.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if root, err := blobstore.Sub(c, prefix); err != nil {
		rep.CleanupError = fmt.Sprintf("scratch prefix %q: %v", prefix, err)
	} else if err := removeAll(cctx, root); err != nil {
		rep.CleanupError = fmt.Sprintf("scratch keys under %s may remain: %v", rep.Prefix, err)
	}
	rep.Elapsed = time.Since(rep.Started)
	return rep
}

func runOne(ctx context.Context, c *blobstore.Container, prefix string, ch Check, timeout time.Duration) CheckResult {
	res := CheckResult{Name: ch.Name}
	sc := c
	if prefix != "" {
		var err error
		if sc, err = blobstore.Sub(c, prefix); err != nil {
			res.Status = Fail
			res.Details = []string{fmt.Sprintf("scratch prefix %q: %v", prefix, err)}
			return res
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rt := &runT{ctx: ctx}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rt.runCleanups()
		defer func() {
			if p := recover(); p != nil {
				rt.Errorf("check panicked: %v", p)
			}
		}()
		ch.run(rt, sc)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// A driver that ignores its context would hang the run; give the
		// check a moment to notice, then abandon it and report why.
		grace := min(10*time.Second, timeout)
		select {
		case <-done:
		case <-time.After(grace):
			rt.Errorf("did not return within %s of its context ending (%v); a call ignores cancellation, check abandoned", grace, context.Cause(ctx))
		}
	}
	res.Duration = time.Since(start)
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer ccancel()
	// A leftover is the report's CleanupError, not this check's failure:
	// a store that does not delete fails delete-idempotent on its own.
	if err := removeAll(cctx, sc); err != nil {
		rt.Logf("removing scratch keys under %s: %v", prefix, err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	res.Logs = rt.logs
	switch {
	case len(rt.errs) > 0 && ch.Advisory:
		res.Status, res.Details = Warn, rt.errs
	case len(rt.errs) > 0:
		res.Status, res.Details = Fail, rt.errs
	default:
		res.Status = Pass
	}
	return res
}

// runT is T for Run. Fatalf ends the check's goroutine the way
// testing does, so checks are written once for both runners.
type runT struct {
	ctx      context.Context
	mu       sync.Mutex
	errs     []string
	logs     []string
	cleanups []func()
}

func (r *runT) Helper()                  {}
func (r *runT) Context() context.Context { return r.ctx }

func (r *runT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *runT) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *runT) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *runT) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runT) runCleanups() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// removeAll deletes every key in c, concurrently, and confirms by listing
// again that none remain.
func removeAll(ctx context.Context, c *blobstore.Container) error {
	for attempt := 0; ; attempt++ {
		items, err := blobstore.ListAll(ctx, c, "")
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return nil
		}
		if attempt == 3 {
			return fmt.Errorf("deleted keys keep coming back: %d listed after three rounds of deletes (first: %q)", len(items), items[0].Key)
		}
		keys := make([]string, len(items))
		for i, it := range items {
			keys[i] = it.Key
		}
		var firstErr error
		var mu sync.Mutex
		forEach(ctx, keys, 16, func(ctx context.Context, k string) {
			if err := c.Delete(ctx, k); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
		if firstErr != nil {
			return firstErr
		}
	}
}

// forEach runs f over items with at most workers goroutines.
func forEach[E any](ctx context.Context, items []E, workers int, f func(context.Context, E)) {
	ch := make(chan E)
	var wg sync.WaitGroup
	for range min(workers, len(items)) {
		wg.Go(func() {
			for it := range ch {
				f(ctx, it)
			}
		})
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
