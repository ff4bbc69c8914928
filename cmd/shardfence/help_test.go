package main

import (
	"strings"
	"testing"
)

// `shardfence -h` prints the commands to stdout and exits 0; with no
// command at all the same list goes to stderr with exit 2.
func TestTopLevelHelpGoesToStdout(t *testing.T) {
	for _, h := range []string{"-h", "--help", "help"} {
		code, out, errOut := runCmd(t, h)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: shardfence COMMAND") {
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
	for _, sub := range []string{"promote", "status", "snapshot", "nodes", "shards", "watch", "assign", "unassign", "drain", "undrain"} {
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
