package sidecarapi

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// AddrForms is what ParseAddr takes, for the messages that refuse one.
const AddrForms = "HOST:PORT, http(s)://HOST[:PORT] or unix:///path"

// Addr is a sidecar address as the client and the CLI dial it.
type Addr struct {
	Base   string // the API's base URL (http://sidecar for a unix socket)
	Socket string // the unix socket's path, if any
	Secure bool   // https
}

// ErrUserInfo: an http(s) address with user info; credentials travel as
// a bearer token, which each caller names in its own terms.
var ErrUserInfo = errors.New("user info is not read")

// ParseAddr reads a sidecar address: HOST:PORT, http(s)://HOST[:PORT] or
// unix:///path. A bare HOST without a port is refused (it would dial port
// 80), and so are user info (ErrUserInfo), a path, a query or a fragment,
// which nothing would read. The error says why, without the address's
// forms (AddrForms) or the caller's name for it.
func ParseAddr(addr string) (Addr, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if path == "" {
			return Addr{}, errors.New("unix:// needs a socket path")
		}
		return Addr{Base: "http://sidecar", Socket: path}, nil
	}
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		u, err := url.Parse(addr)
		switch {
		case err != nil:
			return Addr{}, errors.New("not a URL")
		case u.User != nil:
			return Addr{}, ErrUserInfo
		case u.Hostname() == "":
			return Addr{}, errors.New("no host")
		case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
			return Addr{}, errors.New("a path, query or fragment is not read")
		}
		return Addr{Base: u.Scheme + "://" + u.Host, Secure: u.Scheme == "https"}, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil && !strings.Contains(addr, ":") {
		return Addr{}, fmt.Errorf("%q has no port (it would dial port 80)", clip(addr))
	}
	if err != nil || host == "" || port == "" {
		return Addr{}, fmt.Errorf("%q has no HOST:PORT form", clip(addr))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Addr{}, fmt.Errorf("port %q is not 1..65535", clip(port))
	}
	return Addr{Base: "http://" + addr}, nil
}

// clip bounds what an error repeats of its input.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
