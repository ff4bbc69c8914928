package seal_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/seal"
)

// A prefetch of a checkpoint that is not the first candidate is discarded:
// its files are removed and the candidate is hydrated instead; with no
// candidate at all, nothing it wrote stays.
func TestHydrateDiscardsAPrefetchOfAnotherCheckpoint(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	sh1 := openShard(t, store, 1, nil, "")
	write(t, sh1.Writer, "a")
	write(t, sh1.Writer, "b")
	checkpoint(t, store, sh1, 2, "a,b", 2)
	write(t, sh1.Writer, "c")
	checkpoint(t, store, sh1, 3, "a,b,c", 3)
	so := seal.Options{Backoff: fastRetry}
	for _, tc := range []struct {
		name  string
		cands []seal.CheckpointRef
		want  string // the state file after Hydrate; "" for none
	}{
		{"another candidate", []seal.CheckpointRef{{Term: 1, Gen: 2}}, "a,b"},
		{"no candidate", []seal.CheckpointRef{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var removed []string
			sink := &recordingSink{dir: dir, removed: &removed}
			pre := seal.PrefetchCheckpoint(ctx, store, shard, seal.CheckpointRef{Term: 1, Gen: 3}, dir, seal.HydrateOptions{Options: so, Into: sink})
			<-pre.Done()
			if got, err := os.ReadFile(filepath.Join(dir, "state")); err != nil || string(got) != "a,b,c" {
				t.Fatalf("prefetched state %q (%v), want gen 3's", got, err)
			}
			h, err := seal.Hydrate(ctx, store, shard, seal.Lineage{}, 3, dir, seal.HydrateOptions{Options: so, Candidates: tc.cands, Into: sink, Prefetch: pre})
			if err != nil {
				t.Fatal(err)
			}
			if len(removed) != 1 || removed[0] != "state" {
				t.Fatalf("removed %v, want the prefetched checkpoint's file", removed)
			}
			got, err := os.ReadFile(filepath.Join(dir, "state"))
			switch {
			case tc.want == "" && (err == nil || h.Manifest != nil):
				t.Fatalf("state %q, manifest %v: the discarded prefetch left its file", got, h.Manifest)
			case tc.want != "" && (err != nil || string(got) != tc.want || h.Manifest == nil || h.Manifest.Gen != 2):
				t.Fatalf("state %q (%v), manifest %+v; want %q from gen 2", got, err, h.Manifest, tc.want)
			}
		})
	}
}

// recordingSink writes files under dir and records what is removed.
type recordingSink struct {
	dir     string
	removed *[]string
}

func (s *recordingSink) WriteFile(name string, body []byte) (string, error) {
	p := filepath.Join(s.dir, filepath.FromSlash(name))
	return p, os.WriteFile(p, body, 0o644)
}

func (s *recordingSink) Remove(name string) error {
	*s.removed = append(*s.removed, name)
	return os.Remove(filepath.Join(s.dir, filepath.FromSlash(name)))
}
