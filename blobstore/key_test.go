package blobstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
)

func TestValidateKey(t *testing.T) {
	good := []string{
		"a", "a/b", "fence/fence__9223372036854775806", "ünïcödé/键", "a..b", ".hidden", "a/.b", "x/...",
		strings.Repeat("k", blobstore.MaxKeyLen),
	}
	for _, k := range good {
		if err := blobstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	bad := map[string]string{
		"":                 "empty",
		"/abs":             "leading",
		"a/":               "trailing",
		"a//b":             "empty segment",
		"..":               `segment ".."`,
		"a/../b":           `segment ".."`,
		"../../etc/passwd": `segment ".."`,
		"./a":              `segment "."`,
		"a\x00b":           "control",
		"a\nb":             "control",
		"bad\xffutf8":      "UTF-8",
		strings.Repeat("k", blobstore.MaxKeyLen+1): "more than",
	}
	for k, want := range bad {
		err := blobstore.ValidateKey(k)
		if !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateKey(%q) = %q, want the reason to mention %q", k, err, want)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a/", "fence/fence__", "a/b/", "a/.x"} {
		if err := blobstore.ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/a", "a//", "../", "a/..", "a\x00"} {
		if err := blobstore.ValidatePrefix(p); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a/./b", "/", "\x00", "ü/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if blobstore.ValidateKey(key) != nil {
			return
		}
		// An accepted key never escapes a directory it is joined to.
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted key %q has segment %q", key, seg)
			}
		}
		if strings.ContainsRune(key, 0) || len(key) > blobstore.MaxKeyLen {
			t.Fatalf("accepted key %q breaks a rule", key)
		}
	})
}
