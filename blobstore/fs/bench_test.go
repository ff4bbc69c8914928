//go:build unix

package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// benchBody is the size of a fence or small md object.
var benchBody = bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB

// fsyncWrite is the floor for a durable write of the same bytes: rewrite one
// existing file and fsync it, with no rename and no directory fsync.
func fsyncWrite(b *testing.B, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(benchBody); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func benchContainer(b *testing.B) testStore {
	c, err := openTest(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkWrite1KiB: each durable operation of the driver beside the
// fsynced-write floor, then the pieces a CAS is made of.
func BenchmarkWrite1KiB(b *testing.B) {
	b.Run("floor-fsync-write", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "floor")
		for b.Loop() {
			fsyncWrite(b, path)
		}
	})
	b.Run("CreateIfAbsent", func(b *testing.B) {
		c := benchContainer(b)
		i := 0
		for b.Loop() {
			if _, err := c.CreateIfAbsent(b.Context(), fmt.Sprintf("translog/md__%019d", i), benchBody); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("CompareAndSwap", func(b *testing.B) {
		c := benchContainer(b)
		tok, err := c.CreateIfAbsent(b.Context(), "fence/fence__1", benchBody)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if tok, err = c.CompareAndSwap(b.Context(), "fence/fence__1", tok, benchBody); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Put", func(b *testing.B) {
		c := benchContainer(b)
		for b.Loop() {
			if _, err := c.Put(b.Context(), "data/1.tlog", benchBody); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		c := benchContainer(b)
		if _, err := c.Put(b.Context(), "fence/fence__1", benchBody); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.Get(b.Context(), "fence/fence__1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The parts of a CAS, to show where its time goes.
	b.Run("part-temp-write-fdatasync", func(b *testing.B) {
		c := benchContainer(b)
		for b.Loop() {
			t, _, err := c.b.writeTemp(benchBody)
			if err != nil {
				b.Fatal(err)
			}
			t.discard()
		}
	})
	// What an in-place overwrite of already allocated blocks would cost:
	// the same bytes as the floor, but no metadata to commit.
	b.Run("ref-overwrite-fdatasync", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "preallocated"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := f.WriteAt(benchBody, 0); err != nil {
				b.Fatal(err)
			}
			if err := datasync(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("part-rename-dir-fsync", func(b *testing.B) {
		dir := b.TempDir()
		a, z := filepath.Join(dir, "a"), filepath.Join(dir, "z")
		if err := os.WriteFile(a, benchBody, 0o644); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := os.Rename(a, z); err != nil {
				b.Fatal(err)
			}
			if err := syncDir(dir); err != nil {
				b.Fatal(err)
			}
			a, z = z, a
		}
	})
	b.Run("part-rename-over-dir-fsync", func(b *testing.B) {
		dir := b.TempDir()
		a, z := filepath.Join(dir, "a"), filepath.Join(dir, "z")
		if err := os.WriteFile(z, benchBody, 0o644); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := os.WriteFile(a, benchBody, 0o644); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			f, err := os.Open(a)
			if err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
			b.StartTimer()
			if err := os.Rename(a, z); err != nil {
				b.Fatal(err)
			}
			if err := syncDir(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("part-key-lock", func(b *testing.B) {
		c := benchContainer(b)
		if _, err := c.Put(b.Context(), "fence/fence__1", benchBody); err != nil {
			b.Fatal(err)
		}
		p, err := c.b.pathOf("fence/fence__1")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, unlock, err := c.b.lockObject(b.Context(), "fence/fence__1", p, false)
			if err != nil {
				b.Fatal(err)
			}
			unlock()
		}
	})
}

// BenchmarkRatioToFsyncWrite alternates the floor write with a CAS, a
// create and a bare durable create in every iteration, so all four see the
// same disk state, and reports each one's cost relative to the floor. The
// bare create is the syscalls any create of a new name must make to be
// durable by POSIX rules, without the driver: open(O_CREAT|O_EXCL), the
// slot file's 8 KiB write, fdatasync, then fsync of the directory. Two
// sync calls where the floor makes one: raw/floor is how low a create
// that makes its own file durable can go on this disk. The driver's
// create logs instead (createlog.go): create/floor is its latency, with
// the log's checkpoints running in the background as in production, and
// create+ckpt/floor charges every checkpoint's whole duration to the
// creates as well, as if it were on their path.
func BenchmarkRatioToFsyncWrite(b *testing.B) {
	c := benchContainer(b)
	var ckpt time.Duration
	var ckptMu sync.Mutex
	c.b.onCheckpoint = func(d time.Duration) { ckptMu.Lock(); ckpt += d; ckptMu.Unlock() }
	floorPath := filepath.Join(b.TempDir(), "floor")
	tok, err := c.CreateIfAbsent(b.Context(), "fence/fence__1", benchBody)
	if err != nil {
		b.Fatal(err)
	}
	rawDir := b.TempDir()
	img := make([]byte, 2*slotSizeFor(len(benchBody)))
	var floor, cas, create, raw time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		fsyncWrite(b, floorPath)
		t1 := time.Now()
		if tok, err = c.CompareAndSwap(b.Context(), "fence/fence__1", tok, benchBody); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := c.CreateIfAbsent(b.Context(), fmt.Sprintf("translog/md__%019d", i), benchBody); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		bareCreate(b, filepath.Join(rawDir, fmt.Sprintf("md__%019d", i)), img)
		t4 := time.Now()
		floor += t1.Sub(t0)
		cas += t2.Sub(t1)
		create += t3.Sub(t2)
		raw += t4.Sub(t3)
		i++
	}
	n := float64(i)
	ckptMu.Lock()
	charged := create + ckpt
	ckptMu.Unlock()
	b.ReportMetric(float64(charged)/float64(floor), "create+ckpt/floor")
	b.ReportMetric(float64(floor.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(cas.Nanoseconds())/n, "cas-ns/op")
	b.ReportMetric(float64(create.Nanoseconds())/n, "create-ns/op")
	b.ReportMetric(float64(cas)/float64(floor), "cas/floor")
	b.ReportMetric(float64(create)/float64(floor), "create/floor")
	b.ReportMetric(float64(raw)/float64(floor), "raw/floor")
}

// bareCreate makes a new file durable at path as POSIX asks: the file's
// data synced, then its directory.
func bareCreate(b *testing.B, path string, img []byte) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		b.Fatal(err)
	}
	if err := datasync(f); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		b.Fatal(err)
	}
}
