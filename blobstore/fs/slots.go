//go:build unix

package fs

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/shardfence/shardfence/blobstore"
)

// Slot files hold small objects: bodies of at most maxSlotBody bytes. A
// slot file is two slots of equal size S (a multiple of slotAlign), slot 0
// at offset 0 and slot 1 at offset S, so the file is 2S bytes and S is half
// its size. A slot is a 40-byte header and the body, zero-padded to S:
//
//	0  magic "SFS\x02"
//	4  flags, zero
//	8  sequence number, uint64 little-endian
//	16 token, 16 random bytes
//	32 body length, uint32 little-endian
//	36 CRC-32C of header bytes 0..35 followed by the body
//
// A slot is valid when its magic, its length (within the slot) and its CRC
// check out. The object's version is the valid slot with the higher
// sequence. A create writes both slots with the same version (sequences 1
// and 0); a replace writes the next sequence into the slot that does not
// hold the current version, in place, and fdatasyncs: no new inode, no
// rename, no directory change. A file with no valid slot is a create that
// never completed and reads as absent. Objects written before slot files
// existed, and bodies larger than maxSlotBody, are single-version files
// (object.go), told apart by their magic "SFO\x01" at offset 0, which no
// slot file has there, torn or not.
const (
	slotHeaderLen = 40
	slotAlign     = 4096
	// maxSlotBody is the largest body stored in a slot file.
	maxSlotBody = 64 << 10
	// maxSlotSize is the largest slot; a slot file is at most twice that.
	maxSlotSize = (slotHeaderLen + maxSlotBody + slotAlign - 1) / slotAlign * slotAlign
)

var slotMagic = [4]byte{'S', 'F', 'S', 2}

// errNoVersion: a slot file holds no valid slot, a create that did not
// complete. It matches os.ErrNotExist, so the key reads as absent.
var errNoVersion = fmt.Errorf("object file holds no complete version: %w", os.ErrNotExist)

// slotSizeFor is the slot size a body of n bytes needs.
func slotSizeFor(n int) int {
	return (slotHeaderLen + n + slotAlign - 1) / slotAlign * slotAlign
}

type slot struct {
	valid bool
	seq   uint64
	tok   [tokenLen]byte
	body  []byte // aliases the buffer the file was read into
}

func (s *slot) token() blobstore.Token { return blobstore.Token(hex.EncodeToString(s.tok[:])) }

// encodeSlot writes a slot's header and body at the start of dst, which must
// hold slotHeaderLen+len(body) bytes, and returns that length.
func encodeSlot(dst []byte, seq uint64, tok [tokenLen]byte, body []byte) int {
	h := dst[:slotHeaderLen]
	copy(h[0:4], slotMagic[:])
	clear(h[4:8])
	binary.LittleEndian.PutUint64(h[8:16], seq)
	copy(h[16:32], tok[:])
	binary.LittleEndian.PutUint32(h[32:36], uint32(len(body)))
	copy(dst[slotHeaderLen:], body)
	sum := crc32.Checksum(h[:36], castagnoli)
	sum = crc32.Update(sum, castagnoli, body)
	binary.LittleEndian.PutUint32(h[36:40], sum)
	return slotHeaderLen + len(body)
}

func decodeSlot(b []byte) slot {
	if len(b) < slotHeaderLen || [4]byte(b[0:4]) != slotMagic {
		return slot{}
	}
	n := binary.LittleEndian.Uint32(b[32:36])
	if uint64(n) > uint64(len(b)-slotHeaderLen) {
		return slot{}
	}
	body := b[slotHeaderLen : slotHeaderLen+int(n)]
	sum := crc32.Checksum(b[:36], castagnoli)
	sum = crc32.Update(sum, castagnoli, body)
	if sum != binary.LittleEndian.Uint32(b[36:40]) {
		return slot{}
	}
	s := slot{valid: true, seq: binary.LittleEndian.Uint64(b[8:16]), body: body}
	copy(s.tok[:], b[16:32])
	return s
}

// slotFile is a slot file as read: its slot size (0 when the size is not
// that of a slot file) and both slots.
type slotFile struct {
	size  int
	slots [2]slot
}

func parseSlotFile(buf []byte) slotFile {
	n := len(buf)
	if n == 0 || n%(2*slotAlign) != 0 || n > 2*maxSlotSize {
		return slotFile{}
	}
	sf := slotFile{size: n / 2}
	sf.slots[0] = decodeSlot(buf[:sf.size])
	sf.slots[1] = decodeSlot(buf[sf.size:])
	return sf
}

// current is the index of the valid slot with the higher sequence, or -1.
func (sf *slotFile) current() int {
	a, b := sf.slots[0].valid, sf.slots[1].valid
	switch {
	case a && b:
		if sf.slots[1].seq > sf.slots[0].seq {
			return 1
		}
		return 0
	case a:
		return 0
	case b:
		return 1
	}
	return -1
}

// settled reports whether a read taken without the key's lock may be
// trusted: both slots are valid. See readVersion.
func (sf *slotFile) settled() bool { return sf.slots[0].valid && sf.slots[1].valid }

// version is one version of an object as a reader found it. Slot files and
// small single-version files are read whole, so body holds the object (when
// it was asked for); a large single-version file is left open in f for a
// stream to pread from, its body not read.
type version struct {
	tok  blobstore.Token
	size int64
	body []byte
	// For a large single-version file kept open: the file and the body
	// CRC its header records.
	f   *os.File
	sum uint32
}

// readLimit: files up to this size are read whole by one pread; any slot
// file is.
const readLimit = 2 * maxSlotSize

// loadVersion reads the object in the open file f. For a slot file it
// returns the slot file too, so a caller can judge whether the read is
// settled; for a single-version file, slotFile is zero. With keep, a large
// single-version file is left open in the returned version (the caller
// closes it); otherwise f is not kept.
func loadVersion(f *os.File, path string, wantBody, keep bool) (version, *slotFile, error) {
	fi, err := f.Stat()
	if err != nil {
		return version{}, nil, err
	}
	size := fi.Size()
	if size <= readLimit {
		buf := make([]byte, size)
		if _, err := f.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
			return version{}, nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if size >= 4 && [4]byte(buf[0:4]) == magic {
			tok, sum, err := decodeHeader(buf, size)
			if err != nil {
				return version{}, nil, fmt.Errorf("%s: %w", path, err)
			}
			body := buf[headerLen:]
			if crc32.Checksum(body, castagnoli) != sum {
				return version{}, nil, fmt.Errorf("%w: %s: body checksum mismatch", ErrCorruptObject, path)
			}
			return version{tok: tok, size: int64(len(body)), body: body}, nil, nil
		}
		sf := parseSlotFile(buf)
		i := sf.current()
		if i < 0 {
			return version{}, &sf, fmt.Errorf("%s: %w", path, errNoVersion)
		}
		s := &sf.slots[i]
		return version{tok: s.token(), size: int64(len(s.body)), body: s.body}, &sf, nil
	}
	// Too large for a slot file: a single-version file or damage.
	tok, bsize, sum, err := readHeader(f, path)
	if err != nil {
		return version{}, nil, err
	}
	v := version{tok: tok, size: bsize, sum: sum}
	if wantBody {
		buf := make([]byte, bsize)
		if _, err := f.ReadAt(buf, headerLen); err != nil {
			return version{}, nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if crc32.Checksum(buf, castagnoli) != sum {
			return version{}, nil, fmt.Errorf("%w: %s: body checksum mismatch", ErrCorruptObject, path)
		}
		v.body = buf
	}
	if keep {
		v.f = f
	}
	return v, nil, nil
}

// Unlocked reads. A reader takes no lock when it finds both slots of a slot
// file valid; otherwise it reads again, and then under a shared flock of the
// key's lock file. Why both-valid suffices: let v be the latest version
// acknowledged before the read began, in slot X; the other slot Y then holds
// v-1 or a later version. A writer only ever writes slot X with v+2, v+4,
// ..., each after the version before it was written whole to Y. The reader
// reads X at some moment after it began: if it finds X valid, X holds v or a
// later version, so the higher valid sequence is at least v. The only way
// to return less than v is to find X invalid (being overwritten with a
// later version) and Y valid but older than v, and that read has an invalid
// slot. A torn or half-copied slot fails its CRC, so a body is never
// returned torn. Under the shared lock no writer is active, so an invalid
// slot is one a dead writer or a power cut left, never the latest
// acknowledged version (a writer overwrites a slot only once the other is
// durable), and the valid slot is the version.
const unlockedReadTries = 3

// readVersion reads the current version of the object in the file at path.
func (c *Bucket) readVersion(ctx context.Context, path string, wantBody, keep bool) (version, error) {
	for range unlockedReadTries {
		f, err := os.Open(path)
		if err != nil {
			return version{}, err
		}
		v, sf, err := loadVersion(f, path, wantBody, keep)
		if v.f == nil {
			f.Close()
		}
		if sf == nil || sf.settled() {
			return v, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return version{}, err
	}
	if err := flockCtx(ctx, f, unix.LOCK_SH); err != nil {
		f.Close()
		return version{}, err
	}
	v, _, err := loadVersion(f, path, wantBody, keep)
	if v.f == nil {
		f.Close() // and the shared lock with it
	} else {
		_ = flock(f, unix.LOCK_UN)
	}
	return v, err
}

// durableTokens remembers, per key, the version this process last made
// durable itself, so a writer can skip flushing the current slot before
// overwriting the other one. Bounded: when full it forgets everything,
// which costs one extra fdatasync per key afterwards.
type durableTokens struct {
	mu sync.Mutex
	m  map[string][tokenLen]byte
}

const durableTokensMax = 4096

func (d *durableTokens) has(key string, tok [tokenLen]byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.m[key]
	return ok && t == tok
}

func (d *durableTokens) set(key string, tok [tokenLen]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= durableTokensMax {
		d.m = map[string][tokenLen]byte{}
	}
	d.m[key] = tok
}

func (d *durableTokens) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, key)
}

// lockedState is the key's file as a writer holding the key's lock finds it.
type lockedState struct {
	f      file // nil when there is no file
	single bool // a single-version file
	sf     slotFile
	cur    int // the current slot of a slot file, -1 for none
	tok    blobstore.Token
	exists bool // a version exists
}

// readLocked reads the key's file f, locked by lockObject (nil when there
// is no file): no writer is active, so one read is the state.
func readLocked(f file, path string) (*lockedState, error) {
	st := &lockedState{f: f, cur: -1}
	if f == nil {
		return st, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	var h [headerLen]byte
	if size >= headerLen {
		if _, err := f.ReadAt(h[:], 0); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	if size >= 4 && [4]byte(h[0:4]) == magic || size > readLimit {
		tok, _, err := decodeHeader(h[:], size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		st.single, st.tok, st.exists = true, tok, true
		return st, nil
	}
	buf := make([]byte, size)
	if size > 0 {
		if _, err := f.ReadAt(buf, 0); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	st.sf = parseSlotFile(buf)
	if st.cur = st.sf.current(); st.cur >= 0 {
		st.tok, st.exists = st.sf.slots[st.cur].token(), true
	}
	return st, nil
}

// writeSlot replaces the current version of a slot file in place: the next
// sequence goes into the other slot, then fdatasync. The caller holds the
// key's lock and has checked that the body fits.
func (c *Bucket) writeSlot(key string, p objectPath, st *lockedState, body []byte) (blobstore.Token, error) {
	cur := &st.sf.slots[st.cur]
	if !c.durable.has(key, cur.tok) {
		// The current slot may be a version whose writer died before its
		// fdatasync, in a file whose creator died before its directory
		// fsync. Overwriting the other slot while this one is not durable
		// could leave neither durable at a power cut, and a version
		// written into a file whose entry is not durable is lost with
		// the entry, so flush both first (cheap when nothing is dirty).
		if err := st.f.Datasync(); err != nil {
			return "", blobstore.Unavailable(fmt.Errorf("syncing the current version of %s: %w", st.f.Name(), err))
		}
		if err := c.fsys.SyncDir(p.dir); err != nil {
			return "", blobstore.Unavailable(fmt.Errorf("syncing the directory of %s: %w", st.f.Name(), err))
		}
	}
	tok, err := newToken()
	if err != nil {
		return "", blobstore.Unavailable(err)
	}
	buf := make([]byte, slotHeaderLen+len(body))
	encodeSlot(buf, cur.seq+1, tok, body)
	if c.hook != nil {
		c.hook("slot-write")
	}
	if _, err := st.f.WriteAt(buf, int64((1-st.cur)*st.sf.size)); err != nil {
		// A write that did not complete leaves the slot failing its CRC
		// (or as it was): the current version stays.
		return "", blobstore.Unavailable(storeFull(fmt.Errorf("writing a slot of %s: %w", st.f.Name(), err)))
	}
	if c.hook != nil {
		c.hook("slot-written")
	}
	if err := st.f.Datasync(); err != nil {
		return "", blobstore.Ambiguous(storeFull(fmt.Errorf("syncing %s: %w", st.f.Name(), err)))
	}
	c.durable.set(key, tok)
	return blobstore.Token(hex.EncodeToString(tok[:])), nil
}

// newSlotImage is the content of a new slot file holding body in both
// slots, sequences 1 and 0.
func newSlotImage(body []byte) ([]byte, [tokenLen]byte, error) {
	tok, err := newToken()
	if err != nil {
		return nil, tok, err
	}
	return slotImage(body, tok), tok, nil
}

// slotImage is a new slot file holding body, version tok, in both slots.
func slotImage(body []byte, tok [tokenLen]byte) []byte {
	size := slotSizeFor(len(body))
	buf := make([]byte, 2*size)
	encodeSlot(buf, 1, tok, body)
	encodeSlot(buf[size:], 0, tok, body)
	return buf
}

// createSlot writes a new slot file into the key's file, which holds no
// version: empty when lockObject just created it, or a create that never
// completed. The key's entry may not be durable yet, so the directory is
// fsynced after the file's fdatasync. A crash before the end leaves a file
// with no valid slot (absent) or the whole new version. The caller holds
// the key's lock on st.f.
func (c *Bucket) createSlot(key string, p objectPath, st *lockedState, body []byte) (blobstore.Token, error) {
	tok, err := c.writeCreate(p, st.f, body)
	if err != nil {
		return "", err
	}
	if err := c.syncCreate(key, p, st.f, tok); err != nil {
		return "", err
	}
	return blobstore.Token(hex.EncodeToString(tok[:])), nil
}

// writeCreate writes a new slot file holding body, under a new token,
// into the key's file f, emptied first: nothing synced. A failed write
// leaves the file empty (absent).
func (c *Bucket) writeCreate(p objectPath, f file, body []byte) ([tokenLen]byte, error) {
	tok, err := newToken()
	if err != nil {
		return tok, blobstore.Unavailable(err)
	}
	img := slotImage(body, tok)
	if fi, err := f.Stat(); err != nil {
		return tok, blobstore.Unavailable(err)
	} else if fi.Size() != 0 {
		if err := f.Truncate(0); err != nil {
			return tok, blobstore.Unavailable(err)
		}
	}
	if c.hook != nil {
		c.hook("create-opened")
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		// A short file is not a slot file's size, so nothing of this
		// write is readable: the create failed. Give the space back.
		_ = f.Truncate(0)
		return tok, blobstore.Unavailable(storeFull(fmt.Errorf("writing %s: %w", p.file, err)))
	}
	return tok, nil
}

// syncCreate makes a create written by writeCreate durable by itself: the
// file's data, then its directory entry.
func (c *Bucket) syncCreate(key string, p objectPath, f file, tok [tokenLen]byte) error {
	if err := f.Datasync(); err != nil {
		return blobstore.Ambiguous(storeFull(fmt.Errorf("syncing %s: %w", p.file, err)))
	}
	if c.hook != nil {
		c.hook("create-synced")
	}
	if err := c.fsys.SyncDir(p.dir); err != nil {
		return blobstore.Ambiguous(fmt.Errorf("object written but its directory fsync failed: %w", err))
	}
	c.durable.set(key, tok)
	return nil
}

// createLogged writes a new slot file into the key's file, which holds no
// version, without syncing it, and logs the create (createlog.go): the
// log's fdatasync is the create's only flush. A failure before the record
// was written empties the file again (the key reads absent); one after
// leaves the outcome unknown. The caller holds the key's lock on st.f.
func (c *Bucket) createLogged(l *createLog, p objectPath, st *lockedState, key string, body []byte) (blobstore.Token, error) {
	tok, err := c.writeCreate(p, st.f, body)
	if err != nil {
		return "", err
	}
	switch err := l.append(key, tok, body); {
	case errors.Is(err, errLogFull):
		// As a create without the log.
		if err := c.syncCreate(key, p, st.f, tok); err != nil {
			return "", err
		}
	case errors.Is(err, errLogNotWritten):
		_ = st.f.Truncate(0)
		return "", err
	case err != nil:
		return "", err
	default:
		if c.hook != nil {
			c.hook("create-synced")
		}
	}
	return blobstore.Token(hex.EncodeToString(tok[:])), nil
}

// writeSlotTemp writes a new slot file holding body to a fsynced temporary
// file, to be renamed over a file that cannot take the body in place (a
// single-version file, or slots too small).
func (c *Bucket) writeSlotTemp(body []byte) (*tempFile, [tokenLen]byte, error) {
	img, tok, err := newSlotImage(body)
	if err != nil {
		return nil, tok, blobstore.Unavailable(err)
	}
	t, err := c.createTemp()
	if err != nil {
		return nil, tok, blobstore.Unavailable(storeFull(err))
	}
	if _, err := t.f.WriteAt(img, 0); err != nil {
		t.discard()
		return nil, tok, blobstore.Unavailable(storeFull(fmt.Errorf("writing temporary file %s: %w", t.path, err)))
	}
	if err := t.f.Datasync(); err != nil {
		t.discard()
		return nil, tok, blobstore.Unavailable(storeFull(fmt.Errorf("syncing temporary file %s: %w", t.path, err)))
	}
	if c.hook != nil {
		c.hook("temp-synced")
	}
	return t, tok, nil
}

// sliceReader serves a range of a body held in memory.
func sliceReader(body []byte, offset, end int64) io.Reader {
	return bytes.NewReader(body[offset:end])
}
