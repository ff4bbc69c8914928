package conformance_test

import (
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/conformance"
)

// TestRecordCertificateMergesOverTheStoresOwn: a second run of a few
// checks records its own results over the first run's, keeps the first
// run's suites and checks it did not run, and what is recorded is what it
// returned.
func TestRecordCertificateMergesOverTheStoresOwn(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	first, err := conformance.RecordCertificate(ctx, store, time.Now(),
		report(conformance.BlobSuite, nil, nil),
		report(conformance.FencingSuite, []string{"fence-aba"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if first.Refusal() == nil {
		t.Fatal("a failed fencing check recorded no refusal")
	}
	second, err := conformance.RecordCertificate(ctx, store, time.Now(),
		report(conformance.FencingSuite, nil, allBut(conformance.FencingSuite, "fence-aba")))
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Refusal(); err != nil {
		t.Errorf("fence-aba passed on the re-run, yet the record refuses: %v", err)
	}
	if v := second.Judge(); len(v.Unverified) != 0 {
		t.Errorf("checks the re-run skipped lost the first run's pass: %v", v.Unverified)
	}
	if _, ok := second.Suite(conformance.BlobSuite); !ok {
		t.Error("the blob suite the re-run did not run was dropped")
	}
	got, err := conformance.ReadCertificate(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if got.Store != store.String() || !got.Issued.Equal(second.Issued) || got.Refusal() != nil {
		t.Errorf("the store holds %+v, not the merged certificate", got)
	}
}
