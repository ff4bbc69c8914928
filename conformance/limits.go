package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// Limit is a check a particular store fails for a reason of its own, matched
// on that failure's own words, so any other failure of the check still fails.
type Limit struct {
	Match func(details []string) bool
	Why   string
}

// AllMention matches a failure whose every detail contains s.
func AllMention(s string) func([]string) bool {
	return func(details []string) bool {
		for _, d := range details {
			if !strings.Contains(d, s) {
				return false
			}
		}
		return len(details) > 0
	}
}

// RunWithLimits is RunSuiteWithLimits for the blob suite.
func RunWithLimits(t *testing.T, c *blobstore.Container, limits map[string]Limit) {
	t.Helper()
	RunSuiteWithLimits(t, BlobSuite, c, limits)
}

// RunSuiteWithLimits runs every check of suite on c through Run (each under
// its own scratch prefix), one subtest per check. A check named in limits
// whose failure matches is skipped with the reason; an advisory warning is
// skipped with its details; any other failure fails the test, and so do
// scratch keys that could not be removed.
func RunSuiteWithLimits(t *testing.T, suite Suite, c *blobstore.Container, limits map[string]Limit) {
	t.Helper()
	rep := Run(t.Context(), c, Options{Suite: suite})
	if n := len(suite.Checks()); len(rep.Results) != n {
		t.Fatalf("report has %d results for %d checks", len(rep.Results), n)
	}
	for _, res := range rep.Results {
		t.Run(res.Name, func(t *testing.T) {
			for _, l := range res.Logs {
				t.Log(l)
			}
			t.Logf("%s: %s in %s", res.Name, res.Status, res.Duration.Round(time.Millisecond))
			switch res.Status {
			case Pass:
				return
			case Skip:
				t.Skip(strings.Join(res.Details, "; "))
			case Warn:
				t.Skipf("advisory check warned: %s", strings.Join(res.Details, "; "))
			}
			if l, ok := limits[res.Name]; ok && l.Match(res.Details) {
				t.Skipf("known store limitation: %s; details: %s", l.Why, strings.Join(res.Details, "; "))
			}
			for _, d := range res.Details {
				t.Error(d)
			}
		})
	}
	if rep.CleanupError != "" {
		t.Error(rep.CleanupError)
	}
}
