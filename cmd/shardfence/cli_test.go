package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cli runs the binary's dispatch in-process with stdin, as a user would.
type cliResult struct {
	code           int
	stdout, stderr string
}

func cli(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut syncBuffer
	in := strings.NewReader(stdin)
	old := os.Stdin
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = in.WriteTo(w)
		w.Close()
	}()
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := dispatch(ctx, args, &out, &errOut)
	return cliResult{code, out.String(), errOut.String()}
}

// Every command: -h exits 0 and prints its flags to stdout (so `shardfence
// COMMAND -h | less` shows them), nothing to stderr; an unknown flag or a
// bad value is a usage error, exit 2, its message printed once on stderr.
func TestHelpAndUsageErrorsEverywhere(t *testing.T) {
	cmds := [][]string{{"serve"}, {"open"}, {"append"}, {"read"}, {"read-file"}, {"status"}, {"close"}, {"gc"}, {"inspect"}, {"settings"},
		{"handoff", "start"}, {"handoff", "adopt"}, {"handoff", "abort"}, {"conformance"}, {"master"}, {"demo"},
		{"bench", "store"}, {"bench", "e2e"}, {"bench", "translog"}, {"bench", "seal"}, {"bench", "recovery"}, {"bench", "master"},
		{"version"}, {"cost"}, {"master", "nodes"}, {"master", "assign"}, {"master", "watch"}, {"watch"}}
	for _, c := range cmds {
		name := strings.Join(c, " ")
		r := cli(t, "", append(c, "-h")...)
		if r.code != 0 || !strings.Contains(r.stdout, "-") || r.stderr != "" {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q (want the help on stdout alone)", name, r.code, r.stdout, r.stderr)
		}
		heads := 0
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "usage:") || strings.HasPrefix(line, "Usage of") {
				heads++
			}
		}
		if heads != 1 {
			t.Errorf("%s -h: usage printed %d times, want once:\n%s", name, heads, r.stdout)
		}
		// The flag package takes a `quoted` phrase of a usage text as the
		// flag's value name: "-fencing-mode shardfence settings".
		for _, line := range strings.Split(r.stdout, "\n") {
			head, _, _ := strings.Cut(line, "\t") // a one-letter flag's usage follows a tab
			if strings.HasPrefix(head, "  -") && len(strings.Fields(head)) > 2 {
				t.Errorf("%s -h: flag line %q names a value of more than one word (a backquote in its usage?)", name, line)
			}
		}
		r = cli(t, "", append(c, "--no-such-flag")...)
		if r.code != 2 || strings.Count(r.stderr, "no-such-flag") != 1 {
			t.Errorf("%s --no-such-flag: exit %d, want 2 with the message once; stderr:\n%s", name, r.code, r.stderr)
		}
		if !strings.HasSuffix(r.stderr, "\n") {
			t.Errorf("%s: stderr does not end with a newline: %q", name, r.stderr)
		}
	}
	if r := cli(t, "", "handoff", "-h"); r.code != 0 || !strings.Contains(r.stdout, "handoff start") {
		t.Errorf("handoff -h: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := cli(t, "", "handoff"); r.code != 2 {
		t.Errorf("handoff without a subcommand: exit %d", r.code)
	}
	for _, bad := range [][]string{
		{"status", "--shard", "s", "--timeout", "0s"},
		{"status", "--shard", "s", "--timeout", "-1s"},
		{"status", "--shard", "s", "--timeout", "forever"},
		{"status", "--shard", "s", "--addr", "127.0.0.1"},
		{"status", "--shard", "s", "--addr", "127.0.0.1:99999"},
		{"status", "--shard", "s", "--addr", "unix://"},
		{"open", "--shard", "s", "--term", "9007199254740992", "--allocation", "a"},
		{"open", "--shard", "s", "--term", "1", "--allocation", "a", "--lease-interval", "87600h"},
		{"read", "--shard", "s", "--from", "-1"},
		{"append", "--shard", "s", "--batch", "0"},
	} {
		if r := cli(t, "", bad...); r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, want 2 with one message; stderr %q", bad, r.code, r.stderr)
		}
	}
}

// Against a running sidecar: every output ends with a newline (so progress
// lines on stderr never run into it), an append with nothing to send fails,
// blank lines are skipped unless --empty-ops, and a sidecar that wants a
// token says which flag passes it.
func TestClientCommandsAgainstServe(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startServe(t, "--store", "file://"+filepath.Join(dir, "store"), "--listen", "127.0.0.1:0", "--auth-token-file", tok)
	r := cli(t, "", "status", "--addr", addr, "--shard", "s1")
	if r.code != 1 || !strings.Contains(r.stderr, "--auth-token-file") || !strings.Contains(r.stderr, "unauthenticated") {
		t.Fatalf("status without the token: exit %d, %q", r.code, r.stderr)
	}
	a := []string{"--addr", addr, "--auth-token-file", tok, "--shard", "s1"}
	with := func(args ...string) []string { return append(append([]string{args[0]}, a...), args[1:]...) }
	ends := func(what string, r cliResult) {
		t.Helper()
		if r.stdout != "" && !strings.HasSuffix(r.stdout, "\n") {
			t.Errorf("%s: stdout does not end with a newline: %q", what, r.stdout)
		}
		if r.stderr != "" && !strings.HasSuffix(r.stderr, "\n") {
			t.Errorf("%s: stderr does not end with a newline: %q", what, r.stderr)
		}
	}
	r = cli(t, "", with("open", "--term", "1", "--allocation", "a1")...)
	if r.code != 0 {
		t.Fatalf("open: %d %s", r.code, r.stderr)
	}
	ends("open", r)
	r = cli(t, "", with("append")...)
	if r.code != 2 || !strings.Contains(r.stderr, "no ops") {
		t.Errorf("append with empty stdin: exit %d, %q", r.code, r.stderr)
	}
	r = cli(t, "\n\n", with("append")...)
	if r.code != 2 || !strings.Contains(r.stderr, "no ops") {
		t.Errorf("append with only blank lines: exit %d, %q", r.code, r.stderr)
	}
	r = cli(t, "a\n\nb\n", with("append")...)
	if r.code != 0 || !strings.Contains(r.stdout, "acked 2 ops") || !strings.Contains(r.stderr, "skipped 1 blank line ") {
		t.Errorf("append with a blank line: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	ends("append", r)
	r = cli(t, "c\n\n", with("append", "--empty-ops")...)
	if r.code != 0 || !strings.Contains(r.stdout, "acked 2 ops") {
		t.Errorf("append --empty-ops: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", with("read")...)
	if r.code != 0 || r.stdout != "a\nb\nc\n\n" {
		t.Errorf("read: exit %d, %q", r.code, r.stdout)
	}
	ends("read", r)
	for _, c := range [][]string{with("status"), with("status", "--json"), with("gc", "--dry-run"), with("inspect"), with("read", "--json")} {
		r = cli(t, "", c...)
		if r.code != 0 {
			t.Errorf("%v: exit %d %s", c[0], r.code, r.stderr)
		}
		ends(strings.Join(c, " "), r)
	}
	r = cli(t, "", with("status")...)
	for _, want := range []string{"store health  ok", "last sync", "settings"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, "", with("close")...)
	ends("close", r)
	r = cli(t, "", with("status")...)
	if r.code != 1 || !strings.HasSuffix(r.stderr, "[not_open]\n") {
		t.Errorf("status after close: %d %q", r.code, r.stderr)
	}
}

// serve refuses a public --listen without a token before it opens the
// store (a file:// store would create its folder) or binds anything.
func TestServeRefusesAPublicListenBeforeTouchingTheStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never-created")
	r := cli(t, "", "serve", "--store", "file://"+dir, "--listen", "0.0.0.0:7499")
	if r.code != 2 || !strings.Contains(r.stderr, "--auth-token-file") {
		t.Fatalf("serve on 0.0.0.0 without a token: exit %d, %q", r.code, r.stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the store folder exists (%v): serve opened the store before refusing", err)
	}
	r = cli(t, "", "serve", "--store", "file://"+dir, "--lease-interval", "87600h")
	if r.code != 2 || !strings.Contains(r.stderr, "lease interval") {
		t.Fatalf("serve with an 87600h default lease: exit %d, %q", r.code, r.stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the store folder exists (%v) after a refused setting", err)
	}
}

// A secret in any position of a store URL (or of --addr) never reaches
// stdout or stderr of any command that takes one.
func TestNoCommandPrintsASecretOfAStoreURL(t *testing.T) {
	const secret = "SEKRIT9"
	// Nothing may reach a cloud credential chain: every URL either fails
	// before a request or names a local endpoint and static credentials.
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	local := "endpoint=http://127.0.0.1:1&access_key=AK&secret_key=x&region=x"
	// Refused before any request: every entry point runs these.
	refused := []string{
		"minio://AK:" + secret + "@[::1/bucket/p",
		"minio://host:" + secret + "/bucket",
		"s3://bucket/p?endpoint=http://AK:" + secret + "@127.0.0.1:1",
		"s3://bucket/p?endpoint=http://AK:" + secret + "@[::1",
		"s3://bucket/p?" + local + "&secret=" + secret + "%ZZ",
		"s3://bucket/p?" + local + ";key=" + secret,
		"gs://bucket/p?endpoint=http://u:" + secret + "@127.0.0.1:1",
		"azblob://acct/c/p?sig=" + secret,
		"azblob://acct/c/p?endpoint=http://u:" + secret + "@127.0.0.1:1",
		"file:///tmp/x?secret=" + secret + "\x01",
		"s3:AK:" + secret + "@bucket",
	}
	// Well formed, secrets inside, the store down: entry points with a
	// timeout run these (the retries against a closed port take a while).
	unreachable := []string{
		"minio://AK:" + secret + "@127.0.0.1:1/bucket/p?secure=false",
		"s3://bucket/p?endpoint=http://127.0.0.1:1&access_key=AK&secret_key=" + secret + "&region=x",
		"s3://bucket/p?" + local + "#" + secret,
	}
	all := func(u string) [][]string {
		return [][]string{
			{"serve", "--store", u, "--listen", "127.0.0.1:0", "--shutdown-timeout", "1s"},
			{"inspect", "--store", u, "--shard", "s", "--timeout", "3s"},
			{"settings", "--store", u, "--shard", "s"},
			{"conformance", "--store", u, "--timeout", "3s", "--only", "crud"},
			{"bench", "store", "--store", u, "--duration", "10ms", "--ops", "Get", "--clients", "1"},
			{"bench", "e2e", "--store", u, "--duration", "10ms"},
			{"bench", "recovery", "--url", u, "--checkpoint-mib", "1", "--translog-mib", "1"},
			{"demo", "--store", u},
		}
	}
	check := func(u string, args []string) {
		t.Helper()
		r := cli(t, "", args...)
		if r.code == 0 {
			t.Errorf("%s with a bad store URL exited 0", args[0])
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%s --store %q printed the secret:\n%s%s", strings.Join(args[:2], " "), u, r.stdout, r.stderr)
		}
	}
	for _, u := range refused {
		for _, args := range all(u) {
			check(u, args)
		}
	}
	for _, u := range unreachable {
		for _, args := range all(u)[1:4:4] {
			if args[0] != "settings" {
				check(u, args)
			}
		}
	}
	for _, addr := range []string{"http://u:" + secret + "@127.0.0.1:1", "https://" + secret + "@127.0.0.1:1"} {
		for _, c := range []string{"status", "gc", "close"} {
			r := cli(t, "", c, "--addr", addr, "--shard", "s", "--timeout", "2s")
			if r.code != 2 || strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%s --addr with user info: exit %d, %q", c, r.code, r.stdout+r.stderr)
			}
		}
	}
}
