package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// TestConformanceAzureOnAzurite runs `shardfence conformance --store
// azblob://...` against Azurite, with the development account's key in the
// environment as a user's real key would be. list-pagination runs in
// blobstore/azure's own tests; here every other check of both suites,
// conditional delete included, must pass and the command must exit 0.
func TestConformanceAzureOnAzurite(t *testing.T) {
	srv := testservers.StartAzurite(t)
	srv.SetEnv(t)
	code, out, errOut := runCmd(t, "conformance", "--store", srv.StoreURL("cmd"), "--only", allChecksBut("list-pagination"))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"azblob://" + testservers.AzuriteAccount + "/" + srv.Container + "/cmd", "Precondition probe: ok", "delete-if-match", "0 failed", "Fencing protocol", "handoff-racing-target", fmt.Sprintf("%d passed, 0 failed", len(conformance.FencingSuite.Checks())), "Certificate: recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, testservers.AzuriteKey) {
		t.Errorf("the output shows the account key:\n%s\n%s", out, errOut)
	}
}
