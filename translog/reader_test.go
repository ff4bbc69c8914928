package translog

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

func TestReaderReportsBadGenerationsByKey(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) *rig {
		r := newRig(t, 1, Options{InlineLimit: 64})
		r.mustAppend("one")
		r.mustAppend("two")
		r.mustAppend(string(make([]byte, 200))) // gen 3 goes to a data object
		return r
	}
	put := func(t *testing.T, r *rig, key string, body []byte) {
		if _, err := r.inner.Put(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	otherShardMD := func() []byte {
		b, _ := EncodeMD(MD{Kind: KindSync, Shard: "other", Term: 1, Gen: 2, Allocation: "x", PrevGen: 1, Checksum: Checksum(nil), Inline: true})
		return b
	}
	cases := []struct {
		name    string
		corrupt func(t *testing.T, r *rig)
		key     string
		want    error
	}{
		{"missing md", func(t *testing.T, r *rig) { _ = r.inner.Delete(ctx, layout.MDKey(1, 2)) }, layout.MDKey(1, 2), ErrMissingGen},
		{"garbage md", func(t *testing.T, r *rig) { put(t, r, layout.MDKey(1, 2), []byte("garbage")) }, layout.MDKey(1, 2), fence.ErrCorruptBody},
		{"md of another shard", func(t *testing.T, r *rig) { put(t, r, layout.MDKey(1, 2), otherShardMD()) }, layout.MDKey(1, 2), fence.ErrForeignShard},
		{"poison", func(t *testing.T, r *rig) {
			b, _ := EncodePoison(shard, 1, 2, 5)
			put(t, r, layout.MDKey(1, 2), b)
		}, layout.MDKey(1, 2), ErrPoisoned},
		{"missing data object", func(t *testing.T, r *rig) { _ = r.inner.Delete(ctx, layout.DataKey(1, 3)) }, layout.DataKey(1, 3), fence.ErrCorruptBody},
		{"data object of another generation", func(t *testing.T, r *rig) {
			put(t, r, layout.DataKey(1, 3), EncodeData(shard, 1, 4, make([]byte, 210)))
		}, layout.DataKey(1, 3), fence.ErrForeignShard},
		{"data object with other ops", func(t *testing.T, r *rig) {
			put(t, r, layout.DataKey(1, 3), EncodeData(shard, 1, 3, EncodeOps([][]byte{make([]byte, 200)})[1:]))
		}, layout.DataKey(1, 3), fence.ErrCorruptBody},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := setup(t)
			c.corrupt(t, r)
			err := NewReader(r.inner, shard).Iterate(ctx, 1, 1, 3, func(Batch) error { return nil })
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			var be *fence.BodyError
			var te *Error
			switch {
			case errors.As(err, &be):
				if be.Key != c.key {
					t.Fatalf("error names key %q, want %q", be.Key, c.key)
				}
			case errors.As(err, &te):
				if te.Key != c.key || te.Shard != shard {
					t.Fatalf("error names key %q shard %q, want %q", te.Key, te.Shard, c.key)
				}
			default:
				t.Fatalf("error %T does not name a key", err)
			}
		})
	}
}

func TestReaderGens(t *testing.T) {
	r := newRig(t, 4, Options{StartGen: 9})
	for range 3 {
		r.mustAppend("x")
	}
	gens, err := NewReader(r.inner, shard).Gens(context.Background(), 4)
	if err != nil || fmt.Sprint(gens) != "[9 10 11]" {
		t.Fatalf("gens %v, %v", gens, err)
	}
}

// The fenced write path end to end on the filesystem driver: a successor
// fences the writer, and every acknowledged op is readable.
func TestFencedWritesOnFilesystem(t *testing.T) {
	ctx := context.Background()
	root, err := fs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store, err := blobstore.Sub(root, "shards/"+"idx-0")
	if err != nil {
		t.Fatal(err)
	}
	if err := blobstore.ProbePreconditions(ctx, store); err != nil {
		t.Fatal(err)
	}
	chain, err := fence.Claim(ctx, store, shard, 1, "a1")
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(ctx, store, chain, Options{InlineLimit: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	var acked []string
	for i := range 5 {
		op := fmt.Sprintf("op-%d-%s", i, string(make([]byte, i*100)))
		if _, err := w.Append(ctx, [][]byte{[]byte(op)}); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, op)
	}
	if _, err := fence.Claim(ctx, store, shard, 2, "a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, [][]byte{[]byte("late")}); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the successor's claim: %v", err)
	}
	var got []string
	if err := NewReader(store, shard).Iterate(ctx, 1, 1, 5, func(b Batch) error {
		for _, op := range b.Ops {
			got = append(got, string(op))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(acked) {
		t.Fatalf("read back %d ops, acknowledged %d", len(got), len(acked))
	}
}
