package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Opener opens a container for a parsed store URL of its scheme.
type Opener func(ctx context.Context, u *url.URL) (*Container, error)

// ErrBadURL: a store URL that cannot be opened (unknown scheme, malformed).
var ErrBadURL = errors.New("bad store URL")

// The scheme registry is the one piece of package state: drivers add
// themselves from init, the way database/sql drivers do.
var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a driver available to Open under scheme. It panics on a
// duplicate, which is a programming error caught at start-up.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[scheme]; dup {
		panic("blobstore: scheme registered twice: " + scheme)
	}
	registry[scheme] = open
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the container a store URL names, for example
// file:///var/lib/shardfence, file://./data, mem://test, s3://bucket/prefix.
// Every error names the URL only in its redacted form (Redact).
func Open(ctx context.Context, rawURL string) (*Container, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %s", ErrBadURL, Redact(rawURL), parseProblem(err))
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w %s: no scheme (want one of %s://...)", ErrBadURL, RedactURL(u), strings.Join(Schemes(), "://, "))
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		// Query() would silently drop the pairs that do not parse: an
		// option (credentials, an endpoint) would be ignored.
		return nil, fmt.Errorf("%w %s: the query does not parse: %s", ErrBadURL, RedactURL(u), parseProblem(err))
	}
	registryMu.RLock()
	open, ok := registry[u.Scheme]
	registryMu.RUnlock()
	if !ok {
		known := Schemes()
		return nil, fmt.Errorf("%w %s: unknown scheme %q (registered: %s; import blobstore/drivers to register all drivers)", ErrBadURL, RedactURL(u), clip(u.Scheme, 32), strings.Join(known, ", "))
	}
	return open(ctx, u)
}

// quoted matches a quoted fragment of a parse error: net/url quotes the
// part of the URL it could not read (a port, a host, an escape), and that
// part may be a credential.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// parseProblem says why url.Parse refused a URL without repeating any part
// of the URL: a *url.Error carries the whole raw URL, secrets included.
func parseProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := quoted.ReplaceAllString(err.Error(), "(not shown)")
	return strings.TrimPrefix(msg, "net/url: ")
}

// harmlessOptions are the store URL options whose values may appear in
// messages: every driver's options that carry no secret. Any other
// parameter's value is redacted, whatever its name (a word list missed
// pass=, passphrase=, cred=, private=), so a driver that adds a harmless
// option adds it here to have it shown. URL-valued ones (endpoint=) still
// lose their user info.
var harmlessOptions = map[string]bool{
	"region": true, "endpoint": true, "path_style": true, "conditional_delete": true,
	"secure": true, "max_conditional_body": true,
}

// Redact returns a store URL fit for logs and errors: no user info, no
// fragment, the value of every query parameter that is not a known
// harmless option replaced, and user info inside URL-valued parameters
// (endpoint=) removed. A URL that
// does not parse shows only its scheme.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		scheme, _, found := strings.Cut(rawURL, "://")
		if !found || !validScheme(scheme) {
			return "<unparseable store URL>"
		}
		return scheme + "://<unparseable, not shown>"
	}
	return RedactURL(u)
}

// validScheme reports whether s is a URL scheme (RFC 3986), so it can be
// shown without showing anything else.
func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// RedactURL is Redact for a parsed URL; u is not modified.
func RedactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("REDACTED")
	}
	if c.Opaque != "" {
		c.Opaque = "REDACTED"
	}
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = "REDACTED", ""
	}
	if c.RawQuery != "" {
		q, err := url.ParseQuery(c.RawQuery)
		if err != nil {
			// A pair that does not parse is dropped by Query(): it could
			// be a secret, so none of the raw query is shown.
			c.RawQuery = "REDACTED"
		} else {
			for k, vs := range q {
				for i, v := range vs {
					switch {
					case !harmlessOptions[k]:
						vs[i] = "REDACTED"
					case strings.Contains(v, "@") || strings.Contains(v, "://"):
						vs[i] = redactValue(v)
					}
				}
			}
			c.RawQuery = q.Encode()
		}
	}
	out := c.String()
	if c.Scheme != "" && c.Opaque == "" && c.Host == "" && c.User == nil && c.Path == "" {
		// url.URL drops the "//" of a URL with nothing after it: show
		// "s3://", not "s3:".
		scheme := c.Scheme + ":"
		out = scheme + "//" + strings.TrimPrefix(out, scheme)
	}
	return out
}

// redactValue redacts a query value that is itself a URL (endpoint=).
func redactValue(v string) string {
	inner, err := url.Parse(v)
	if err != nil || inner.Scheme == "" && strings.Contains(v, "@") {
		return "REDACTED"
	}
	return RedactURL(inner)
}

// clip shortens s for a message.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
