package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// unitFiles are the units under systemd/.
var unitFiles = []string{"shardfence-sidecar.service", "shardfence-master.service"}

// The units load cleanly: `systemd-analyze verify` reports nothing (it
// exits 0 on an unknown key or a bad value and only prints a warning, so
// any line naming a unit fails), their hardening scores as well exposed as
// at most 2.5 of 10 with `systemd-analyze security --offline`, and the
// sysusers file creates the user. The binary they run is this checkout's
// (verify checks ExecStart's program exists and is executable). Where
// systemd-analyze is not installed the test skips, saying so.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd): the units are not verified")
	}
	bin := buildBinaries(t)
	dir := t.TempDir()
	for _, u := range unitFiles {
		body, err := os.ReadFile(filepath.Join("systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), "ExecStart=/usr/local/bin/shardfence ") {
			t.Fatalf("%s: ExecStart does not run /usr/local/bin/shardfence", u)
		}
		body = []byte(strings.ReplaceAll(string(body), "/usr/local/bin/shardfence", bin.shardfence))
		if err := os.WriteFile(filepath.Join(dir, u), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range unitFiles {
		path := filepath.Join(dir, u)
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		var complaints []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, u) {
				complaints = append(complaints, line)
			}
		}
		if err != nil || len(complaints) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, strings.Join(complaints, "\n"))
		}
		out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=25", path).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze security %s: exposure above 2.5 (%v):\n%s", u, err, tail(string(out), 15))
		}
		for _, key := range []string{"ProtectSystem=strict", "ReadWritePaths=", "User=shardfence", "Restart=always", "NoNewPrivileges=yes", "LoadCredential=token:"} {
			if !strings.Contains(string(mustRead(t, path)), "\n"+key) {
				t.Errorf("%s lacks %s", u, key)
			}
		}
	}
	if sysusers, err := exec.LookPath("systemd-sysusers"); err == nil {
		conf, _ := filepath.Abs(filepath.Join("systemd", "shardfence.sysusers.conf"))
		out, err := exec.Command(sysusers, "--dry-run", "--root="+t.TempDir(), conf).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Creating user 'shardfence'") {
			t.Errorf("systemd-sysusers --dry-run %s: %v\n%s", conf, err, out)
		}
	}
}

// The example config files hold flags the commands take, and the units
// name the files the README installs.
func TestSystemdConfigFiles(t *testing.T) {
	bin := buildBinaries(t)
	for _, c := range []struct{ file, cmd string }{{"sidecar.yaml", "serve"}, {"master.yaml", "master"}} {
		known := helpFlags(t, bin.shardfence, c.cmd, "-h")
		var doc map[string]any
		if err := yaml.Unmarshal(mustRead(t, filepath.Join("systemd", c.file)), &doc); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for k := range doc {
			if !known[k] {
				t.Errorf("%s: key %q is not a flag of shardfence %s", c.file, k, c.cmd)
			}
		}
		unit := "shardfence-" + strings.TrimSuffix(c.file, ".yaml") + ".service"
		if !strings.Contains(string(mustRead(t, filepath.Join("systemd", unit))), "--config=/etc/shardfence/"+c.file) {
			t.Errorf("%s does not read /etc/shardfence/%s", unit, c.file)
		}
	}
	for _, env := range []string{"sidecar.env", "master.env"} {
		f, err := os.Open(filepath.Join("systemd", env))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if l != "" && !strings.HasPrefix(l, "#") && !strings.Contains(l, "=") {
				t.Errorf("%s: %q is not NAME=VALUE", env, l)
			}
		}
		f.Close()
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
