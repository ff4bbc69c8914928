package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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
func Open(ctx context.Context, rawURL string) (*Container, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadURL, Redact(rawURL), err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w %q: no scheme (want one of %s://...)", ErrBadURL, Redact(rawURL), strings.Join(Schemes(), "://, "))
	}
	registryMu.RLock()
	open, ok := registry[u.Scheme]
	registryMu.RUnlock()
	if !ok {
		known := Schemes()
		return nil, fmt.Errorf("%w %q: unknown scheme %q (registered: %s; import blobstore/drivers to register all drivers)", ErrBadURL, Redact(rawURL), u.Scheme, strings.Join(known, ", "))
	}
	return open(ctx, u)
}

// secretParams are query parameters whose values never appear in messages.
var secretParams = []string{"secret", "secret_key", "access_key", "key", "token", "password", "sas", "sig", "account_key"}

// Redact returns a store URL fit for logs and errors: no user info, and the
// values of credential-like query parameters replaced.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparseable store URL>"
	}
	return RedactURL(u)
}

// RedactURL is Redact for a parsed URL; u is not modified.
func RedactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("REDACTED")
	}
	q := c.Query()
	changed := false
	for k := range q {
		for _, s := range secretParams {
			if strings.EqualFold(k, s) {
				q.Set(k, "REDACTED")
				changed = true
			}
		}
	}
	if changed {
		c.RawQuery = q.Encode()
	}
	return c.String()
}
