package fleetplan

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/internal/ident"
)

// FuzzNodeAddr: a node's API address the master takes is an http(s) URL
// of a host without credentials, path, query or fragment, whatever the
// fuzzer sends; a refusal repeats at most 64 characters of it.
func FuzzNodeAddr(f *testing.F) {
	for _, s := range []string{"http://10.0.0.1:7400", "https://n1.example:443/", "http://u:p@h", "http://h/p", "http://h?x", "http://h#f", "ftp://h", "http://", "http://:80", "http://[::1]:1", "h:1", "http://h%zz", strings.Repeat("a", 2000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		err := ValidateNodeAddr(addr)
		if err != nil {
			if !errors.Is(err, ident.ErrInvalidArgument) || len(err.Error()) > 1024 {
				t.Fatalf("ValidateNodeAddr(%.64q) = %.200v", addr, err)
			}
			return
		}
		u, perr := url.Parse(addr)
		switch {
		case perr != nil:
			t.Fatalf("%q taken but does not parse: %v", addr, perr)
		case u.Scheme != "http" && u.Scheme != "https", u.Hostname() == "", u.User != nil,
			u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.Opaque != "":
			t.Fatalf("%q taken: %#v", addr, u)
		}
	})
}
