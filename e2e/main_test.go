package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/e2e/internal/containers"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// shardfence is the command the sidecar tests run, built by TestMain from
// this checkout: a plain build, or a race-built one when the tests run
// under the race detector and SHARDFENCE_CHILD_RACE=1 asks for it (make
// verify), as the shardfence module's multi-process tests do.
var shardfence sidecarproc.Command

func TestMain(m *testing.M) {
	containers.Configure()
	dir, err := os.MkdirTemp("", "shardfence-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err := buildShardfence(dir)
	if err != nil {
		// The checkout does not build: a failure everywhere.
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	shardfence = sidecarproc.Command{Path: bin}
	if childRace() {
		// A race the process detects ends it, and so fails its test.
		shardfence.Env = []string{"GORACE=halt_on_error=1"}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// childRace says whether the processes are race-built.
func childRace() bool { return raceEnabled && os.Getenv("SHARDFENCE_CHILD_RACE") == "1" }

// buildShardfence builds cmd/shardfence of the shardfence module this
// module replaces (the checkout above it) into dir.
func buildShardfence(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/shardfence/shardfence").Output()
	if err != nil {
		return "", fmt.Errorf("find the shardfence module: %w", err)
	}
	bin := filepath.Join(dir, "shardfence")
	args := []string{"build", "-C", strings.TrimSpace(string(root)), "-o", bin}
	if childRace() {
		args = append(args, "-race")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, "./cmd/shardfence")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// startMinIO is MinIO in a container, or the end of the test if none can
// run (a failure under CI=true, a skip with the reason elsewhere).
func startMinIO(t *testing.T) *containers.Server {
	t.Helper()
	srv, err := containers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO container", err)
	}
	return srv
}

func startVersityGW(t *testing.T) *containers.Server {
	t.Helper()
	srv, err := containers.StartVersityGW(t)
	if err != nil {
		testservers.Unavailable(t, "versitygw container", err)
	}
	return srv
}
