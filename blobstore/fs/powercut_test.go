//go:build unix

package fs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// simFS is a power-cut model of the filesystem under a store. Every change
// the driver makes goes to the real directory, so the live store behaves
// as it would, and is also recorded: a file's writes stay pending until a
// Datasync of the file makes them durable, a directory's entries (creates,
// renames, removes, mkdirs) until a SyncDir of it. At the crash point it
// builds the directory a power cut would leave: only durable entries,
// each file holding its durable bytes plus a random subset of its pending
// writes, each of those applied whole, not at all, or torn (a random
// subset of its 512-byte sectors). No fsync reaches the disk; the model is
// the durability.
type simFS struct {
	mu      sync.Mutex
	root    string
	rng     *rand.Rand
	live    map[string]*simNode
	durable map[string]map[string]*simNode // directory -> entry name -> node
	calls   int
	crashAt int    // the call that meets the power cut; 0: none
	image   string // where the crash left its directory
	crashed bool
	// noSyncFS makes SyncFS unsupported, as on systems without syncfs(2),
	// so the create log syncs file by file.
	noSyncFS bool
}

type simNode struct {
	dir     bool
	durable []byte
	pending []simOp
}

type simOp struct {
	trunc bool
	off   int64 // write offset, or the truncated size
	data  []byte
}

// simHandle is one process's view: killing it makes its calls fail with no
// effect from then on, as a process killed at that point.
type simHandle struct {
	fs     *simFS
	killAt int // the call at which this process dies; 0: never
	dead   bool
}

var errSimDown = errors.New("simulated crash: the call did not happen")

func newSimFS(root string, seed uint64) *simFS {
	return &simFS{root: root, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		live: map[string]*simNode{}, durable: map[string]map[string]*simNode{}}
}

// step counts a call that changes something and reports whether it may
// happen. A kill or a power cut due lands on the next Datasync (a crash
// falls on any other call one time in four), where a write was issued
// but not yet flushed: the moments that need the most care. Called with
// s.fs.mu held.
func (h *simHandle) step(sync bool) bool {
	s := h.fs
	if s.crashed || h.dead {
		return false
	}
	s.calls++
	if h.killAt != 0 && s.calls >= h.killAt && sync {
		h.dead = true
		return false
	}
	if s.crashAt != 0 && s.calls >= s.crashAt && (sync || s.rng.IntN(4) == 0) {
		s.crash()
		return false
	}
	return true
}

func (s *simFS) crash() {
	s.crashed = true
	img, err := os.MkdirTemp(filepath.Dir(s.root), "crash-image-")
	if err != nil {
		panic(err)
	}
	s.image = img
	var walk func(dir, to string)
	walk = func(dir, to string) {
		for name, n := range s.durable[dir] {
			p := filepath.Join(to, name)
			if n.dir {
				if err := os.Mkdir(p, 0o755); err != nil {
					panic(err)
				}
				walk(filepath.Join(dir, name), p)
				continue
			}
			if err := os.WriteFile(p, s.afterCrash(n), 0o644); err != nil {
				panic(err)
			}
		}
	}
	walk(s.root, img)
}

// afterCrash is what a file holds after the power cut.
func (s *simFS) afterCrash(n *simNode) []byte {
	b := bytes.Clone(n.durable)
	for _, op := range n.pending {
		switch s.rng.IntN(3) {
		case 0: // never reached the disk
		case 1:
			b = op.apply(b)
		case 2: // torn: some of its sectors
			if op.trunc {
				b = op.apply(b)
				continue
			}
			for o := int64(0); o < int64(len(op.data)); o += 512 {
				if s.rng.IntN(2) == 0 {
					end := min(o+512, int64(len(op.data)))
					b = simOp{off: op.off + o, data: op.data[o:end]}.apply(b)
				}
			}
		}
	}
	return b
}

func (op simOp) apply(b []byte) []byte {
	if op.trunc {
		if int64(len(b)) >= op.off {
			return b[:op.off]
		}
		return append(b, make([]byte, op.off-int64(len(b)))...)
	}
	if end := op.off + int64(len(op.data)); end > int64(len(b)) {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[op.off:], op.data)
	return b
}

func (h *simHandle) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	s := h.fs
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.step(false) {
		return nil, errSimDown
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	n := s.live[name]
	if n == nil {
		// Created now, or (not expected) a file the model never saw,
		// taken as durable.
		n = &simNode{}
		if flag&os.O_CREATE == 0 {
			n.durable, _ = os.ReadFile(name)
		}
		s.live[name] = n
	}
	return &simFile{File: f, h: h, n: n}, nil
}

func (h *simHandle) entry(do func() error, change func()) error {
	s := h.fs
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.step(false) {
		return errSimDown
	}
	if err := do(); err != nil {
		return err
	}
	change()
	return nil
}

func (h *simHandle) Rename(o, n string) error {
	return h.entry(func() error { return os.Rename(o, n) }, func() { h.fs.live[n] = h.fs.live[o]; delete(h.fs.live, o) })
}

func (h *simHandle) RenameNoReplace(o, n string) error {
	return h.entry(func() error { return renameNoReplace(o, n) }, func() { h.fs.live[n] = h.fs.live[o]; delete(h.fs.live, o) })
}

func (h *simHandle) Remove(name string) error {
	return h.entry(func() error { return os.Remove(name) }, func() { delete(h.fs.live, name) })
}

func (h *simHandle) Mkdir(name string, perm os.FileMode) error {
	return h.entry(func() error { return os.Mkdir(name, perm) }, func() { h.fs.live[name] = &simNode{dir: true} })
}

func (h *simHandle) SyncDir(dir string) error {
	return h.entry(func() error { return nil }, func() {
		m := map[string]*simNode{}
		for p, n := range h.fs.live {
			if filepath.Dir(p) == dir {
				m[filepath.Base(p)] = n
			}
		}
		h.fs.durable[dir] = m
	})
}

// SyncFS makes every file's writes and every directory's entries durable.
func (h *simHandle) SyncFS(string) error {
	s := h.fs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noSyncFS {
		return errors.ErrUnsupported
	}
	if !h.step(true) {
		return errSimDown
	}
	dirs := map[string]map[string]*simNode{s.root: {}}
	for p, n := range s.live {
		if n.dir {
			dirs[p] = map[string]*simNode{}
		}
	}
	for p, n := range s.live {
		for _, op := range n.pending {
			n.durable = op.apply(n.durable)
		}
		n.pending = nil
		if m, ok := dirs[filepath.Dir(p)]; ok {
			m[filepath.Base(p)] = n
		}
	}
	for d, m := range dirs {
		s.durable[d] = m
	}
	return nil
}

// inlinePool: the pool's files are made on the creating goroutine, so the
// model sees every call in an order the seed decides.
func (h *simHandle) inlinePool() bool { return true }

func (h *simHandle) OpenUnnamed(dir string) (file, error) {
	s := h.fs
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.step(false) {
		return nil, errSimDown
	}
	f, err := openUnnamed(dir)
	if err != nil {
		return nil, err
	}
	return &simFile{File: f, h: h, n: &simNode{}}, nil
}

func (h *simHandle) LinkUnnamed(f file, newpath string) error {
	n := f.(*simFile).n
	return h.entry(func() error { return linkUnnamed(f.Fd(), newpath) }, func() { h.fs.live[newpath] = n })
}

type simFile struct {
	*os.File
	h *simHandle
	n *simNode
}

func (f *simFile) change(do func() error, op simOp) error {
	s := f.h.fs
	s.mu.Lock()
	defer s.mu.Unlock()
	if !f.h.step(false) {
		return errSimDown
	}
	if err := do(); err != nil {
		return err
	}
	f.n.pending = append(f.n.pending, op)
	return nil
}

func (f *simFile) WriteAt(b []byte, off int64) (int, error) {
	err := f.change(func() error { _, err := f.File.WriteAt(b, off); return err }, simOp{off: off, data: bytes.Clone(b)})
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

func (f *simFile) Write(b []byte) (int, error) {
	off, err := f.File.Seek(0, 1)
	if err != nil {
		return 0, err
	}
	err = f.change(func() error { _, err := f.File.Write(b); return err }, simOp{off: off, data: bytes.Clone(b)})
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

func (f *simFile) Truncate(size int64) error {
	return f.change(func() error { return f.File.Truncate(size) }, simOp{trunc: true, off: size})
}

func (f *simFile) Datasync() error {
	s := f.h.fs
	s.mu.Lock()
	defer s.mu.Unlock()
	if !f.h.step(true) {
		return errSimDown
	}
	for _, op := range f.n.pending {
		f.n.durable = op.apply(f.n.durable)
	}
	f.n.pending = nil
	return nil
}

// simState is one state a key may be in: absent, or a body (with its
// token when the write that made it was acknowledged).
type simState struct {
	absent bool
	body   string
	tok    blobstore.Token
}

// TestPowerCut runs random writes on a few keys from two processes
// sharing the store through the power-cut model (with a small create log,
// so that it fills and wraps, and checkpoints at random points), sometimes
// kills one of them part way (a new one goes on from what it finds), then
// cuts the power at a random call, reopens the directory the cut left and
// checks every key: the state of the last acknowledged write on it, or of
// a write not acknowledged since; never a torn body, an older version, a
// deleted object back, or an error. Then every key must take a create or a
// CAS again.
func TestPowerCut(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 30
	}
	defer func(n int64) { newLogSize = n }(newLogSize)
	newLogSize = minLogSize
	for seed := range uint64(seeds) {
		powerCutOnce(t, seed, powerCutRun{keys: 6, ops: 200, window: 400, checkpoints: 40})
		if t.Failed() {
			return
		}
	}
}

// TestPowerCutCreateLogRing is TestPowerCut with many keys, so that most
// writes are creates, and a longer run: the create log fills (creates
// then sync their own files) and wraps around its ring many times before
// the cut.
func TestPowerCutCreateLogRing(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	defer func(n int64) { newLogSize = n }(newLogSize)
	newLogSize = minLogSize
	for seed := range uint64(seeds) {
		powerCutOnce(t, 1000+seed, powerCutRun{keys: 300, ops: 600, window: 5000, checkpoints: 300})
		if t.Failed() {
			return
		}
	}
}

// powerCutRun sizes one run: how many keys, writes, and calls the power
// cut may come after; one write in checkpoints is a log checkpoint instead.
type powerCutRun struct{ keys, ops, window, checkpoints int }

func powerCutOnce(t *testing.T, seed uint64, run powerCutRun) {
	ctx := t.Context()
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	sim := newSimFS(dir, seed)
	sim.noSyncFS = seed%2 == 1
	open := func() (testStore, error) {
		b, err := openBucket(dir, &simHandle{fs: sim})
		if err != nil {
			return testStore{}, err
		}
		// Checkpoints come as ops below, so a seed replays exactly.
		b.checkpointAfter = time.Hour
		b.checkpointFull = time.Hour
		return testStore{Container: blobstore.New(b), b: b}, nil
	}
	var stores [2]testStore
	for i := range stores {
		var err error
		if stores[i], err = open(); err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
	}
	sim.mu.Lock()
	start := sim.calls
	killAt := 0
	if rng.IntN(2) == 0 {
		// A process killed part way, then the power cut soon after,
		// while the next process writes on what the dead one left.
		killAt = start + 1 + rng.IntN(run.window*3/4)
		sim.crashAt = killAt + 1 + rng.IntN(40)
	} else {
		sim.crashAt = start + 1 + rng.IntN(run.window)
	}
	sim.mu.Unlock()
	stores[0].b.fsys.(*simHandle).killAt = killAt

	keys := []string{"fence/a", "fence/b", "md/1", "md/2", "ops/1", "ops/2"}
	for i := len(keys); i < run.keys; i++ {
		keys = append(keys, fmt.Sprintf("ops/%d", i))
	}
	keys = keys[:run.keys]
	allowed := map[string][]simState{}
	for _, k := range keys {
		allowed[k] = []simState{{absent: true}}
	}
	cur := func(k string) simState { a := allowed[k]; return a[len(a)-1] }
	for i := 0; i < run.ops; i++ {
		sim.mu.Lock()
		crashed := sim.crashed
		sim.mu.Unlock()
		if crashed {
			break
		}
		c := stores[rng.IntN(len(stores))]
		sim.mu.Lock()
		dead := stores[0].b.fsys.(*simHandle).dead
		sim.mu.Unlock()
		if dead {
			// A new process goes on from what it finds.
			var err error
			stores[0], err = open()
			if errors.Is(err, errSimDown) {
				break // the power cut came while it opened the store
			}
			if err != nil {
				t.Fatalf("seed %d: open after a kill: %v", seed, err)
			}
			c = stores[0]
			for _, k := range keys {
				o, err := c.Get(ctx, k)
				switch {
				case errors.Is(err, blobstore.ErrNotFound):
					allowed[k] = append(allowed[k], simState{absent: true})
				case err != nil:
					t.Fatalf("seed %d: after a kill, Get %s: %v", seed, k, err)
				default:
					allowed[k] = append(allowed[k], simState{body: string(o.Body), tok: o.Token})
				}
			}
			continue
		}
		k := keys[rng.IntN(len(keys))]
		body := fmt.Sprintf("%s v%d seed %d ", k, i, seed)
		switch rng.IntN(10) {
		case 0:
			body = strings.Repeat(body, 1+maxSlotBody/len(body)) // a single-version file
		case 1, 2:
			// Up to 50 KB: a few fill the test's create log.
			body = strings.Repeat(body, 1+rng.IntN(2000))
		}
		st := cur(k)
		var tok blobstore.Token
		var err error
		next := simState{body: body}
		if rng.IntN(run.checkpoints) == 0 {
			// A checkpoint of the create log, as its timer would run.
			if l, _ := c.b.createLog(); l != nil {
				if err := l.checkpoint(); err != nil && !errors.Is(err, errSimDown) {
					t.Fatalf("seed %d: checkpoint: %v", seed, err)
				}
			}
			continue
		}
		switch op := rng.IntN(10); {
		case st.absent || st.tok == "" && op < 6:
			tok, err = c.CreateIfAbsent(ctx, k, []byte(body))
			if !st.absent && errors.Is(err, blobstore.ErrAlreadyExists) {
				continue
			}
		case op < 6:
			tok, err = c.CompareAndSwap(ctx, k, st.tok, []byte(body))
		case op < 8:
			tok, err = c.Put(ctx, k, []byte(body))
		default:
			err = c.Delete(ctx, k)
			next = simState{absent: true}
		}
		next.tok = tok
		if err != nil {
			if !errors.Is(err, errSimDown) {
				t.Fatalf("seed %d: op %d on %s: %v", seed, i, k, err)
			}
			next.tok = ""
			allowed[k] = append(allowed[k], next)
			continue
		}
		allowed[k] = []simState{next}
	}
	sim.mu.Lock()
	if !sim.crashed {
		sim.crash()
	}
	image := sim.image
	sim.mu.Unlock()

	after, err := openTest(image)
	if err != nil {
		t.Fatalf("seed %d: opening what the power cut left: %v", seed, err)
	}
	for _, k := range keys {
		o, err := after.Get(ctx, k)
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("seed %d: key %s after the power cut: %v", seed, k, err)
		}
		ok := false
		for _, a := range allowed[k] {
			if err != nil && a.absent || err == nil && !a.absent && string(o.Body) == a.body && (a.tok == "" || a.tok == o.Token) {
				ok = true
			}
		}
		if !ok {
			got := "absent"
			if err == nil {
				got = fmt.Sprintf("%.40q (%d bytes) %s", o.Body, len(o.Body), o.Token)
			}
			t.Fatalf("seed %d: key %s after the power cut is %s; allowed: the last acknowledged state then unacknowledged ones: %+.60v", seed, k, got, allowed[k])
		}
		if err != nil {
			if _, err := after.CreateIfAbsent(ctx, k, []byte("again")); err != nil {
				t.Fatalf("seed %d: create of absent %s after the power cut: %v", seed, k, err)
			}
		} else if _, err := after.CompareAndSwap(ctx, k, o.Token, []byte("again")); err != nil {
			t.Fatalf("seed %d: CAS of %s after the power cut: %v", seed, k, err)
		}
	}
}
