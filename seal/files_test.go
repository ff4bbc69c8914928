package seal_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// MemFiles is a valid fs.FS, directories implied by the names.
func TestMemFilesIsAFileSystem(t *testing.T) {
	m := seal.NewMemFiles()
	for name, body := range map[string]string{"state": "s", "meta/info": "v1", "meta/deep/x": "", "z": "last"} {
		if _, err := m.WriteFile(name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := fstest.TestFS(m, "state", "meta/info", "meta/deep/x", "z"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteFile("../x", nil); err == nil {
		t.Error("a name escaping the set was taken")
	}
}

// A checkpoint published from memory restores byte for byte, into memory
// or into a directory, with no local file on the publishing side.
func TestCheckpointFromMemoryRestoresIntoMemoryOrADirectory(t *testing.T) {
	forEach(t, func(t *testing.T, store *faulty.Container) {
		ctx := context.Background()
		sh1 := openShard(t, store.Container, 1, nil, "")
		write(t, sh1.Writer, "a")
		write(t, sh1.Writer, "b")
		src := seal.NewMemFiles()
		want := map[string]string{"state": "a,b", "meta/info": "v1", "empty": ""}
		for name, body := range want {
			if _, err := src.WriteFile(name, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		m, err := seal.PublishCheckpointFS(ctx, store.Container, sh1.Chain, 2, src, seal.PublishOptions{Options: seal.Options{Backoff: fastRetry}, NextSeqNo: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Files) != 3 || m.Bytes() != 5 {
			t.Fatalf("manifest %+v", m)
		}

		into := seal.NewMemFiles()
		o := recoveryOptions()
		o.Files = into
		sh2 := openWith(t, store.Container, 2, o)
		if sh2.Checkpoint == nil || sh2.Checkpoint.Gen != 2 {
			t.Fatalf("restored checkpoint %+v", sh2.Checkpoint)
		}
		for name, body := range want {
			got, err := into.ReadFile(name)
			if err != nil || string(got) != body {
				t.Errorf("memory restore of %s: %q, %v; want %q", name, got, err, body)
			}
		}

		dir := t.TempDir()
		o = recoveryOptions()
		o.Dir = dir
		openWith(t, store.Container, 3, o)
		for name, body := range want {
			got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
			if err != nil || string(got) != body {
				t.Errorf("directory restore of %s: %q, %v; want %q", name, got, err, body)
			}
		}
	})
}

func recoveryOptions() recovery.Options {
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry}
	o.Writer.Backoff = fastRetry
	o.Apply = func(context.Context, translog.Batch) error { return nil }
	return o
}

func openWith(t *testing.T, store *blobstore.Container, term int64, o recovery.Options) *recovery.Shard {
	t.Helper()
	sh, err := recovery.Open(context.Background(), store, shard, term, "a", o)
	if err != nil {
		t.Fatalf("open term %d: %v", term, err)
	}
	t.Cleanup(func() { _ = sh.Writer.Close(context.Background()) })
	return sh
}
