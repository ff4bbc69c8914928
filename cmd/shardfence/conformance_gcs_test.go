package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// allChecksBut is every check of both suites except those named.
func allChecksBut(skip ...string) string {
	var only []string
	for _, s := range conformance.Suites() {
		for _, ch := range s.Checks() {
			if !strings.Contains(","+strings.Join(skip, ",")+",", ","+ch.Name+",") {
				only = append(only, ch.Name)
			}
		}
	}
	return strings.Join(only, ",")
}

// TestConformanceGCSOnFakeGCS runs `shardfence conformance --store gs://...`
// against fake-gcs-server over TCP, the way a user points the command at an
// emulator. list-pagination (a thousand-key listing, slow on the emulator)
// runs in blobstore/gcs's own tests against the same server; here every
// other check of both suites must pass, the command must exit 0 and record
// a certificate that serve accepts.
func TestConformanceGCSOnFakeGCS(t *testing.T) {
	t.Parallel() // its own store and server
	srv := testservers.NewFakeGCS(t)
	code, out, errOut := runCmd(t, "conformance", "--store", srv.StoreURL("cmd"), "--only", allChecksBut("list-pagination"))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"gs://" + srv.Bucket + "/cmd", "Precondition probe: ok", "delete-if-match", "0 failed", "Fencing protocol", "gc-beside-zombie", fmt.Sprintf("%d passed, 0 failed", len(conformance.FencingSuite.Checks())), "Certificate: recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
