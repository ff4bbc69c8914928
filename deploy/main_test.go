package deploy

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
)

// binaries are shardfence and the example kv, built from this checkout
// once, by the first test that needs them.
type binaries struct{ shardfence, kv string }

var (
	binDir   string
	binOnce  sync.Once
	binBuilt binaries
	binErr   error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shardfence-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildBinaries(t *testing.T) binaries {
	t.Helper()
	binOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		// This module lives in deploy/ of the shardfence checkout.
		root, err := filepath.Abs("..")
		if err != nil {
			binErr = err
			return
		}
		b := binaries{shardfence: filepath.Join(binDir, "shardfence"), kv: filepath.Join(binDir, "kv")}
		for pkg, out := range map[string]string{"./cmd/shardfence": b.shardfence, "./examples/kv": b.kv} {
			cmd := exec.CommandContext(ctx, "go", "build", "-C", root, "-o", out, pkg)
			if msg, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
				return
			}
		}
		binBuilt = b
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binBuilt
}

// helpFlags runs bin with args (a -h) and returns the flag names its help
// lists.
func helpFlags(t *testing.T, bin string, args ...string) map[string]bool {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // a plain flag package exits 0 or 2 on -h
	flags := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ := strings.Cut(rest, " ")
			name, _, _ = strings.Cut(name, "\t")
			flags[name] = true
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s %s printed no flags:\n%s", bin, strings.Join(args, " "), out.String())
	}
	return flags
}
