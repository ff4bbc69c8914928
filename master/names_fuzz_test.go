package master

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/sidecar"
)

// FuzzNames: the master takes exactly the shard ids a sidecar takes (but
// the store probe's folder, which only the sidecar refuses) and node names
// by the same rule, refuses the rest with ErrInvalidArgument, and repeats
// at most 64 characters of a name it refuses.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"", "orders-1", ".hidden", "-x", "a/b", "shardfence-probe", "日本語", "a\x00b", strings.Repeat("x", 128), strings.Repeat("x", 129), strings.Repeat("\xff", 4096)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		merr, serr := ValidateShardName(s), sidecar.ValidateShardID(s)
		if (merr == nil) != (serr == nil) && s+"/" != blobstore.ProbePrefix {
			t.Fatalf("shard id %q: the master says %v, the sidecar %v", s, merr, serr)
		}
		nerr := ValidateNodeName(s)
		if (nerr == nil) != (merr == nil) {
			t.Fatalf("%q: node name %v, shard id %v", s, nerr, merr)
		}
		for _, err := range []error{merr, nerr} {
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%q: %v is not ErrInvalidArgument", s, err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("%.64q: a message of %d bytes", s, len(err.Error()))
			}
		}
		if serr != nil && len(serr.Error()) > 1024 {
			t.Fatalf("%.64q: the sidecar's message is %d bytes", s, len(serr.Error()))
		}
	})
}

// FuzzNodeAddr: a node's API address the master takes is an http(s) URL
// of a host without credentials, path, query or fragment, whatever the
// fuzzer sends; a refusal repeats at most 64 characters of it.
func FuzzNodeAddr(f *testing.F) {
	for _, s := range []string{"http://10.0.0.1:7400", "https://n1.example:443/", "http://u:p@h", "http://h/p", "http://h?x", "http://h#f", "ftp://h", "http://", "http://:80", "http://[::1]:1", "h:1", "http://h%zz", strings.Repeat("a", 2000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		err := validNodeAddr(addr)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) || len(err.Error()) > 1024 {
				t.Fatalf("validNodeAddr(%.64q) = %.200v", addr, err)
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
