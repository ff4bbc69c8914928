package blobstore

import (
	"net/url"
	"strings"
	"testing"
)

// The secrets FuzzRedact plants in a store URL: none may appear in what
// Redact returns, in clear or escaped.
const (
	fuzzSecret     = "Zq9sEcReTvAlUe7x"
	fuzzPassword   = "Pw4pAsSwOrDk2"
	fuzzSecretName = "token"
)

// FuzzRedact: whatever the store URL, Redact keeps the value of no query
// parameter off the harmless list, nor a password: the fuzzer's URL gets a
// user with a password and a secret parameter planted, and neither may
// come out unless it landed in the host or path. What comes out and parses has only REDACTED for the values
// of parameters off the list.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/prefix?region=eu-west-1&endpoint=http://minio:9000",
		"s3://bucket/p?endpoint=http://user:pw@minio:9000&secret_key=abc",
		"azblob://acct/c?account_key=abc&sas=sv%3D2020",
		"gs://b/p?credentials_file=/x.json#frag",
		"file:///data/x?cred=1;pass=2",
		"s3://b?%zz=1&x=%",
		"s3:opaque?x=1",
		"://nothing",
		"s3://ユーザー@バケット/パス?地域=東",
		"s3://b/p?region=a&region=b&Region=c&REGION=d",
		"s3://b/p?endpoint=minio:9000@evil",
		"",
	} {
		f.Add(s, 0, uint8(0))
	}
	f.Fuzz(func(t *testing.T, raw string, at int, how uint8) {
		if at < 0 || at > len(raw) {
			at = len(raw)
		}
		// Plant a password after the scheme, and a secret parameter (or a
		// harmless one holding a URL with a password) where the fuzzer says.
		if i := strings.Index(raw, "://"); i >= 0 && how&1 == 1 {
			raw = raw[:i+3] + "u:" + fuzzPassword + "@" + raw[i+3:]
			if at > i+3 {
				at += len("u:" + fuzzPassword + "@")
			}
		}
		sep := "&"
		if how&2 == 2 {
			sep = "?"
		}
		planted := sep + fuzzSecretName + "=" + fuzzSecret
		if how&4 == 4 {
			planted = sep + "endpoint=" + url.QueryEscape("http://u:"+fuzzPassword+"@h:1")
		}
		raw = raw[:at] + planted + raw[at:]
		out := Redact(raw)
		for _, secret := range []string{fuzzSecret, fuzzPassword} {
			if !mustHide(raw, secret) {
				continue
			}
			if strings.Contains(out, secret) {
				t.Fatalf("Redact(%q) = %q: shows %q", raw, out, secret)
			}
			if dec, err := url.QueryUnescape(out); err == nil && strings.Contains(dec, secret) {
				t.Fatalf("Redact(%q) = %q: shows %q escaped", raw, out, secret)
			}
		}
		u, err := url.Parse(out)
		if err != nil || u.RawQuery == "" || u.RawQuery == "REDACTED" {
			return
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return
		}
		for k, vs := range q {
			for _, v := range vs {
				if !harmlessOptions[k] && v != "REDACTED" && v != "" {
					t.Fatalf("Redact(%q) = %q: parameter %q shows %q", raw, out, k, v)
				}
			}
		}
	})
}

// mustHide reports whether secret is in a part of raw that Redact must not
// show (user info, fragment, opaque part, the value of a parameter off the
// harmless list, user info inside a URL-valued parameter, or a query that
// does not parse) and in no part it shows (host, path, parameter names,
// harmless values).
func mustHide(raw, secret string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return true
	}
	if strings.Contains(u.Host+u.Path+u.RawPath, secret) {
		return false
	}
	hide := strings.Contains(u.User.String(), secret) || strings.Contains(u.Fragment+u.RawFragment+u.Opaque, secret)
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return hide || strings.Contains(u.RawQuery, secret)
	}
	for k, vs := range q {
		if strings.Contains(k, secret) {
			return false
		}
		for _, v := range vs {
			switch {
			case !strings.Contains(v, secret):
			case !harmlessOptions[k]:
				hide = true
			case !strings.Contains(v, "@") && !strings.Contains(v, "://"):
				return false // a harmless option's value is shown
			default:
				// A URL-valued option is redacted as a URL of its own.
				inner, err := url.Parse(v)
				if err != nil || inner.Scheme == "" && strings.Contains(v, "@") || mustHide(v, secret) {
					hide = true
				} else {
					return false
				}
			}
		}
	}
	return hide
}
