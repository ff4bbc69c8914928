package sidecarapi

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAddr(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Addr
		err  string // a part of the refusal; empty: accepted
	}{
		{in: "127.0.0.1:7400", want: Addr{Base: "http://127.0.0.1:7400"}},
		{in: "[::1]:7400", want: Addr{Base: "http://[::1]:7400"}},
		{in: "http://h:1/", want: Addr{Base: "http://h:1"}},
		{in: "https://h", want: Addr{Base: "https://h", Secure: true}},
		{in: "unix:///run/s.sock", want: Addr{Base: "http://sidecar", Socket: "/run/s.sock"}},
		{in: "unix://", err: "needs a socket path"},
		{in: "127.0.0.1", err: "no port"},
		{in: ":7400", err: "no HOST:PORT form"},
		{in: "h:99999", err: "not 1..65535"},
		{in: "h:x", err: "not 1..65535"},
		{in: "http://", err: "no host"},
		{in: "http://h/p", err: "path, query or fragment"},
		{in: "http://h/?q=1", err: "path, query or fragment"},
		{in: "http://u:p@h", err: ErrUserInfo.Error()},
		{in: strings.Repeat("a", 100), err: "..."},
	} {
		got, err := ParseAddr(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ParseAddr(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseAddr(%q) = %+v, %v; want an error with %q", c.in, got, err, c.err)
		}
	}
	if _, err := ParseAddr("https://user@h:1"); !errors.Is(err, ErrUserInfo) {
		t.Errorf("user info: %v, want ErrUserInfo", err)
	}
}
