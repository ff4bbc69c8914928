package blobstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, any driver accepts.
const MaxKeyLen = 1024

// ValidateKey is the one place key rules live. The portable Container
// applies it to every call's key before the call reaches middleware or a
// driver (then the driver's own limits, driver.KeyChecker), and Sub and
// NewAt to a prefix, so no driver sees a key that breaks it. A key is a '/'-separated path relative to the container:
// not empty, at most MaxKeyLen bytes, valid UTF-8 without NUL or other control
// characters, no leading or trailing '/', no empty, "." or ".." segment. The
// rules keep a key from escaping its container on any store, the filesystem
// included. The error wraps ErrInvalidKey and says which rule broke.
func ValidateKey(key string) error {
	if reason := keyProblem(key, false); reason != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, truncateKey(key), reason)
	}
	return nil
}

// ValidatePrefix checks a List prefix: the empty prefix is allowed, and a
// prefix may end in '/' or in a partial segment; otherwise the key rules hold.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if reason := keyProblem(prefix, true); reason != "" {
		return fmt.Errorf("%w prefix %q: %s", ErrInvalidKey, truncateKey(prefix), reason)
	}
	return nil
}

func keyProblem(key string, isPrefix bool) string {
	switch {
	case key == "":
		return "empty key"
	case len(key) > MaxKeyLen:
		return fmt.Sprintf("%d bytes, more than the %d allowed", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return "not valid UTF-8"
	case strings.HasPrefix(key, "/"):
		return "leading '/'"
	case !isPrefix && strings.HasSuffix(key, "/"):
		return "trailing '/'"
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("control character %U", r)
		}
	}
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		if isPrefix && last {
			// A prefix may stop inside a segment ("fence/fence__") or
			// right after a '/', but may not name "." or "..".
			if seg == "." || seg == ".." {
				return fmt.Sprintf("segment %q", seg)
			}
			continue
		}
		switch seg {
		case "":
			return "empty segment ('//')"
		case ".", "..":
			return fmt.Sprintf("segment %q", seg)
		}
	}
	return ""
}

func truncateKey(k string) string {
	if len(k) > 80 {
		return k[:80] + "..."
	}
	return k
}

// JoinKey joins key segments with '/'. It does not validate.
func JoinKey(parts ...string) string {
	return strings.Join(parts, "/")
}
