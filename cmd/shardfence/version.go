package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionSummary = "print the version and commit this binary was built from"

// version and commit are stamped at build time (`make build`, `make image`):
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc123" ./cmd/shardfence
//
// A plain `go build` or `go install` leaves version at "dev"; the commit
// then comes from the VCS stamp the go command records, when it did.
var (
	version = "dev"
	commit  = ""
)

// buildInfo is what `shardfence version` prints: the stamped version and
// commit, else what the go command recorded.
type buildInfo struct {
	Version, Commit, GoVersion, Platform string
	Modified                             bool
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if b.Commit != "" {
		return b
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stdout)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	b := readBuildInfo()
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	if *asJSON {
		_, err := fmt.Fprintf(stdout, "{\"version\":%q,\"commit\":%q,\"modified\":%t,\"go\":%q,\"platform\":%q}\n", b.Version, b.Commit, b.Modified, b.GoVersion, b.Platform)
		return err
	}
	_, err := fmt.Fprintf(stdout, "shardfence %s (commit %s, %s, %s)\n", b.Version, commit, b.GoVersion, b.Platform)
	return err
}
