//go:build unix

// Package fs is the filesystem blobstore driver: one directory is one
// container, safe to share between processes on one host. It relies on the
// kernel's flock and on atomic rename and link, so every process sharing a
// directory must run on the same host; a network filesystem mounted by
// several hosts is not supported.
//
// URL forms: file:///abs/dir and file://./rel/dir (relative to the working
// directory). The directory is created if missing.
//
// Layout under the directory:
//
//	FORMAT                 layout name and version ("shardfence-fs 2")
//	objects/               the key tree: segment s of a key is the directory
//	                       "d.s" when more segments follow, the file "o.s" when
//	                       it is the last one, so keys "a" and "a/b" coexist
//	locks/                 lock files of layout version 1; unused since layout 2
//	tmp/                   temporary files of writes in flight
//
// An object is one file in one of two formats (docs/ARCHITECTURE.md, "The
// filesystem driver", has the argument in full):
//
//   - A slot file (slots.go) holds a body of at most 64 KiB: two slots,
//     each a sequence number, a random 128-bit token, the body and a
//     CRC-32C. A CAS or Put writes the next sequence into the slot that
//     does not hold the current version, in place, and fdatasyncs; a
//     create writes a new file at the key, fdatasyncs it and fsyncs the
//     directory. The version is the valid slot with the higher sequence.
//   - A single-version file (object.go) holds a larger body, and every
//     object written by layout version 1: a header (magic, token, length,
//     CRC-32C) and the body, never changed in place, written to a fsynced
//     temporary file renamed over the key, then the directory fsynced.
//
// A token is random per version, so it is never reused for other content,
// across deletes, processes and restarts.
//
// Every write and delete holds the key's lock: an in-process lock, then an
// exclusive flock of the key's own file (created empty by a writer that
// may create; a file with no valid slot reads as absent). Readers take no
// lock when both slots of a slot file check out, else a shared flock.
// Directories are created on demand and kept when they become empty:
// removing them would race with a writer in another process that has just
// made its entry durable.
package fs

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

func init() {
	blobstore.Register("file", openURL)
}

// ErrCorruptObject: an object file does not hold a valid header and body
// (truncated, overwritten by another program, or a disk fault). Restore the
// key from a backup or delete it.
var ErrCorruptObject = errors.New("corrupt object file")

// ErrBadLayout: the directory holds something that is not this driver's
// layout, or a layout version this build does not know.
var ErrBadLayout = errors.New("directory is not a usable filesystem store")

const (
	formatName = "FORMAT"
	formatLine = "shardfence-fs 3\n"
	// formatLineV1 is the layout before slot files, formatLineV2 the one
	// before the create log. This build reads their objects as they are;
	// Open rewrites FORMAT to version 3, so builds that would not read the
	// create log after a power cut refuse the store.
	formatLineV1 = "shardfence-fs 1\n"
	formatLineV2 = "shardfence-fs 2\n"
	objectsDir   = "objects"
	locksDir     = "locks"
	tmpDir       = "tmp"
)

// Bucket is the filesystem driver: one directory.
type Bucket struct {
	root    string // absolute
	objects string
	locks   string
	tmp     string

	// maxSegment is the longest key segment the filesystem can name.
	maxSegment int

	// durableDirs holds directories of the object tree whose entries, and
	// their ancestors' entries, this process has fsynced into their parents.
	// Directories are never removed, so an entry once durable stays durable
	// and each directory costs its parent fsyncs once per process.
	durableDirs sync.Map

	keyLocks keyLocks

	// durable remembers the versions this process made durable (slots.go).
	durable durableTokens

	// fsys is where every change to the store goes: the kernel, or a test's
	// power-cut model.
	fsys fileSystem

	// pool holds empty files made ahead for new keys (pool.go).
	pool *filePool

	// log is the create log (createlog.go); nil while the store has none
	// (its device was too full to make one), when creates sync in place.
	logMu sync.Mutex
	log   *createLog
	// checkpointAfter is how long a logged create waits for its
	// checkpoint, checkpointFull how long when the log was full (tests
	// stretch both to keep records in the log).
	checkpointAfter, checkpointFull time.Duration

	// onCheckpoint, when set by benchmarks, is told how long each
	// checkpoint of the create log took.
	onCheckpoint func(time.Duration)

	// hook, when set by tests, is called at named points of a write so a
	// test can stop or kill a writer there.
	hook func(stage string)
}

var (
	_ driver.Bucket      = (*Bucket)(nil)
	_ driver.KeyChecker  = (*Bucket)(nil)
	_ driver.RangeReader = (*Bucket)(nil)
)

func openURL(ctx context.Context, u *url.URL) (*blobstore.Container, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := dirFromURL(u)
	if err != nil {
		return nil, err
	}
	return Open(dir)
}

// dirFromURL accepts file:///abs/dir, file://localhost/abs/dir and
// file://./rel/dir.
func dirFromURL(u *url.URL) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s (want file:///absolute/dir or file://./relative/dir)", blobstore.ErrBadURL, blobstore.RedactURL(u), why)
	}
	if u.Opaque != "" {
		return "", bad("no '//' after the scheme")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", bad("query and fragment are not used by the filesystem driver")
	}
	switch u.Host {
	case "", "localhost":
		if u.Path == "" || u.Path == "/" {
			return "", bad("no directory")
		}
		return u.Path, nil
	case ".":
		return "." + u.Path, nil
	default:
		return "", bad(fmt.Sprintf("host %q is not a local directory", u.Host))
	}
}

// Open opens (creating if needed) the store in dir as a container.
func Open(dir string) (*blobstore.Container, error) {
	b, err := OpenBucket(dir)
	if err != nil {
		return nil, err
	}
	return blobstore.New(b), nil
}

// OpenBucket opens (creating if needed) the store in dir, then removes
// temporary files left by writers that died.
func OpenBucket(dir string) (*Bucket, error) { return openBucket(dir, osFS{}) }

func openBucket(dir string, fsys fileSystem) (*Bucket, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory name", ErrBadLayout)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem store %q: %w", dir, err)
	}
	c := &Bucket{
		root:    abs,
		objects: filepath.Join(abs, objectsDir),
		locks:   filepath.Join(abs, locksDir),
		tmp:     filepath.Join(abs, tmpDir),
		fsys:    fsys,

		checkpointAfter: logCheckpoint,
	}
	c.pool = newFilePool(c)
	if err := c.initLayout(); err != nil {
		return nil, fmt.Errorf("opening filesystem store %s: %w", c, err)
	}
	c.maxSegment = nameMaxOf(c.objects) - len(objPrefix)
	if err := c.probeNames(); err != nil {
		return nil, fmt.Errorf("opening filesystem store %s: %w", c, err)
	}
	if _, err := c.RemoveStaleTemp(context.Background()); err != nil {
		return nil, fmt.Errorf("opening filesystem store %s: %w", c, err)
	}
	if c.log, err = c.openLog(); err != nil {
		return nil, fmt.Errorf("opening filesystem store %s: %w", c, err)
	}
	return c, nil
}

// createLog returns the store's create log, attaching one that another
// process made since this one opened the store; nil when there is none.
func (c *Bucket) createLog() (*createLog, error) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if c.log != nil {
		return c.log, nil
	}
	if _, err := os.Stat(c.logPath()); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	l, err := c.openLog()
	if err != nil {
		return nil, blobstore.Unavailable(err)
	}
	c.log = l
	return l, nil
}

func (c *Bucket) initLayout() error {
	if err := mkdirAllDurable(c.root); err != nil {
		return err
	}
	if err := c.checkFormat(); errors.Is(err, os.ErrNotExist) {
		if err := c.checkOnlyOurs(); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	created := false
	for _, d := range []string{c.objects, c.locks, c.tmp} {
		err := c.fsys.Mkdir(d, 0o755)
		switch {
		case err == nil:
			created = true
		case errors.Is(err, os.ErrExist):
			if fi, serr := os.Stat(d); serr != nil {
				return serr
			} else if !fi.IsDir() {
				return fmt.Errorf("%w: %s is not a directory", ErrBadLayout, d)
			}
		default:
			return err
		}
	}
	if created {
		if err := c.fsys.SyncDir(c.root); err != nil {
			return err
		}
	}
	c.durableDirs.Store(c.objects, struct{}{})
	if err := c.makeLog(); err != nil && !errors.Is(err, errNoRoomForLog) && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		// A device too full for the log leaves the store without one:
		// creates then sync in place.
		return fmt.Errorf("making the create log: %w", err)
	}
	return c.writeFormat()
}

// checkFormat reads FORMAT; a missing file is an error matching
// os.ErrNotExist.
func (c *Bucket) checkFormat() error {
	b, err := os.ReadFile(filepath.Join(c.root, formatName))
	if err != nil {
		return err
	}
	if string(b) != formatLine && string(b) != formatLineV2 && string(b) != formatLineV1 {
		return fmt.Errorf("%w: %s says %q, this build reads %q", ErrBadLayout, formatName, strings.TrimSpace(string(b)), strings.TrimSpace(formatLine))
	}
	return nil
}

// checkOnlyOurs refuses to turn a directory that holds other files into a
// store (a mistyped URL pointing at a home directory, say). Subdirectories
// of the layout are allowed: an earlier Open may have stopped before FORMAT
// was written; so is a FORMAT that another process's first Open wrote
// after this one found none.
func (c *Bucket) checkOnlyOurs() error {
	d, err := os.Open(c.root)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == formatName {
			// A concurrent first Open wrote it since checkFormat ran
			// (it appears whole: a no-replace rename): check it.
			return c.checkFormat()
		}
		if n != objectsDir && n != locksDir && n != tmpDir && n != logName {
			return fmt.Errorf("%w: the directory holds %q but no %s file, so it is not a store; use a new or empty directory", ErrBadLayout, n, formatName)
		}
	}
	return nil
}

// writeFormat creates FORMAT once, or upgrades a version 1 or 2 FORMAT
// (whose objects this build reads as they are) to version 3; concurrent openers
// race through the same renames objects use, writing the same bytes.
func (c *Bucket) writeFormat() error {
	path := filepath.Join(c.root, formatName)
	upgrade := false
	if b, err := os.ReadFile(path); err == nil {
		if string(b) == formatLine {
			return nil
		}
		upgrade = true
	}
	t, err := c.createTemp()
	if err != nil {
		return err
	}
	defer t.discard()
	if _, err := t.f.Write([]byte(formatLine)); err != nil {
		return err
	}
	if err := t.f.Datasync(); err != nil {
		return err
	}
	if upgrade {
		err = c.fsys.Rename(t.path, path)
	} else {
		err = c.fsys.RenameNoReplace(t.path, path)
	}
	switch {
	case err == nil:
		t.published = true
	case !errors.Is(err, os.ErrExist): // another opener wrote it first
		return err
	}
	if err := c.fsys.SyncDir(c.root); err != nil {
		return err
	}
	return c.checkFormat()
}

// probeNames refuses filesystems that fold case or normalize Unicode: on
// them two distinct keys would share one file.
func (c *Bucket) probeNames() error {
	pairs := [][2]string{
		{"probe-case-x", "probe-case-X"},
		{"probe-nfc-\u00e9", "probe-nfc-e\u0301"},
	}
	for _, p := range pairs {
		t, err := c.createTempNamed(p[0])
		if err != nil {
			return err
		}
		_, serr := os.Lstat(filepath.Join(filepath.Dir(t.path), strings.Replace(filepath.Base(t.path), p[0], p[1], 1)))
		t.discard()
		if serr == nil {
			return fmt.Errorf("%w: the filesystem treats %q and %q as one name, so distinct keys would collide; use a case-sensitive, non-normalizing filesystem", ErrBadLayout, p[0], p[1])
		}
	}
	return nil
}

// String names the store as a file URL.
func (c *Bucket) String() string { return "file://" + c.root }

// Dir is the store's absolute directory.
func (c *Bucket) Dir() string { return c.root }

// Capabilities: every conditional operation is enforced, across processes.
func (c *Bucket) Capabilities() driver.Capabilities {
	return driver.Capabilities{ConditionalCreate: true, ConditionalUpdate: true, ConditionalDelete: true}
}

// Close releases nothing: the bucket holds no descriptors between calls.
func (c *Bucket) Close() error {
	c.pool.close()
	c.logMu.Lock()
	l := c.log
	c.logMu.Unlock()
	if l == nil {
		return nil
	}
	return l.close()
}

// CheckKey refuses a key with a segment too long for one directory entry.
func (c *Bucket) CheckKey(key string) error {
	_, err := c.pathOf(key)
	return err
}

// Classify types a failure this driver did not type where it happened: a
// missing file is ErrNotFound, a corrupt one stays ErrCorruptObject, a
// context that ended while waiting for a lock stays a definite failure, and
// other I/O errors failed before any effect.
func (c *Bucket) Classify(_ driver.Op, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return blobstore.ErrNotFound
	case isNameTooLong(err):
		return mapNameErr(err)
	case errors.Is(err, ErrCorruptObject), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return blobstore.Unavailable(err)
	}
}

// Get reads one whole version of the object (slots.go says how a read of a
// slot file is kept consistent without a lock).
func (c *Bucket) Get(ctx context.Context, key string) (driver.Object, error) {
	p, err := c.pathOf(key)
	if err != nil {
		return driver.Object{}, err
	}
	v, err := c.readVersion(ctx, p.file, true, false)
	if err != nil {
		return driver.Object{}, err
	}
	return driver.Object{Body: v.body, Token: v.tok}, nil
}

// NewRangeReader streams a range of one version. A slot file (a small
// object) changes in place, so its version is read whole into memory, as
// Get reads it, and the range is served from there. A large object is a
// single-version file, never changed in place, that a replace or delete
// only renames over or unlinks: the stream keeps the open file and serves
// the range by pread from it, so it keeps the version it started on to its
// end. Cost for a large object: one open, one fstat and one 32-byte header
// pread before the stream; the descriptor is held until Close.
func (c *Bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	p, err := c.pathOf(key)
	if err != nil {
		return nil, driver.Attrs{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Attrs{}, err
	}
	v, err := c.readVersion(ctx, p.file, false, true)
	if err != nil {
		return nil, driver.Attrs{}, err // a missing key, pinned or not: ErrNotFound by Classify
	}
	closeFile := func() error { return nil }
	if v.f != nil {
		closeFile = v.f.Close
	}
	if pre.IfMatch != "" && v.tok != pre.IfMatch {
		err = fmt.Errorf("%w: stored token %s, pinned %s", blobstore.ErrPreconditionFailed, v.tok, pre.IfMatch)
	}
	var end int64
	if err == nil {
		end, err = driver.Range(v.size, offset, length, blobstore.ErrInvalidRange)
	}
	if err != nil {
		_ = closeFile()
		return nil, driver.Attrs{}, err
	}
	attrs := driver.Attrs{Size: v.size, Token: v.tok}
	if v.f == nil {
		return driver.ContextReader(ctx, sliceReader(v.body, offset, end), nil), attrs, nil
	}
	body := &bodyReader{
		r:      io.NewSectionReader(v.f, headerLen+offset, end-offset),
		left:   end - offset,
		path:   p.file,
		verify: offset == 0 && end == v.size,
		sum:    v.sum,
	}
	return driver.ContextReader(ctx, body, closeFile), attrs, nil
}

// Stat reads the object's token and size.
func (c *Bucket) Stat(ctx context.Context, key string) (driver.Attrs, error) {
	p, err := c.pathOf(key)
	if err != nil {
		return driver.Attrs{}, err
	}
	v, err := c.readVersion(ctx, p.file, false, false)
	if err != nil {
		return driver.Attrs{}, err
	}
	return driver.Attrs{Size: v.size, Token: v.tok}, nil
}

// Write stores body at key under the key's lock (in-process and flock),
// which every write and delete takes, so the precondition is checked and
// the write made with no other writer in any process. A body of at most
// maxSlotBody bytes goes into a slot file: in place into the free slot
// when the key holds a slot file it fits (the common CAS), into a new file
// created at the key for a new key, or by a fsynced temporary slot file
// renamed over the key otherwise. A larger body is a single-version file,
// written and fsynced before the lock is taken and renamed over the key
// under it.
func (c *Bucket) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	p, err := c.pathOf(key)
	if err != nil {
		return "", err
	}
	// A CAS needs no directories: the key's exist if the object does.
	if pre.IfMatch == "" {
		if err := c.ensureDirs(p.dirs); err != nil {
			return "", blobstore.Unavailable(fmt.Errorf("creating the key's directory: %w", err))
		}
	}
	small := len(body) <= maxSlotBody
	var t *tempFile
	var tok driver.Token
	if !small {
		// Written before taking the lock, so the lock is held only for
		// the check, the rename and the directory fsync.
		if t, tok, err = c.writeTemp(body); err != nil {
			return "", err
		}
		defer t.discard()
	}
	f, unlock, err := c.lockObject(ctx, key, p, pre.IfMatch == "")
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return "", err
	}
	st, err := readLocked(f, p.file)
	if err != nil {
		return "", c.Classify(driver.OpStat, err)
	}
	switch {
	case pre.IfAbsent && st.exists:
		return "", blobstore.ErrAlreadyExists
	case pre.IfMatch != "" && !st.exists:
		return "", fmt.Errorf("%w: no object at the key", blobstore.ErrPreconditionFailed)
	case pre.IfMatch != "" && st.tok != pre.IfMatch:
		return "", fmt.Errorf("%w: stored token %s, expected %s", blobstore.ErrPreconditionFailed, st.tok, pre.IfMatch)
	}
	switch {
	case !small:
	case st.exists && !st.single && slotSizeFor(len(body)) <= st.sf.size:
		return c.writeSlot(key, p, st, body)
	case !st.single && !st.exists:
		l, err := c.createLog()
		if err != nil {
			return "", err
		}
		if l != nil && len(body) <= logMaxBody && len(key) <= logMaxKey {
			return c.createLogged(l, p, st, key, body)
		}
		return c.createSlot(key, p, st, body)
	default:
		// A single-version file, or slots too small: a new slot file
		// replaces it whole.
		var raw [tokenLen]byte
		if t, raw, err = c.writeSlotTemp(body); err != nil {
			return "", err
		}
		defer t.discard()
		c.durable.forget(key)
		if err := c.publish(t, p); err != nil {
			return "", err
		}
		c.durable.set(key, raw)
		return driver.Token(hex.EncodeToString(raw[:])), nil
	}
	c.durable.forget(key)
	if err := c.publish(t, p); err != nil {
		return "", err
	}
	return tok, nil
}

// Delete removes the object, if its token is pre.IfMatch when that is set,
// under the key's lock; a missing key is not an error.
func (c *Bucket) Delete(ctx context.Context, key string, pre driver.Precondition) error {
	p, err := c.pathOf(key)
	if err != nil {
		return err
	}
	f, unlock, err := c.lockObject(ctx, key, p, false)
	if err != nil {
		return err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if pre.IfMatch != "" {
		st, err := readLocked(f, p.file)
		switch {
		case err != nil:
			return c.Classify(driver.OpStat, err)
		case !st.exists:
			return fmt.Errorf("%w: no object at the key", blobstore.ErrPreconditionFailed)
		case st.tok != pre.IfMatch:
			return fmt.Errorf("%w: stored token %s, expected %s", blobstore.ErrPreconditionFailed, st.tok, pre.IfMatch)
		}
	}
	if f != nil {
		// A record of the key's create must not outlive the object: a
		// power cut would bring it back.
		if err := c.retireCreate(key); err != nil {
			return err
		}
	}
	c.durable.forget(key)
	return c.remove(p)
}

// retireCreate checkpoints the create log if it holds a record for key.
func (c *Bucket) retireCreate(key string) error {
	l, err := c.createLog()
	if err != nil || l == nil {
		return err
	}
	held, err := l.holds(key)
	if err == nil && held {
		err = l.checkpoint()
	}
	if err != nil {
		return blobstore.Unavailable(fmt.Errorf("retiring the key's create from the create log: %w", err))
	}
	return nil
}

// publish moves the fsynced temporary file over the key and fsyncs the
// key's directory; the caller holds the key's lock and has checked the
// precondition. Failures before the rename leave nothing visible; a failed
// directory fsync after it leaves the outcome unknown.
func (c *Bucket) publish(t *tempFile, p objectPath) error {
	err := c.fsys.Rename(t.path, p.file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return blobstore.Unavailable(fmt.Errorf("the key's directory vanished (removed by another program?): %w", err))
		}
		if isNameTooLong(err) {
			return mapNameErr(err)
		}
		return blobstore.Unavailable(err)
	}
	t.published = true
	if err := c.fsys.SyncDir(p.dir); err != nil {
		return blobstore.Ambiguous(fmt.Errorf("object renamed into place but its directory fsync failed: %w", err))
	}
	return nil
}

// remove unlinks the object and makes the removal durable; the caller holds
// the key's lock.
func (c *Bucket) remove(p objectPath) error {
	err := c.fsys.Remove(p.file)
	if errors.Is(err, os.ErrNotExist) {
		// An earlier deleter may have been killed between its unlink and
		// its fsync; the fsync below makes "already gone" durable too.
		if serr := c.fsys.SyncDir(p.dir); serr != nil && !errors.Is(serr, os.ErrNotExist) {
			return blobstore.Unavailable(fmt.Errorf("object already absent but its directory fsync failed: %w", serr))
		}
		return nil
	}
	if err != nil {
		return blobstore.Unavailable(err)
	}
	if err := c.fsys.SyncDir(p.dir); err != nil {
		return blobstore.Ambiguous(fmt.Errorf("object unlinked but its directory fsync failed: %w", err))
	}
	return nil
}
