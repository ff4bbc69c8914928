package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

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
	// A named memory store whose tokens restart when a key is created
	// again: it passes the start-up probe and fails the fencing suite.
	blobstore.Register("test-restarting-tokens", func(ctx context.Context, u *url.URL) (*blobstore.Container, error) {
		c, err := blobstore.Open(ctx, "mem://"+u.Host)
		if err != nil {
			return nil, err
		}
		f := faulty.New(c, 1)
		f.SetRestartingTokens(true)
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
	t.Parallel() // its own store and server
	code, out, errOut := runCmd(t, "conformance", "--store", "mem://cmd-conformance")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	n, nf := len(conformance.Checks()), len(conformance.FencingSuite.Checks())
	for _, want := range []string{
		"Conformance of mem://cmd-conformance\n",
		"Precondition probe: ok",
		fmt.Sprintf("Blob contract (suite blob v%d)\nCHECK", conformance.BlobVersion), "RESULT", "LATENCY",
		"range-stream-128mib",
		"list-pagination", "linearizable",
		fmt.Sprintf("%d passed, 0 failed", n),
		fmt.Sprintf("Fencing protocol (suite fencing v%d)\nCHECK", conformance.FencingVersion), "GUARDS",
		"claim-race", "gc-beside-zombie", "NoAckedWriteLoss",
		fmt.Sprintf("%d passed, 0 failed", nf),
		"Certificate: recorded at " + conformance.CertificateKey,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "  ok  "); got != n+nf {
		t.Errorf("%d ok rows, want %d:\n%s", got, n+nf, out)
	}
	c, err := blobstore.Open(t.Context(), "mem://cmd-conformance")
	if err != nil {
		t.Fatal(err)
	}
	if left, err := blobstore.ListAll(t.Context(), c, ""); err != nil || len(left) != 1 || left[0].Key != conformance.CertificateKey {
		t.Errorf("after the command the store holds %+v (%v), want only the certificate", left, err)
	}
	cert, err := conformance.ReadCertificate(t.Context(), c)
	if err != nil || cert.Refusal() != nil || len(cert.Judge().Unverified) != 0 || cert.Store != c.String() {
		t.Errorf("certificate %+v (%v), want every fencing check passed for %s", cert, err, c)
	}
}

// TestConformanceRecordsAFencingFailureThatServeRefuses: a store that passes
// the start-up probe but reuses tokens fails the fencing suite; the command
// says which check and invariant, records it, and serve then refuses the
// store naming them, unless --allow-fencing-failures.
func TestConformanceRecordsAFencingFailureThatServeRefuses(t *testing.T) {
	store := "test-restarting-tokens://cmd-refused"
	code, out, errOut := runCmd(t, "conformance", "--store", store, "--fencing-only")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{`(?m)^fence-aba +FAIL .*SingleAcker`, `SingleAcker violated: `, "serve will refuse this store", `(?m)^claim-race +ok`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Blob contract") {
		t.Errorf("--fencing-only ran the blob suite:\n%s", out)
	}
	var stdout, stderr bytes.Buffer
	err := runServe(t.Context(), []string{"--store", store, "--listen", "127.0.0.1:0"}, &stdout, &stderr)
	if !errors.Is(err, conformance.ErrFencingCheckFailed) {
		t.Fatalf("serve on a store that failed fence-aba: %v; want a refusal", err)
	}
	for _, want := range []string{"fence-aba", "SingleAcker", "--allow-fencing-failures", "shardfence conformance"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if strings.Contains(stdout.String(), "listening") {
		t.Errorf("serve listened on a refused store")
	}
	_, _, logs := startServeLogs(t, "--store", store, "--listen", "127.0.0.1:0", "--allow-fencing-failures")
	if !strings.Contains(logs.String(), "--allow-fencing-failures") {
		t.Errorf("serve with the override does not warn:\n%s", logs)
	}
	// The master's log is fenced by the same protocol: it refuses the
	// store as well, unless --allow-fencing-failures.
	stdout.Reset()
	err = runMaster(t.Context(), []string{"--store", store, "--cluster", "c", "--listen", "127.0.0.1:0"}, &stdout, &stderr)
	if !errors.Is(err, conformance.ErrFencingCheckFailed) {
		t.Fatalf("master on a store that failed fence-aba: %v; want a refusal", err)
	}
	for _, want := range []string{"master start-up", "fence-aba", "--allow-fencing-failures", "shardfence conformance"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the master's refusal does not say %q: %v", want, err)
		}
	}
	if strings.Contains(stdout.String(), "listening") {
		t.Errorf("the master listened on a refused store")
	}
	_, _, logs = startMasterLogs(t, "--store", store, "--cluster", "c", "--snapshot-interval", "0", "--allow-fencing-failures")
	if !strings.Contains(logs.String(), "serving a store that failed fencing checks (--allow-fencing-failures)") {
		t.Errorf("the master with the override does not warn:\n%s", logs)
	}
}

// TestServeReadsTheCertificateWithoutDelay: on a file store, serve starts
// whether or not the store was certified, warns when it was not, and says
// so when it was.
func TestServeReadsTheCertificate(t *testing.T) {
	dir := t.TempDir()
	_, stop, logs := startServeLogs(t, "--store", "file://"+dir, "--listen", "127.0.0.1:0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "store not certified for fencing") {
		t.Errorf("serve on an uncertified store does not warn:\n%s", logs)
	}
	if code, out, errOut := runCmd(t, "conformance", "--store", "file://"+dir, "--fencing-only"); code != 0 {
		t.Fatalf("conformance on a file store: exit %d\n%s\n%s", code, out, errOut)
	}
	_, stop, logs = startServeLogs(t, "--store", "file://"+dir, "--listen", "127.0.0.1:0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"msg":"store certified for fencing"`) {
		t.Errorf("serve on a certified store does not say so:\n%s", logs)
	}
	// A certificate recorded for another store does not count.
	c, err := blobstore.Open(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := conformance.NewCertificate("s3://elsewhere", time.Now())
	if err := conformance.WriteCertificate(t.Context(), c, other); err != nil {
		t.Fatal(err)
	}
	_, stop, logs = startServeLogs(t, "--store", "file://"+dir, "--listen", "127.0.0.1:0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "recorded for another store") {
		t.Errorf("serve trusts a certificate of another store:\n%s", logs)
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

	code, out, errOut = runCmd(t, "conformance", "--store", "mem://cmd-json", "--json", "--fencing-only", "--no-certificate")
	if code != 0 {
		t.Fatalf("--fencing-only: exit %d\n%s\n%s", code, out, errOut)
	}
	var fdoc conformanceOutput
	if err := json.Unmarshal([]byte(out), &fdoc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	n := len(conformance.FencingSuite.Checks())
	if fdoc.Report != nil || fdoc.Fencing == nil || len(fdoc.Fencing.Results) != n || fdoc.Passed != n || fdoc.Fencing.Suite != conformance.FencingSuite || fdoc.Certificate != nil {
		t.Errorf("--fencing-only --no-certificate JSON document: %s", out)
	}
	c, err := blobstore.Open(t.Context(), "mem://cmd-json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conformance.ReadCertificate(t.Context(), c); !errors.Is(err, conformance.ErrNoCertificate) {
		t.Errorf("--no-certificate recorded one: %v", err)
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
		{"conformance", "--store", "mem://x", "--fencing-only", "--blob-only"},
		{"conformance", "--store", "mem://x", "--blob-only", "--only", "claim-race"},
	} {
		if code, _, errOut := runCmd(t, args...); code != 2 || !strings.Contains(errOut, "shardfence conformance:") {
			t.Errorf("%q: exit %d, stderr %q; want 2 with a message", args, code, errOut)
		}
	}
	if code, _, errOut := runCmd(t, "conformance", "--store", "nosuchscheme://x"); code != 1 || !strings.Contains(errOut, "unknown scheme") {
		t.Errorf("unknown scheme: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := runCmd(t, "conformance", "-h"); code != 0 || !strings.Contains(out, "linearizable") || !strings.Contains(out, "zombie-md-after-seal") {
		t.Errorf("-h: exit %d, stdout %q", code, out)
	}
}
