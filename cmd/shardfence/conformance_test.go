package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/conformance"
)

// Test-only schemes for stores with one defect each, so the command's
// refusal and failure paths run end to end through blobstore.Open.
func init() {
	blobstore.Register("test-ignoring", func(_ context.Context, _ *url.URL) (*blobstore.Container, error) {
		f := faulty.New(mem.New(), 1)
		f.SetIgnorePreconditions(true)
		return f.Container, nil
	})
	blobstore.Register("test-dropping-deletes", func(_ context.Context, _ *url.URL) (*blobstore.Container, error) {
		f := faulty.New(mem.New(), 1)
		f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpDelete), Fault: faulty.DropDelete})
		return f.Container, nil
	})
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestConformanceOnMem(t *testing.T) {
	code, out, errOut := runCmd(t, "conformance", "--store", "mem://cmd-conformance")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	n := len(conformance.Checks())
	for _, want := range []string{
		"Conformance of mem://cmd-conformance\n",
		"Precondition probe: ok",
		"CHECK", "RESULT", "LATENCY",
		"list-pagination", "linearizable",
		fmt.Sprintf("%d passed, 0 failed", n),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "  ok  "); got != n {
		t.Errorf("%d ok rows, want %d:\n%s", got, n, out)
	}
	c, err := blobstore.Open(t.Context(), "mem://cmd-conformance")
	if err != nil {
		t.Fatal(err)
	}
	if left, err := blobstore.ListAll(t.Context(), c, ""); err != nil || len(left) != 0 {
		t.Errorf("after the command the store holds %d keys (%v), want none", len(left), err)
	}
}

func TestConformanceOnFile(t *testing.T) {
	dir := t.TempDir()
	// The fs driver's own tests run the whole suite; here the command's
	// path from a file:// URL to a clean directory is what is under test,
	// so the slow listing and body checks are left out.
	code, out, errOut := runCmd(t, "conformance", "--store", "file://"+dir, "--only", "crud,cas-increments,keys-unicode,list-prefix,linearizable")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "5 passed, 0 failed") {
		t.Errorf("summary missing:\n%s", out)
	}
	c, err := blobstore.Open(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if left, err := blobstore.ListAll(t.Context(), c, ""); err != nil || len(left) != 0 {
		t.Errorf("after the command the directory holds %d objects (%v), want none", len(left), err)
	}
}

func TestConformanceJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "conformance", "--store", "mem://cmd-json", "--json", "--only", "crud, cas-stale")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var doc struct {
		Store  string
		Probe  struct{ Status string }
		Report conformance.Report
		Passed int
		Failed int
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	if doc.Probe.Status != "ok" || doc.Passed != 2 || doc.Failed != 0 || len(doc.Report.Results) != len(conformance.Checks()) {
		t.Errorf("JSON document: %+v", doc)
	}
	if r, ok := doc.Report.Result("crud"); !ok || r.Status != conformance.Pass {
		t.Errorf("crud row: %+v", r)
	}
	if r, _ := doc.Report.Result("linearizable"); r.Status != conformance.Skip {
		t.Errorf("unselected row: %+v", r)
	}
}

func TestConformanceRefusesStoreIgnoringPreconditions(t *testing.T) {
	code, out, errOut := runCmd(t, "conformance", "--store", "test-ignoring://x")
	if code == 0 {
		t.Fatalf("a store that ignores preconditions was accepted:\n%s", out)
	}
	if !strings.Contains(out, "Precondition probe: FAIL") || !strings.Contains(out, "does not enforce preconditions") {
		t.Errorf("stdout does not say why:\n%s", out)
	}
	if !strings.Contains(errOut, "refusing faulty(mem://") || !strings.Contains(errOut, "does not enforce conditional writes") {
		t.Errorf("stderr does not name the store and the reason:\n%s", errOut)
	}
	if strings.Contains(out, "CHECK") {
		t.Errorf("the suite ran on a refused store:\n%s", out)
	}

	code, out, _ = runCmd(t, "conformance", "--store", "test-ignoring://x", "--json")
	var doc conformanceOutput
	if code == 0 || json.Unmarshal([]byte(out), &doc) != nil || doc.Probe.Status != conformance.Fail || doc.Report != nil {
		t.Errorf("--json refusal: exit %d, document %s", code, out)
	}
}

func TestConformanceFailsOnBrokenStore(t *testing.T) {
	code, out, errOut := runCmd(t, "conformance", "--store", "test-dropping-deletes://x", "--only", "crud,delete-idempotent,list-prefix")
	if code != 1 {
		t.Fatalf("exit %d for a store that drops deletes, want 1\n%s\n%s", code, out, errOut)
	}
	n := len(conformance.Checks())
	for _, want := range []string{`(?m)^crud +FAIL`, "expected: Get/Stat/Put", "after Delete", `(?m)^list-prefix +ok`, fmt.Sprintf("1 passed, 2 failed, %d skipped", n-3), "Cleanup: scratch keys"} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, fmt.Sprintf("2 of %d checks failed on faulty(mem://", n)) {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestConformanceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"conformance"},
		{"conformance", "--store", "mem://x", "--only", "no-such-check"},
		{"conformance", "mem://x"},
	} {
		if code, _, errOut := runCmd(t, args...); code != 2 || !strings.Contains(errOut, "shardfence conformance:") {
			t.Errorf("%q: exit %d, stderr %q; want 2 with a message", args, code, errOut)
		}
	}
	if code, _, errOut := runCmd(t, "conformance", "--store", "nosuchscheme://x"); code != 1 || !strings.Contains(errOut, "unknown scheme") {
		t.Errorf("unknown scheme: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "conformance", "-h"); code != 0 || !strings.Contains(errOut, "linearizable") {
		t.Errorf("-h: exit %d, stderr %q", code, errOut)
	}
}
