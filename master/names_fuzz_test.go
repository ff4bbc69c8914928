package master

import (
	"errors"
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
