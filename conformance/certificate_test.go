package conformance_test

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/conformance"
)

// report builds a suite report whose every check passed except those in
// failed (FAIL) and skipped (skip).
func report(s conformance.Suite, failed, skipped []string) conformance.Report {
	rep := conformance.Report{Suite: s, SuiteVersion: s.Version(), Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, ch := range s.Checks() {
		r := conformance.CheckResult{Name: ch.Name, Status: conformance.Pass}
		switch {
		case contains(failed, ch.Name):
			r.Status, r.Details = conformance.Fail, []string{"SingleAcker violated: " + strings.Repeat("x", 2000)}
		case contains(skipped, ch.Name):
			r.Status, r.Details = conformance.Skip, []string{"not selected"}
		}
		rep.Results = append(rep.Results, r)
	}
	return rep
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestCertificateRoundTripAndVerdict(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	issued := time.Now()
	cert := conformance.NewCertificate(store.String(), issued,
		report(conformance.BlobSuite, []string{"linearizable"}, nil),
		report(conformance.FencingSuite, []string{"fence-aba"}, []string{"claim-race"}))
	if err := conformance.WriteCertificate(ctx, store, cert); err != nil {
		t.Fatal(err)
	}
	got, err := conformance.ReadCertificate(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if got.Store != store.String() || !got.Issued.Equal(issued) || len(got.Suites) != 2 {
		t.Fatalf("read back %+v", got)
	}
	v := got.Judge()
	if len(v.Failed) != 1 || v.Failed[0].Name != "fence-aba" || len(v.Failed[0].Guards) == 0 {
		t.Errorf("failed fencing checks: %+v", v.Failed)
	}
	if len(v.Unverified) != 2 || v.Unverified[0] != "claim-race" || v.Unverified[1] != "fence-aba" {
		t.Errorf("unverified: %v, want the skipped and the failed check", v.Unverified)
	}
	if len(v.BlobFailed) != 1 || v.BlobFailed[0].Name != "linearizable" {
		t.Errorf("blob failures: %+v", v.BlobFailed)
	}
	if d := v.Failed[0].Detail; len(d) > 700 || !strings.HasPrefix(d, "SingleAcker violated") {
		t.Errorf("recorded detail is not the clipped failure: %d bytes %.40q", len(d), d)
	}
	err = got.Refusal()
	var re *conformance.RefusalError
	if !errors.Is(err, conformance.ErrFencingCheckFailed) || !errors.As(err, &re) {
		t.Fatalf("refusal: %v", err)
	}
	for _, want := range []string{store.String(), "fence-aba", "SingleAcker", "lose acknowledged writes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	clean := conformance.NewCertificate("s", issued, report(conformance.FencingSuite, nil, nil))
	if err := clean.Refusal(); err != nil {
		t.Errorf("a passing certificate refuses: %v", err)
	}
	if v := clean.Judge(); len(v.Unverified) != 0 || len(v.Failed) != 0 {
		t.Errorf("passing certificate's verdict: %+v", v)
	}
}

func TestCertificateDigestCatchesEdits(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	if _, err := conformance.ReadCertificate(ctx, store); !errors.Is(err, conformance.ErrNoCertificate) {
		t.Fatalf("empty store: %v, want ErrNoCertificate", err)
	}
	cert := conformance.NewCertificate(store.String(), time.Now(), report(conformance.FencingSuite, []string{"claim-race"}, nil))
	body, err := cert.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Turning the FAIL into ok by hand leaves the digest behind.
	edited := regexp.MustCompile(`"status":\s*"FAIL"`).ReplaceAll(body, []byte(`"status": "ok"`))
	if bytes.Equal(edited, body) {
		t.Fatalf("test could not find the status to edit in %s", body)
	}
	for name, b := range map[string][]byte{"edited": edited, "truncated": body[:len(body)/2], "not json": []byte("hello")} {
		if _, err := conformance.DecodeCertificate(b); !errors.Is(err, conformance.ErrCertificateInvalid) {
			t.Errorf("%s certificate: %v, want ErrCertificateInvalid", name, err)
		}
	}
	if _, err := store.Put(ctx, conformance.CertificateKey, edited); err != nil {
		t.Fatal(err)
	}
	if _, err := conformance.ReadCertificate(ctx, store); !errors.Is(err, conformance.ErrCertificateInvalid) || !strings.Contains(err.Error(), conformance.CertificateKey) {
		t.Errorf("edited certificate in the store: %v", err)
	}
	// A store error is not "no certificate".
	f := faulty.New(store, 1)
	f.MustAdd(faulty.Rule{Ops: faulty.Reads, Fault: faulty.Unavailable})
	if _, err := conformance.ReadCertificate(ctx, f.Container); !errors.Is(err, blobstore.ErrUnavailable) {
		t.Errorf("unreadable store: %v", err)
	}
}

func TestMergeKeepsWhatARunDidNotCheck(t *testing.T) {
	earlier := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := conformance.NewCertificate("s", earlier,
		report(conformance.BlobSuite, nil, nil),
		report(conformance.FencingSuite, []string{"fence-aba"}, nil))
	// A later run of two fencing checks only: fence-aba now passes.
	next := conformance.NewCertificate("s", time.Now(), report(conformance.FencingSuite, nil, allBut(conformance.FencingSuite, "fence-aba", "claim-race")))
	merged := conformance.MergeCertificates(prev, next)
	if err := merged.Refusal(); err != nil {
		t.Errorf("the re-run passed fence-aba, yet the merge refuses: %v", err)
	}
	if v := merged.Judge(); len(v.Unverified) != 0 {
		t.Errorf("checks the re-run skipped lost their earlier pass: %v", v.Unverified)
	}
	if _, ok := merged.Suite(conformance.BlobSuite); !ok {
		t.Errorf("the blob suite the re-run did not run was dropped")
	}
	if other := conformance.MergeCertificates(conformance.NewCertificate("other", earlier, report(conformance.FencingSuite, nil, nil)), next); len(other.Judge().Unverified) == 0 {
		t.Errorf("a certificate of another store filled in this one's skipped checks")
	}
}

func allBut(s conformance.Suite, keep ...string) []string {
	var out []string
	for _, ch := range s.Checks() {
		if !contains(keep, ch.Name) {
			out = append(out, ch.Name)
		}
	}
	return out
}
