package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// childRaceEnv asks the multi-process tests to start the race-built test
// binary itself as their masters and sidecars (make verify does). By
// default a test binary built with the race detector starts a plain build
// of this package instead: a race-built child costs about a third more
// CPU, and the race run covers the same code in process. With it set, a
// race a child detects ends that child at once (GORACE halt_on_error), so
// the test that started it fails rather than a report scrolling past in a
// log.
const childRaceEnv = "SHARDFENCE_CHILD_RACE"

var child struct {
	once sync.Once
	dir  string
	cmd  sidecarproc.Command
}

// thisBinary is the shardfence command the multi-process tests start.
func thisBinary() sidecarproc.Command {
	child.once.Do(func() { child.cmd = childCommand() })
	return child.cmd
}

// testBinary runs this test binary as the shardfence command (TestMain).
func testBinary() sidecarproc.Command {
	env := []string{asBinaryEnv + "=1"}
	if raceEnabled {
		env = append(env, "GORACE=halt_on_error=1")
	}
	return sidecarproc.Command{Path: os.Args[0], Env: env}
}

func childCommand() sidecarproc.Command {
	if !raceEnabled || os.Getenv(childRaceEnv) == "1" {
		return testBinary()
	}
	dir, err := os.MkdirTemp("", "shardfence-child-")
	if err == nil {
		child.dir = dir
		path := filepath.Join(dir, "shardfence")
		// go test runs in the package's directory: "." is this command.
		out, berr := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
		if berr == nil {
			return sidecarproc.Command{Path: path}
		}
		err = fmt.Errorf("%v: %s", berr, out)
	}
	fmt.Fprintf(os.Stderr, "multi-process tests: no plain build of shardfence (%v); they start the race-built test binary\n", err)
	return testBinary()
}

// removeChild removes the plain build, if one was made.
func removeChild() {
	if child.dir != "" {
		_ = os.RemoveAll(child.dir)
	}
}
