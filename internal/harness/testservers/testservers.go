// Package testservers starts real object-store servers (MinIO, versitygw,
// Azurite, fake-gcs-server) on 127.0.0.1 for tests, each as a separate
// process built by `make tools`: free ports, temporary directories, every
// process stopped when the test ends, logs kept and shown on failure. None
// is linked into a test binary, so none is a requirement of the module
// (the container variants live in the separate e2e module). Under CI=true a server that does not start fails the test; on a
// developer machine it is skipped with a hint to run `make tools`.
package testservers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/launcher"
)

// InCI reports whether tests run under CI, where a missing server fails.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable ends a test whose server cannot start: a failure under CI, a
// skip with an install hint elsewhere.
func Unavailable(t testing.TB, server string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s did not start (CI=true, so this fails instead of skipping): %v", server, err)
	}
	t.Skipf("%s not available: %v (run `make tools` to install the test servers)", server, err)
}

// ToolsDir is where `make tools` puts test-server binaries:
// $SHARDFENCE_TOOLS_DIR, else $XDG_CACHE_HOME/shardfence/tools, else
// ~/.cache/shardfence/tools.
func ToolsDir() string {
	if d := os.Getenv("SHARDFENCE_TOOLS_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "shardfence", "tools")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "shardfence", "tools")
}

// Tool finds an executable: the tools directory first (bin/ and
// node_modules/.bin/), then PATH.
func Tool(name string) (string, error) {
	if d := ToolsDir(); d != "" {
		for _, p := range []string{filepath.Join(d, "bin", name), filepath.Join(d, "node_modules", ".bin", name)} {
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found in %s nor on PATH", name, ToolsDir())
	}
	return p, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// Process is a server started for a test: a launcher.Proc (Cmd, Exited,
// Signal, ...) in its own process group, logging to LogPath.
type Process struct {
	*launcher.Proc
	Name    string
	LogPath string
}

// LogTail returns the last n bytes of the process log.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Start runs bin with args and extra env in its own process group, logging to
// a file under t.TempDir(), and waits until ready succeeds or timeout passes.
// The process is killed when the test ends; if the test failed its log tail
// is printed.
func Start(t testing.TB, name, bin string, args, env []string, ready func(context.Context) error, timeout time.Duration) (*Process, error) {
	t.Helper()
	p, err := launch(name, bin, args, env, t.TempDir())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, p.LogTail(4000))
		}
		p.Stop()
	})
	if err := p.awaitReady(ready, timeout); err != nil {
		return nil, err
	}
	return p, nil
}

// StartShared is Start for a server shared by a whole package (started in
// TestMain, where there is no test): its log goes to logDir, and the caller
// stops it.
func StartShared(name, bin string, args, env []string, logDir string, ready func(context.Context) error, timeout time.Duration) (*Process, error) {
	p, err := launch(name, bin, args, env, logDir)
	if err != nil {
		return nil, err
	}
	if err := p.awaitReady(ready, timeout); err != nil {
		return nil, err
	}
	return p, nil
}

// launch starts bin in its own process group, killed with its parent, its
// output logged to logDir/name.log.
func launch(name, bin string, args, env []string, logDir string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	lp, err := launcher.Start(launcher.Command{Path: bin}, launcher.Spec{Label: name, Args: args, Env: env, Output: logf, Group: true})
	if err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		<-lp.Done()
		logf.Close()
	}()
	return &Process{Proc: lp, Name: name, LogPath: logPath}, nil
}

// awaitReady polls ready until it succeeds, the process exits, or timeout
// passes; in the last two cases the process is stopped.
func (p *Process) awaitReady(ready func(context.Context) error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited before it was ready (%v); log tail:\n%s", p.Name, p.Err(), p.LogTail(2000))
		}
		// Generous per attempt: a server still warming up under a loaded
		// test run (Node.js for Azurite) may take seconds for its first
		// answer, and cancelling early only restarts that wait.
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		err := ready(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			p.Stop()
			return fmt.Errorf("%s not ready after %s: %v; log tail:\n%s", p.Name, timeout, err, p.LogTail(2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the process group: SIGTERM, and SIGKILL after 5 s.
func (p *Process) Stop() { p.Proc.Stop(5 * time.Second) }

// HTTPReady returns a readiness check that succeeds once url answers with
// a status below 500 (any answer at all means the server is listening and
// serving; health endpoints answer 200).
func HTTPReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("%s answered %s", url, resp.Status)
		}
		return nil
	}
}

// OpenStore opens the store at rawURL for t, failing t if it cannot, and
// closes it when t ends.
func OpenStore(t testing.TB, rawURL string) *blobstore.Container {
	t.Helper()
	c, err := blobstore.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("open %s: %v", blobstore.Redact(rawURL), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
