package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	_ "github.com/shardfence/shardfence/blobstore/minio"
	_ "github.com/shardfence/shardfence/blobstore/s3"
	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// The blob contract on MinIO in a container, through both drivers that
// speak to it, as blobstore/minio and blobstore/s3 check it on the local
// binary: no known limits.
func TestMinIOContainerConformance(t *testing.T) {
	srv := startMinIO(t)
	var n atomic.Int64
	prefix := func() string { return fmt.Sprintf("t%d", n.Add(1)) }
	t.Run("minio-scheme", func(t *testing.T) {
		conformance.RunWithLimits(t, testservers.OpenStore(t, srv.MinioURL(prefix())), nil)
	})
	t.Run("s3-scheme", func(t *testing.T) {
		conformance.RunWithLimits(t, testservers.OpenStore(t, srv.S3URL(prefix())), nil)
	})
	t.Run("probe", func(t *testing.T) {
		if err := blobstore.ProbePreconditions(t.Context(), testservers.OpenStore(t, srv.MinioURL(prefix()))); err != nil {
			t.Fatalf("probe refused MinIO in a container: %v", err)
		}
	})
	// The fencing protocol suite: as `shardfence conformance` runs it
	// (through the minio driver), and in this process through the s3
	// driver, each check a subtest.
	t.Run("fencing-command", func(t *testing.T) {
		storeURL, env := withoutCredentials(t, srv.MinioURL(prefix()), srv.AccessKey, srv.SecretKey)
		fencingCommand(t, storeURL, srv.SecretKey, env...)
	})
	t.Run("fencing-s3-scheme", func(t *testing.T) {
		conformance.RunSuiteWithLimits(t, conformance.FencingSuite, testservers.OpenStore(t, srv.S3URL(prefix())), nil)
	})
}

// The blob contract on versitygw in a container, with its conditional
// deletes on and the limits its tests on the local binary know.
func TestVersityGWContainerConformance(t *testing.T) {
	srv := startVersityGW(t)
	t.Run("s3-scheme", func(t *testing.T) {
		conformance.RunWithLimits(t, testservers.OpenStore(t, srv.S3URL("conformance", "conditional_delete=true")), testservers.VersityGWLimits())
	})
	t.Run("probe", func(t *testing.T) {
		if err := blobstore.ProbePreconditions(t.Context(), testservers.OpenStore(t, srv.S3URL("probe", "conditional_delete=true"))); err != nil {
			t.Fatalf("probe refused versitygw in a container: %v", err)
		}
	})
	// The fencing protocol suite as `shardfence conformance` runs it.
	t.Run("fencing-command", func(t *testing.T) {
		storeURL, env := withoutCredentials(t, srv.S3URL("fencing", "conditional_delete=true"), srv.AccessKey, srv.SecretKey)
		fencingCommand(t, storeURL, srv.SecretKey, env...)
	})
}

// withoutCredentials returns storeURL (minio:// or s3://) without its
// credentials, and the environment that gives them to the driver instead,
// so they stay off the command line of the process it runs.
func withoutCredentials(t *testing.T, storeURL, accessKey, secretKey string) (string, []string) {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	switch u.Scheme {
	case "minio":
		u.User = nil
		return u.String(), []string{"MINIO_ACCESS_KEY=" + accessKey, "MINIO_SECRET_KEY=" + secretKey}
	case "s3":
		q := u.Query()
		q.Del("access_key")
		q.Del("secret_key")
		u.RawQuery = q.Encode()
		return u.String(), []string{"AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=" + secretKey}
	}
	t.Fatalf("no credentials to move out of a %s:// URL", u.Scheme)
	return "", nil
}

// fencingCommand runs `shardfence conformance --fencing-only` (the command
// TestMain built) against storeURL with env added: the precondition probe,
// then every check of the fencing suite, which must all pass, and the
// certificate `shardfence serve` reads, which must be recorded. The
// output must not show secret.
func fencingCommand(t *testing.T, storeURL, secret string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shardfence.Path, "conformance", "--fencing-only", "--store", storeURL)
	cmd.Env = append(append(os.Environ(), shardfence.Env...), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		t.Fatalf("shardfence conformance --fencing-only: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	want := fmt.Sprintf("%d passed, 0 failed", len(conformance.FencingSuite.Checks()))
	for _, w := range []string{"Precondition probe: ok", "Fencing protocol", want, "Certificate: recorded"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String()+errOut.String(), secret) {
		t.Errorf("the output shows the store's secret key:\n%s\n%s", out.String(), errOut.String())
	}
	t.Logf("shardfence conformance --fencing-only:\n%s", out.String())
}
