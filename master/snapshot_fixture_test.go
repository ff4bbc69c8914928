package master

import (
	"bytes"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/master/internal/snapcodec"
)

// records splits a payload into its header and its records, sorted.
func records(t *testing.T, b []byte) (string, []string) {
	t.Helper()
	r := snapcodec.NewDecoder(b)
	r.Skip()
	head := string(b[:r.Pos()])
	var out []string
	for r.Err == nil && r.Pos() < len(b) {
		at := r.Pos()
		r.Skip()
		out = append(out, string(b[at:r.Pos()]))
	}
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	sort.Strings(out)
	return head, out
}

// A snapshot written now holds, byte for byte, the header and records of
// the fixture of its format for the state the fixture was taken from (in
// another order: objects follow the stripes, whose hash seed is random).
func TestSnapshotWriteMatchesFixtures(t *testing.T) {
	m, _ := snapMaster(t, Config{})
	for _, f := range []SnapshotFormat{SnapshotV1, SnapshotV2} {
		files, err := m.Freeze(nil, f).WriteFiles(t.TempDir(), "fixture-"+f.version())
		if err != nil {
			t.Fatal(err)
		}
		for _, fl := range files {
			got, err := os.ReadFile(fl.Path)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile("testdata/snapshot-" + f.version() + "/" + fl.Name)
			if err != nil {
				t.Fatal(err)
			}
			if fl.Name == SnapshotManifestFile {
				if !bytes.Equal(got, want) {
					t.Errorf("%s manifest %q, fixture %q", f.version(), got, want)
				}
				continue
			}
			gh, gr := records(t, got)
			wh, wr := records(t, want)
			if gh != wh || strings.Join(gr, "|") != strings.Join(wr, "|") {
				t.Errorf("%s %s: %x, fixture %x", f.version(), fl.Name, got, want)
			}
		}
	}
}
