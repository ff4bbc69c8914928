//go:build unix

package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// openSim opens the store in dir through the power-cut model, with the
// create log's timer stretched so records stay in the log until the test
// checkpoints.
func openSim(t *testing.T, dir string, sim *simFS) testStore {
	t.Helper()
	b, err := openBucket(dir, &simHandle{fs: sim})
	if err != nil {
		t.Fatal(err)
	}
	b.checkpointAfter = time.Hour
	b.checkpointFull = time.Hour
	return testStore{Container: blobstore.New(b), b: b}
}

// openHeld opens the store in dir with the create log's timer stretched,
// so records stay in the log until the test acts.
func openHeld(t *testing.T, dir string) testStore {
	t.Helper()
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.b.checkpointAfter = time.Hour
	return c
}

// logRecords is how many records the store's create log holds.
func logRecords(t *testing.T, s testStore) int {
	t.Helper()
	unlock, err := s.b.log.lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	h, err := s.b.log.readHeader()
	if err != nil {
		t.Fatal(err)
	}
	recs, _, _, err := s.b.log.scan(h, h.head, h.headSeq, true)
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

func simDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A create is acknowledged once its record is in the log: a power cut
// right after it, before any checkpoint, loses the object's file (its
// writes and its directory entry were never synced), and opening the
// store brings it back from the record, with its token.
func TestLoggedCreateSurvivesAPowerCut(t *testing.T) {
	ctx := t.Context()
	dir := simDir(t)
	sim := newSimFS(dir, 1)
	c := openSim(t, dir, sim)
	tok, err := c.CreateIfAbsent(ctx, "fence/a", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	sim.mu.Lock()
	sim.crash()
	image := sim.image
	sim.mu.Unlock()
	if _, err := os.Stat(filepath.Join(image, objectsDir, "d.fence", "o.a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the power cut left the object's file (%v): the test needs it lost", err)
	}
	after, err := openTest(image)
	if err != nil {
		t.Fatal(err)
	}
	o, err := after.Get(ctx, "fence/a")
	if err != nil || string(o.Body) != "v1" || o.Token != tok {
		t.Fatalf("after the power cut: %v %q %s, want v1 %s", err, o.Body, o.Token, tok)
	}
	if _, err := after.CompareAndSwap(ctx, "fence/a", tok, []byte("v2")); err != nil {
		t.Fatalf("CAS with the create's token after recovery: %v", err)
	}
}

// One process creates a key, another deletes it while the create's record
// is still in the log: the delete must retire the record first, or the
// power cut after it brings the deleted object back.
func TestDeleteRetiresAnotherProcessesLoggedCreate(t *testing.T) {
	ctx := t.Context()
	dir := simDir(t)
	sim := newSimFS(dir, 2)
	a := openSim(t, dir, sim)
	b := openSim(t, dir, sim)
	if _, err := a.CreateIfAbsent(ctx, "ops/1", []byte("created by a")); err != nil {
		t.Fatal(err)
	}
	if held, err := b.b.log.holds("ops/1"); err != nil || !held {
		t.Fatalf("the create's record is not in the log (%v, %v): the test needs it there", held, err)
	}
	if err := b.Delete(ctx, "ops/1"); err != nil {
		t.Fatal(err)
	}
	if held, err := a.b.log.holds("ops/1"); err != nil || held {
		t.Fatalf("after the delete the log still holds the create (%v, %v)", held, err)
	}
	sim.mu.Lock()
	sim.crash()
	image := sim.image
	sim.mu.Unlock()
	after, err := openTest(image)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := after.Get(ctx, "ops/1"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the deleted object is back after the power cut: %q %v", o.Body, err)
	}
}

// A power cut can leave records beyond the log's end that were written
// but never acknowledged. Opening the store changes the salt, so when new
// records later reach the same positions with the same sequence numbers,
// a reader does not take the stale ones for part of the log.
func TestCreateLogNewSaltHidesStaleRecords(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	c := openHeld(t, dir)
	l := c.b.log
	unlock, err := l.lock()
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.readHeader()
	if err != nil {
		t.Fatal(err)
	}
	// What a power cut may leave: the record at the head lost, the one
	// after it (never acknowledged) on disk.
	body := []byte("never acknowledged")
	stale := encodeRecord(h.salt, h.headSeq+1, 0, "zombie", [tokenLen]byte{1}, body)
	if _, err := l.f.WriteAt(stale, l.physical(h.head+recordLen("first", body))); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The next process finds the log empty, then logs a create whose
	// record is as long as the lost one, and the power cut comes before
	// the checkpoint.
	c = openHeld(t, dir)
	if _, err := c.CreateIfAbsent(ctx, "first", body); err != nil {
		t.Fatal(err)
	}
	if _, err := openTest(dir); err != nil { // recovery, as after the cut
		t.Fatal(err)
	}
	after, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := after.Get(ctx, "zombie"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("a stale record was redone: %q %v", o.Body, err)
	}
	if o, err := after.Get(ctx, "first"); err != nil || string(o.Body) != string(body) {
		t.Fatalf("the logged create: %q %v", o.Body, err)
	}
}

// The log fills (a create that finds no room syncs its own file and starts
// a checkpoint) and wraps; every object stays readable, across a reopen
// too, and Close leaves the log empty.
func TestCreateLogFillsAndWraps(t *testing.T) {
	defer func(n int64) { newLogSize = n }(newLogSize)
	newLogSize = minLogSize
	ctx := t.Context()
	dir := t.TempDir()
	c := openHeld(t, dir)
	body := make([]byte, 9000)
	// A create that finds the ring full syncs its own file instead of a
	// record, so how many creates three laps take depends on how soon the
	// checkpoints free the ring on this machine: create until the log
	// wrapped three times (about 70 creates on a quiet machine).
	const most = 2000
	lapped := func() bool {
		l := c.b.log
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.tail >= 3*l.ring
	}
	toks := map[string]blobstore.Token{}
	for i := 0; !lapped(); i++ {
		if i == most {
			l := c.b.log
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("after %d creates the log reached position %d: it did not wrap three times (ring %d)", most, l.tail, l.ring)
		}
		k := fmt.Sprintf("ops/%04d", i)
		body[0] = byte(i)
		tok, err := c.CreateIfAbsent(ctx, k, body)
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		toks[k] = tok
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := logRecords(t, after); n != 0 {
		t.Fatalf("after Close the log holds %d records", n)
	}
	for k, tok := range toks {
		o, err := after.Get(ctx, k)
		if err != nil || o.Token != tok || len(o.Body) != len(body) {
			t.Fatalf("%s after the reopen: %v", k, err)
		}
	}
}

// A version 2 store (no create log) is upgraded on open: the log is made
// and FORMAT says 3, so older builds, which would not read the log after
// a power cut, refuse it.
func TestOpenUpgradesToTheCreateLog(t *testing.T) {
	dir := t.TempDir()
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateIfAbsent(t.Context(), "old", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, logName)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, formatName), []byte(formatLineV2), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, formatName)); string(b) != formatLine {
		t.Fatalf("FORMAT after the upgrade: %q", b)
	}
	if c.b.log == nil {
		t.Fatal("no create log after the upgrade")
	}
	if o, err := c.Get(t.Context(), "old"); err != nil || string(o.Body) != "kept" {
		t.Fatalf("object from before the upgrade: %q %v", o.Body, err)
	}
}

// A create of a new key links a pooled unnamed file at the key instead of
// allocating an inode on its path; with the pool off (no O_TMPFILE here),
// creates make their own files and behave the same.
func TestCreatesTakePooledFiles(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	if _, err := c.CreateIfAbsent(ctx, "first", []byte("starts the pool")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	pooled := func() int { c.b.pool.mu.Lock(); defer c.b.pool.mu.Unlock(); return len(c.b.pool.files) }
	for pooled() < poolSize && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := pooled(); n != poolSize {
		t.Fatalf("the pool holds %d files, want %d (off: %v)", n, poolSize, c.b.pool.off)
	}
	tok, err := c.CreateIfAbsent(ctx, "second", []byte("from the pool"))
	if err != nil {
		t.Fatal(err)
	}
	if n := pooled(); n != poolSize-1 {
		t.Fatalf("after a create the pool holds %d files, want %d", n, poolSize-1)
	}
	if _, err := c.CreateIfAbsent(ctx, "second", []byte("again")); !errors.Is(err, blobstore.ErrAlreadyExists) {
		t.Fatalf("second create of a key: %v", err)
	}
	if o, err := c.Get(ctx, "second"); err != nil || o.Token != tok || string(o.Body) != "from the pool" {
		t.Fatalf("the pooled create: %v", err)
	}

	c.b.pool.close()
	if _, err := c.CreateIfAbsent(ctx, "third", []byte("own file")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateIfAbsent(ctx, "third", []byte("again")); !errors.Is(err, blobstore.ErrAlreadyExists) {
		t.Fatalf("second create of a key without the pool: %v", err)
	}
	if o, err := c.Get(ctx, "third"); err != nil || string(o.Body) != "own file" {
		t.Fatalf("a create without the pool: %v", err)
	}
}

// Recovery redoes only lost creates: a key whose file was damaged since
// (here, by another program) is left for its reads to report, and the
// store still opens.
func TestRecoveryLeavesADamagedObjectToItsReads(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	c := openHeld(t, dir)
	if _, err := c.CreateIfAbsent(ctx, "fence/a", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if held, err := c.b.log.holds("fence/a"); err != nil || !held {
		t.Fatalf("the create's record is not in the log (%v, %v): the test needs it there", held, err)
	}
	p, err := c.b.pathOf("fence/a")
	if err != nil {
		t.Fatal(err)
	}
	damaged := append(append([]byte{}, magic[:]...), make([]byte, 3*slotAlign)...)
	if err := os.WriteFile(p.file, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	after, err := openTest(dir)
	if err != nil {
		t.Fatalf("open with a damaged object under a logged create: %v", err)
	}
	if _, err := after.Get(ctx, "fence/a"); !errors.Is(err, ErrCorruptObject) {
		t.Fatalf("read of the damaged object: %v, want ErrCorruptObject", err)
	}
}

// Closing the store while the create log's timer checkpoints waits for
// that checkpoint: it used to flock the log file while close closed it
// (the race detector caught it under a master stopped right after
// start).
func TestCloseWaitsForATimedCheckpoint(t *testing.T) {
	ctx := context.Background()
	for i := range 100 {
		c, err := openTest(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c.b.checkpointAfter = time.Duration(i%10) * 100 * time.Microsecond
		if _, err := c.CreateIfAbsent(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
