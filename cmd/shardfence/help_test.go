package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// `shardfence -h` prints the commands to stdout and exits 0; with no
// command at all the same list goes to stderr with exit 2.
func TestTopLevelHelpGoesToStdout(t *testing.T) {
	for _, h := range []string{"-h", "--help", "help"} {
		code, out, errOut := runCmd(t, h)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: shardfence COMMAND") || !strings.Contains(out, "version") {
			t.Errorf("shardfence %s: exit %d, stdout %q, stderr %q", h, code, out, errOut)
		}
	}
	if code, out, errOut := runCmd(t); code != 2 || out != "" || !strings.Contains(errOut, "usage: shardfence COMMAND") {
		t.Errorf("shardfence without a command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// `shardfence master -h` names every admin subcommand, and an unknown one
// is a usage error that lists them instead of "unexpected argument".
func TestMasterHelpListsSubcommands(t *testing.T) {
	code, out, errOut := runCmd(t, "master", "-h")
	if code != 0 || errOut != "" {
		t.Fatalf("master -h: exit %d, stderr %q", code, errOut)
	}
	for _, sub := range []string{"promote", "status", "snapshot", "nodes", "shards", "watch", "assign", "unassign", "move", "rebalance", "drain", "undrain"} {
		if !isMasterSubcommand(sub) {
			t.Errorf("%s is not dispatched as a master subcommand", sub)
		}
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == sub {
				found = true
			}
		}
		if !found {
			t.Errorf("master -h does not list the subcommand %s:\n%s", sub, out)
		}
	}
	if !strings.Contains(out, "-election-timeout") {
		t.Errorf("master -h lost the master's own flags:\n%s", out)
	}
	code, _, errOut = runCmd(t, "master", "foo")
	if code != 2 || !strings.Contains(errOut, `unknown master subcommand "foo"`) || !strings.Contains(errOut, "undrain") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("master foo: exit %d, stderr %q; want 2 naming the subcommands", code, errOut)
	}
}

// version prints what was stamped with -ldflags, else "dev" and the VCS
// commit the go command recorded (or "unknown").
func TestVersion(t *testing.T) {
	code, out, errOut := runCmd(t, "version")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "shardfence "+version+" (commit ") || !strings.HasSuffix(out, ")\n") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	old, oldCommit := version, commit
	defer func() { version, commit = old, oldCommit }()
	version, commit = "v9.8.7", "0123abcd"
	code, out, _ = runCmd(t, "version", "--json")
	var got struct{ Version, Commit, Go, Platform string }
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Version != "v9.8.7" || got.Commit != "0123abcd" || got.Go == "" || got.Platform == "" {
		t.Errorf("version --json: exit %d, %q (%v)", code, out, err)
	}
	if code, _, _ := runCmd(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
