package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/e2e/internal/containers"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// The image `make image` builds (scripts/build-image), built here in the
// engine the run has, nothing pulled: it runs `shardfence version` with the
// version and commit stamped at build time, runs as a non-root user with a
// /data volume that user can write (a sidecar over file:///data starts,
// which writes its precondition probe there), and carries the host's CA
// bundle. Without an engine it skips with the reason; under CI=true it
// fails.
func TestImageBuildsAndRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	tag := shardfenceImage(t)
	const ver, commit = imageVersion, imageCommit
	label := "--label=" + containers.RunLabel + "=" + testRun()

	got := docker(t, ctx, "run", "--rm", label, "--network", "none", tag, "version")
	if !strings.HasPrefix(got, "shardfence "+ver+" (commit "+commit+",") {
		t.Errorf("shardfence version in the image: %q, want version %s and commit %s", got, ver, commit)
	}

	cfg := docker(t, ctx, "image", "inspect", "--format", "{{.Config.User}}|{{json .Config.Volumes}}|{{json .Config.Entrypoint}}", tag)
	parts := strings.Split(strings.TrimSpace(cfg), "|")
	if len(parts) != 3 || parts[0] == "" || parts[0] == "0" || strings.HasPrefix(parts[0], "0:") || strings.HasPrefix(parts[0], "root") {
		t.Errorf("image config %q: want a non-root user", cfg)
	} else if !strings.Contains(parts[1], `"/data"`) || !strings.Contains(parts[2], "/usr/local/bin/shardfence") {
		t.Errorf("image config %q: want a /data volume and shardfence as the entrypoint", cfg)
	}

	// The CA bundle, copied out of a created (never started) container.
	id := strings.TrimSpace(docker(t, ctx, "create", label, tag))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
	dest := t.TempDir()
	docker(t, ctx, "cp", id+":/etc/ssl/certs/ca-certificates.crt", dest)
	if b, err := os.ReadFile(filepath.Join(dest, "ca-certificates.crt")); err != nil || !strings.Contains(string(b), "BEGIN CERTIFICATE") {
		t.Errorf("the image's CA bundle: %v (%d bytes)", err, len(b))
	}

	// A sidecar as the image's user over the /data volume.
	sid := strings.TrimSpace(docker(t, ctx, "run", "-d", label, "--network", "none", tag,
		"serve", "--store", "file:///data/shards", "--listen", "127.0.0.1:7400", "--node", "img"))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", sid).Run() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		logs, _ := exec.CommandContext(ctx, "docker", "logs", sid).CombinedOutput()
		if strings.Contains(string(logs), "sidecar listening on") {
			break
		}
		state, _ := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.State.Status}}", sid).Output()
		if s := strings.TrimSpace(string(state)); s != "running" && s != "created" || time.Now().After(deadline) {
			t.Fatalf("the sidecar in the image did not serve over file:///data (state %s):\n%s", s, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The version and commit the e2e image is stamped with.
const imageVersion, imageCommit = "v0.0.0-e2e", "e2e0123456789abcdef"

var (
	imageOnce sync.Once
	imageTag  string
	imageErr  error
)

// shardfenceImage builds the image `make image` builds (scripts/build-image)
// once per run, as shardfence:e2e, in the engine the run has, or ends the
// test (a skip with the reason without an engine; a failure under
// CI=true).
func shardfenceImage(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	engine, err := containers.Engine(ctx)
	if err != nil {
		testservers.Unavailable(t, "Docker engine for the shardfence image", err)
	}
	engine.Close()
	imageOnce.Do(func() {
		root := moduleRoot(t)
		tag := "shardfence:e2e"
		out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", "build-image"), tag, imageVersion, imageCommit).CombinedOutput()
		if err != nil {
			imageErr = fmt.Errorf("scripts/build-image: %v\n%s", err, out)
			return
		}
		imageTag = tag
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageTag
}

// testRun is this run's label value for the containers it starts.
func testRun() string {
	if run := os.Getenv("SHARDFENCE_TEST_RUN"); run != "" {
		return run
	}
	return "local"
}

// docker runs the docker CLI and returns its stdout, failing the test on an
// error.
func docker(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// moduleRoot is the directory of the shardfence module this one replaces
// (the checkout above it).
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/shardfence/shardfence").Output()
	if err != nil {
		t.Fatalf("find the shardfence module: %v", err)
	}
	return strings.TrimSpace(string(out))
}
