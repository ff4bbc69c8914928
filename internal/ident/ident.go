// Package ident checks the identifiers the protocol stores in its text
// bodies (shard, allocation, node, nonce) and holds the sentinel every
// invalid-argument error of the protocol packages wraps. Outside this
// module the same names are fence.ValidateID, fence.MaxIDLen and
// fence.ErrInvalidArgument.
package ident

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrInvalidArgument: a caller passed a value the protocol cannot use
// (term < 1, a separator inside an identifier, ...).
var ErrInvalidArgument = errors.New("invalid argument")

// MaxLen bounds shard, allocation and node identifiers.
const MaxLen = 256

// Validate checks an identifier stored in a body: non-empty unless
// optional, at most MaxLen bytes, valid UTF-8, no '|' separator, no
// control characters.
func Validate(what, s string, optional bool) error {
	switch {
	case s == "" && !optional:
		return fmt.Errorf("%w: empty %s", ErrInvalidArgument, what)
	case len(s) > MaxLen:
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidArgument, what, len(s), MaxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidArgument, what, s)
	}
	for _, r := range s {
		if r == '|' || r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s %q contains the separator or a control character %U", ErrInvalidArgument, what, s, r)
		}
	}
	return nil
}
