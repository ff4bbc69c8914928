package sidecar

import (
	"fmt"
	"strings"

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
		return fmt.Errorf("%w: shard id %q %s (use 1-%d characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-')", ErrInvalidArgument, trunc(id), why, MaxShardIDLen)
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
			return bad(fmt.Sprintf("has %q at byte %d", c, i))
		}
	}
	return nil
}

func trunc(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
