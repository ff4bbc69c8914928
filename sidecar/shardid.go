package sidecar

import (
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
)

// MaxShardIDLen bounds a shard id: it becomes a key prefix on every store.
const MaxShardIDLen = 128

// ValidateShardID checks that a shard id is a single safe path segment:
// 1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-',
// and not the store's probe folder. Anything else could escape the shard's
// prefix or clash with another shard's keys.
func ValidateShardID(id string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: shard id %q %s (use 1-%d characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-')", ErrInvalidArgument, clip(id), why, MaxShardIDLen)
	}
	switch {
	case id == "":
		return bad("is empty")
	case len(id) > MaxShardIDLen:
		return bad(fmt.Sprintf("is %d bytes long", len(id)))
	case id[0] == '.' || id[0] == '-':
		return bad("starts with '.' or '-'")
	case id+"/" == blobstore.ProbePrefix:
		return bad("is the store probe's folder")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("has %s at byte %d", byteName(c), i))
		}
	}
	return nil
}

// byteName shows one byte of a name: the character if it is printable
// ASCII, else its value (a byte of a multi-byte character is not a
// character of its own).
func byteName(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("0x%02X", c)
}
