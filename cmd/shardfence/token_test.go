package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A token file is read with a bound and refused, with a clear error,
// when it holds what no client can send in an Authorization header: a
// 2.6 MB token, a NUL, a non-ASCII character, an inner space. serve and
// master both refuse to start on one, and /dev/zero is refused at once
// instead of read until the process is killed.
func TestTokenFilesAreBoundedAndHeaderSafe(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := write("big", strings.Repeat("t", 2600000))
	if _, err := readToken(big); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "more than 4096 bytes") {
		t.Fatalf("a 2.6 MB token: %v", err)
	}
	for name, body := range map[string]string{
		"nul":       "0123456789abcdef\x00ghij",
		"non-ascii": "0123456789abcdefé",
		"space":     "0123456789 abcdef",
		"cr":        "0123456789\rabcdef",
	} {
		_, err := readToken(write(name, body))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "cannot go in an Authorization header") {
			t.Errorf("a token with a %s: %v", name, err)
		}
	}
	if tok, err := readToken(write("ok", "\n  0123456789abcdef-_.~+/=  \n")); err != nil || tok != "0123456789abcdef-_.~+/=" {
		t.Errorf("a good token: %q, %v", tok, err)
	}
	if tok, err := readToken(write("max", strings.Repeat("x", 4096))); err != nil || len(tok) != 4096 {
		t.Errorf("a 4096-byte token: %d bytes, %v", len(tok), err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := readToken("/dev/zero"); !errors.Is(err, errUsage) {
			t.Errorf("/dev/zero: %v", err)
		}
	}
	nul := write("nul-file", "0123456789abcdef\x00")
	for _, cmd := range []func([]string) error{
		func(a []string) error {
			return runServe(t.Context(), append([]string{"--store", "file://" + dir}, a...), &syncBuffer{}, &syncBuffer{})
		},
		func(a []string) error { return runMaster(t.Context(), a, &syncBuffer{}, &syncBuffer{}) },
	} {
		for _, f := range []string{big, nul} {
			if err := cmd([]string{"--listen", "127.0.0.1:0", "--auth-token-file", f}); !errors.Is(err, errUsage) {
				t.Errorf("start with --auth-token-file %s: %v", filepath.Base(f), err)
			}
		}
	}
}
