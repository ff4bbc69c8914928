//go:build unix

package fs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shardfence/shardfence/blobstore"
)

// The create log makes a new key durable with one write and one fdatasync
// of an already allocated file, where a new file needs its data, its inode
// and its directory entry flushed (docs/ARCHITECTURE.md, "The create
// log"). A create of a small object writes the object's slot file at the
// key without syncing it, appends a record (key, token, body) to the log
// and fdatasyncs the log; it is acknowledged then. A checkpoint later
// makes the logged files and their directory entries durable and moves
// the log's head past their records. After a power cut, opening the store
// redoes every record still in the log whose key holds no version.
//
// The log is one file (newLogSize bytes, or less on a small device),
// written with zeros when made, so that appending never allocates. Its first block holds two header slots
// (offsets 0 and 512, one sector each; the valid one with the higher
// checkpoint count is current), the rest is a ring of records, each
// starting on a logBlock boundary so that an append never rewrites a
// block holding an earlier record:
//
//	header: 0 magic "SFL\x01", 4 zero, 8 checkpoint count, 16 head (a
//	        position: bytes appended since the log was made), 24 sequence
//	        number of the record at head, 32 salt, 40 log size,
//	        48 CRC-32C of bytes 0..47
//	record: 0 magic "SFR\x01", 4 flags (1: wrap), 8 salt, 16 sequence
//	        number, 24 token, 40 key length, 44 body length,
//	        48 CRC-32C of bytes 0..47, the key and the body; 64 the key,
//	        then the body; zero-padded to a logBlock multiple
//
// A record belongs to the log when its magic, salt, sequence number (the
// next one after the record before it) and CRC check out; the records
// from head to the first that does not are the log. A record that does
// not fit before the end of the ring is preceded by a wrap record, which
// sends the reader to the ring's start. Opening the store picks a new
// salt, so nothing a power cut left beyond the log's end (records that
// were written out of order and never acknowledged) can be read as part
// of it later.
//
// Who touches the log: appenders (holding the key's lock), checkpointers
// and the opener's recovery, each holding the log file's exclusive flock
// (and this process's log mutex) while it reads the header or changes the
// file. An appender fdatasyncs and a checkpointer syncs without the flock,
// so other processes append meanwhile; a checkpointer takes it again to
// move the head. A delete of a key that
// still has a record in the log first checkpoints it: a record must never
// outlive the object it created, or a power cut after the delete would
// bring the object back. Keys with a record in the log always hold a
// version outside a power cut (the file is written before its record is
// appended, a delete retires the record first, a replace only swaps in
// another version), so only recovery ever redoes one.
const (
	logName       = "CREATES"
	logBlock      = 4096
	logHeaderLen  = 52
	logRecHeader  = 64
	logFlagWrap   = 1
	logCheckpoint = 100 * time.Millisecond
	// syncEachMax: a checkpoint of at most this many records syncs each
	// file and directory rather than the whole filesystem.
	syncEachMax = 4
	// logMaxBody and logMaxKey bound what a create logs; larger ones are
	// written and synced in place. Any slot file's body fits.
	logMaxBody = maxSlotBody
	logMaxKey  = logBlock
)

// minLogSize holds the largest record twice, so a record always fits an
// empty ring after a wrap.
const minLogSize = 64 * logBlock

// newLogSize is the size of a new log: a ring of about a thousand small
// records, or 340 of 8 KiB. Tests make it small to wrap it often.
var newLogSize int64 = 4 << 20

var (
	logHeaderMagic = [4]byte{'S', 'F', 'L', 1}
	logRecMagic    = [4]byte{'S', 'F', 'R', 1}
)

// errLogNotWritten: a create's record was not written, so the create did
// not happen.
var errLogNotWritten = errors.New("the create's log record was not written")

// errLogFull: the ring has no room for the record until a checkpoint; the
// create syncs its own file instead (the checkpoint is not waited for: its
// sync may take long on a device busy with other writes).
var errLogFull = errors.New("the create log is full")

type logHeader struct {
	cp, head, headSeq, salt uint64
}

type logRecord struct {
	pos, seq uint64
	size     uint64 // bytes it takes in the log
	key      string
	tok      [tokenLen]byte
	body     []byte
}

func recordLen(key string, body []byte) uint64 {
	return roundBlock(uint64(logRecHeader + len(key) + len(body)))
}

func roundBlock(n uint64) uint64 { return (n + logBlock - 1) / logBlock * logBlock }

// physical is where the record at position pos starts in the file.
func (l *createLog) physical(pos uint64) int64 { return int64(logBlock + pos%l.ring) }

// createLog is this process's handle on a store's log.
type createLog struct {
	c    *Bucket
	path string
	f    file
	ring uint64 // the file's size less the header block

	// mu serializes this process's readers and writers of the log file;
	// the flock does the same across processes.
	mu sync.Mutex
	// What this process last saw, under mu: the salt, and the position
	// and sequence number after the last record.
	salt, tail, tailSeq uint64
	known               bool

	// Group commit: creates queue; one at a time writes the queue and
	// syncs once for all of it.
	qmu     sync.Mutex
	queue   []*logEntry
	leading bool

	// One checkpoint at a time in this process; timer arms the next;
	// full asks for one at once.
	full   atomic.Bool
	ckmu   sync.Mutex
	tmu    sync.Mutex
	timer  *time.Timer
	closed bool
	// timed counts the timer's checkpoints under way: close waits for
	// them before it closes the file they use.
	timed sync.WaitGroup
}

type logEntry struct {
	key     string
	tok     [tokenLen]byte
	body    []byte
	err     error
	written bool
	done    chan struct{}
}

// logPath is where the store keeps its log.
func (c *Bucket) logPath() string { return filepath.Join(c.root, logName) }

// errNoRoomForLog: the store's device has too little free space for a
// create log worth having; the store goes without one.
var errNoRoomForLog = errors.New("too little free space for the create log")

// makeLog creates the log file, zero-filled with a first header, fsynced
// and durable in the store's root, unless it exists. Concurrent first
// opens race through a no-replace rename. The log takes at most an eighth
// of the device's free space.
func (c *Bucket) makeLog() error {
	if _, err := os.Stat(c.logPath()); err == nil {
		return nil
	}
	size := newLogSize
	var st unix.Statfs_t
	if err := unix.Statfs(c.root, &st); err == nil {
		if free := int64(st.Bavail) * int64(st.Bsize) / 8 / logBlock * logBlock; free < size {
			size = free
		}
	}
	if size < minLogSize {
		return errNoRoomForLog
	}
	t, err := c.createTempNamed("log")
	if err != nil {
		return err
	}
	defer t.discard()
	zero := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zero)) {
		if _, err := t.f.WriteAt(zero[:min(int64(len(zero)), size-off)], off); err != nil {
			return storeFull(fmt.Errorf("writing the create log: %w", err))
		}
	}
	salt, err := randomSalt()
	if err != nil {
		return err
	}
	var h [logHeaderLen]byte
	encodeLogHeader(h[:], logHeader{cp: 1, headSeq: 1, salt: salt}, size)
	if _, err := t.f.WriteAt(h[:], 0); err != nil {
		return storeFull(err)
	}
	if err := t.f.Datasync(); err != nil {
		return storeFull(err)
	}
	switch err := c.fsys.RenameNoReplace(t.path, c.logPath()); {
	case err == nil:
		t.published = true
	case !errors.Is(err, os.ErrExist):
		return err
	}
	return c.fsys.SyncDir(c.root)
}

func randomSalt() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]) | 1, nil
}

// openLog opens the store's log if it exists (nil, nil if not) and
// recovers it: every record is redone where its key holds no version,
// everything is synced, and the log starts empty under a new salt.
func (c *Bucket) openLog() (*createLog, error) {
	f, err := c.fsys.OpenFile(c.logPath(), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if fi.Size() < minLogSize || fi.Size()%logBlock != 0 {
		f.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, not a create log", ErrBadLayout, c.logPath(), fi.Size())
	}
	l := &createLog{c: c, path: c.logPath(), f: f, ring: uint64(fi.Size()) - logBlock}
	if err := l.recover(); err != nil {
		f.Close()
		return nil, fmt.Errorf("recovering the create log: %w", err)
	}
	return l, nil
}

// lock takes mu and the flock; the returned func releases both. The flock
// is taken blocking, not polled: appenders of other processes hold it for
// a few writes at a time, back to back, and a poller could wait for a gap
// indefinitely.
func (l *createLog) lock() (func(), error) {
	l.mu.Lock()
	if err := flock(l.f, unix.LOCK_EX); err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("locking the create log: %w", err)
	}
	return func() { _ = flock(l.f, unix.LOCK_UN); l.mu.Unlock() }, nil
}

func encodeLogHeader(b []byte, h logHeader, size int64) {
	clear(b[:logHeaderLen])
	copy(b[0:4], logHeaderMagic[:])
	binary.LittleEndian.PutUint64(b[8:16], h.cp)
	binary.LittleEndian.PutUint64(b[16:24], h.head)
	binary.LittleEndian.PutUint64(b[24:32], h.headSeq)
	binary.LittleEndian.PutUint64(b[32:40], h.salt)
	binary.LittleEndian.PutUint64(b[40:48], uint64(size))
	binary.LittleEndian.PutUint32(b[48:52], crc32.Checksum(b[:48], castagnoli))
}

func decodeLogHeader(b []byte, size int64) (logHeader, bool) {
	if [4]byte(b[0:4]) != logHeaderMagic || binary.LittleEndian.Uint64(b[40:48]) != uint64(size) ||
		crc32.Checksum(b[:48], castagnoli) != binary.LittleEndian.Uint32(b[48:52]) {
		return logHeader{}, false
	}
	return logHeader{
		cp:      binary.LittleEndian.Uint64(b[8:16]),
		head:    binary.LittleEndian.Uint64(b[16:24]),
		headSeq: binary.LittleEndian.Uint64(b[24:32]),
		salt:    binary.LittleEndian.Uint64(b[32:40]),
	}, true
}

// readHeader returns the current header; the caller holds the lock.
func (l *createLog) readHeader() (logHeader, error) {
	var b [1024]byte
	if _, err := l.f.ReadAt(b[:], 0); err != nil {
		return logHeader{}, fmt.Errorf("reading the create log's header: %w", err)
	}
	h0, ok0 := decodeLogHeader(b[0:512], l.size())
	h1, ok1 := decodeLogHeader(b[512:1024], l.size())
	switch {
	case ok0 && ok1 && h1.cp > h0.cp, !ok0 && ok1:
		return h1, nil
	case ok0:
		return h0, nil
	}
	return logHeader{}, fmt.Errorf("%w: %s has no valid header", ErrCorruptObject, l.path)
}

func (l *createLog) size() int64 { return int64(l.ring) + logBlock }

// writeHeader writes h into the slot the current header is not in and
// fdatasyncs; a torn write leaves the current one.
func (l *createLog) writeHeader(h logHeader) error {
	var b [logHeaderLen]byte
	encodeLogHeader(b[:], h, l.size())
	if _, err := l.f.WriteAt(b[:], int64(h.cp%2)*512); err != nil {
		return err
	}
	return l.f.Datasync()
}

// readRecord reads the record at pos if it is the one with sequence seq
// under salt; ok is false otherwise. Without full, it reads the header and
// the key only and does not check the CRC: a torn record may pass, which
// is enough to look for a key (the caller then checkpoints for nothing).
func (l *createLog) readRecord(pos, seq, salt uint64, full bool) (rec logRecord, wrap, ok bool, err error) {
	var h [logRecHeader]byte
	off := l.physical(pos)
	if _, err := l.f.ReadAt(h[:], off); err != nil {
		return rec, false, false, fmt.Errorf("reading the create log: %w", err)
	}
	if [4]byte(h[0:4]) != logRecMagic || binary.LittleEndian.Uint64(h[8:16]) != salt || binary.LittleEndian.Uint64(h[16:24]) != seq {
		return rec, false, false, nil
	}
	klen, blen := uint64(binary.LittleEndian.Uint32(h[40:44])), uint64(binary.LittleEndian.Uint32(h[44:48]))
	if blen > logMaxBody || klen > logMaxKey || pos%l.ring+roundBlock(logRecHeader+klen+blen) > l.ring {
		return rec, false, false, nil
	}
	n := klen + blen
	if !full {
		n = klen
	}
	buf := make([]byte, n)
	if _, err := l.f.ReadAt(buf, off+logRecHeader); err != nil {
		return rec, false, false, fmt.Errorf("reading the create log: %w", err)
	}
	sum := crc32.Checksum(h[:48], castagnoli)
	if full && crc32.Update(sum, castagnoli, buf) != binary.LittleEndian.Uint32(h[48:52]) {
		return rec, false, false, nil
	}
	rec = logRecord{pos: pos, seq: seq, size: roundBlock(logRecHeader + klen + blen), key: string(buf[:klen]), body: buf[klen:]}
	copy(rec.tok[:], h[24:40])
	return rec, binary.LittleEndian.Uint32(h[4:8])&logFlagWrap != 0, true, nil
}

// scan reads the log's records from pos (sequence seq) to its end,
// returning them and the position and sequence after the last; the
// caller holds the lock. Without full, it reads keys only (readRecord).
func (l *createLog) scan(h logHeader, pos, seq uint64, full bool) ([]logRecord, uint64, uint64, error) {
	var recs []logRecord
	for pos-h.head < l.ring {
		rec, wrap, ok, err := l.readRecord(pos, seq, h.salt, full)
		if err != nil || !ok {
			return recs, pos, seq, err
		}
		seq++
		if wrap {
			pos += l.ring - pos%l.ring
			continue
		}
		recs = append(recs, rec)
		pos += rec.size
	}
	return recs, pos, seq, nil
}

// findTail brings the cached tail up to date with the header; the
// caller holds the lock.
func (l *createLog) findTail(h logHeader) error {
	pos, seq := h.head, h.headSeq
	if l.known && l.salt == h.salt && l.tail >= h.head && l.tailSeq >= h.headSeq {
		// Another process may have appended since: go on from ours.
		pos, seq = l.tail, l.tailSeq
	}
	_, pos, seq, err := l.scan(h, pos, seq, true)
	if err != nil {
		l.known = false
		return err
	}
	l.salt, l.tail, l.tailSeq, l.known = h.salt, pos, seq, true
	return nil
}

func encodeRecord(salt, seq uint64, flags uint32, key string, tok [tokenLen]byte, body []byte) []byte {
	n := recordLen(key, body)
	if flags&logFlagWrap != 0 {
		n = logBlock
	}
	b := make([]byte, n)
	copy(b[0:4], logRecMagic[:])
	binary.LittleEndian.PutUint32(b[4:8], flags)
	binary.LittleEndian.PutUint64(b[8:16], salt)
	binary.LittleEndian.PutUint64(b[16:24], seq)
	copy(b[24:40], tok[:])
	binary.LittleEndian.PutUint32(b[40:44], uint32(len(key)))
	binary.LittleEndian.PutUint32(b[44:48], uint32(len(body)))
	copy(b[logRecHeader:], key)
	copy(b[logRecHeader+len(key):], body)
	sum := crc32.Checksum(b[:48], castagnoli)
	sum = crc32.Update(sum, castagnoli, b[logRecHeader:logRecHeader+len(key)+len(body)])
	binary.LittleEndian.PutUint32(b[48:52], sum)
	return b
}

// append logs a create whose slot file is written and returns once the
// record is durable. An error wrapping errLogNotWritten means no record
// was written: the create did not happen; errLogFull, that the caller
// must make its file durable itself.
func (l *createLog) append(key string, tok [tokenLen]byte, body []byte) error {
	e := &logEntry{key: key, tok: tok, body: body, done: make(chan struct{})}
	l.qmu.Lock()
	l.queue = append(l.queue, e)
	if l.leading {
		l.qmu.Unlock()
		<-e.done
		return e.err
	}
	l.leading = true
	for len(l.queue) > 0 {
		batch := l.queue
		l.queue = nil
		l.qmu.Unlock()
		l.commit(batch)
		for _, b := range batch {
			close(b.done)
		}
		l.qmu.Lock()
	}
	l.leading = false
	l.qmu.Unlock()
	l.armCheckpoint(l.full.Swap(false))
	return e.err
}

// commit writes the batch's records and syncs once; each entry's err is
// set (errLogFull for those the ring has no room for). The fdatasync
// runs after the flock is released, so other processes append meanwhile:
// a record is durable once any fdatasync issued after its write returns,
// and a checkpoint that retires it first makes its file durable.
func (l *createLog) commit(batch []*logEntry) {
	fail := func(err error) {
		l.known = false
		for _, e := range batch {
			if e.err != nil {
				continue
			}
			if e.written {
				e.err = blobstore.Ambiguous(fmt.Errorf("syncing the create log: %w", err))
			} else {
				e.err = blobstore.Unavailable(storeFull(fmt.Errorf("%w: %w", errLogNotWritten, err)))
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := flock(l.f, unix.LOCK_EX); err != nil {
		fail(fmt.Errorf("locking the create log: %w", err))
		return
	}
	locked := true
	defer func() {
		if locked {
			_ = flock(l.f, unix.LOCK_UN)
		}
	}()
	h, err := l.readHeader()
	if err == nil {
		err = l.findTail(h)
	}
	if err != nil {
		fail(err)
		return
	}
	for _, e := range batch {
		n := recordLen(e.key, e.body)
		wrap := l.tail%l.ring+n > l.ring
		need := n
		if wrap {
			need += l.ring - l.tail%l.ring
		}
		if l.tail+need-h.head > l.ring {
			// Full: this create and the rest sync their own files.
			for _, e := range batch {
				if !e.written {
					e.err = errLogFull
				}
			}
			l.full.Store(true)
			break
		}
		if wrap {
			if _, err := l.f.WriteAt(encodeRecord(l.salt, l.tailSeq, logFlagWrap, "", [tokenLen]byte{}, nil), l.physical(l.tail)); err != nil {
				fail(err)
				return
			}
			l.tailSeq++
			l.tail += l.ring - l.tail%l.ring
		}
		if _, err := l.f.WriteAt(encodeRecord(l.salt, l.tailSeq, 0, e.key, e.tok, e.body), l.physical(l.tail)); err != nil {
			fail(err)
			return
		}
		e.written = true
		l.tailSeq++
		l.tail += n
	}
	_ = flock(l.f, unix.LOCK_UN)
	locked = false
	if len(batch) > 0 && batch[0].written {
		if err := l.f.Datasync(); err != nil {
			fail(err)
		}
	}
}

// checkpoint makes the creates logged so far durable and retires their
// records. The sync runs without the lock, so creates go on meanwhile.
func (l *createLog) checkpoint() error {
	l.ckmu.Lock()
	defer l.ckmu.Unlock()
	if l.c.onCheckpoint != nil {
		defer func(t0 time.Time) { l.c.onCheckpoint(time.Since(t0)) }(time.Now())
	}
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	h, err := l.readHeader()
	var recs []logRecord
	var tail, seq uint64
	if err == nil {
		recs, tail, seq, err = l.scan(h, h.head, h.headSeq, true)
	}
	unlock()
	if err != nil || len(recs) == 0 {
		return err
	}
	if err := l.c.syncLogged(recs); err != nil {
		return err
	}
	if unlock, err = l.lock(); err != nil {
		return err
	}
	defer unlock()
	now, err := l.readHeader()
	if err != nil {
		return err
	}
	if now.salt == h.salt && now.headSeq < seq {
		if err := l.writeHeader(logHeader{cp: now.cp + 1, head: tail, headSeq: seq, salt: now.salt}); err != nil {
			return err
		}
	}
	l.c.markDurable(recs)
	return nil
}

// holds reports whether a record for key is in the log.
func (l *createLog) holds(key string) (bool, error) {
	unlock, err := l.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	h, err := l.readHeader()
	if err != nil {
		return false, err
	}
	recs, _, _, err := l.scan(h, h.head, h.headSeq, false)
	for _, r := range recs {
		if r.key == key {
			return true, err
		}
	}
	return false, err
}

// armCheckpoint schedules a checkpoint soon, unless one is scheduled;
// with full (the log had no room for a record), at once.
func (l *createLog) armCheckpoint(full bool) {
	l.tmu.Lock()
	defer l.tmu.Unlock()
	if l.closed {
		return
	}
	if l.timer != nil {
		if full {
			l.timer.Reset(l.c.checkpointFull)
		}
		return
	}
	after := l.c.checkpointAfter
	if full {
		after = l.c.checkpointFull
	}
	l.timer = time.AfterFunc(after, func() {
		l.tmu.Lock()
		l.timer = nil
		if l.closed {
			l.tmu.Unlock()
			return
		}
		l.timed.Add(1)
		l.tmu.Unlock()
		defer l.timed.Done()
		// A failure leaves the records in the log, where the next
		// checkpoint, a delete or the next open deals with them.
		_ = l.checkpoint()
	})
}

// close stops the timer and checkpoints what is left.
func (l *createLog) close() error {
	l.tmu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.tmu.Unlock()
	// A timer that fired before Stop may be checkpointing now.
	l.timed.Wait()
	err := l.checkpoint()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// recover redoes what a power cut may have lost and empties the log
// under a new salt; it holds the lock throughout, so no process appends
// until it is done.
func (l *createLog) recover() error {
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	defer unlock()
	h, err := l.readHeader()
	if err != nil {
		return err
	}
	recs, tail, seq, err := l.scan(h, h.head, h.headSeq, true)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := l.c.redo(r); err != nil {
			return fmt.Errorf("redoing the create of %q: %w", r.key, err)
		}
	}
	if err := l.c.syncLogged(recs); err != nil {
		return err
	}
	salt, err := randomSalt()
	if err != nil {
		return err
	}
	if err := l.writeHeader(logHeader{cp: h.cp + 1, head: tail, headSeq: seq, salt: salt}); err != nil {
		return err
	}
	l.known = false
	return nil
}

// redo writes a logged create back where its key holds no version: the
// power cut lost the file, its entry or its bytes. A key that holds a
// version holds this create's or a later one.
func (c *Bucket) redo(r logRecord) error {
	p, err := c.pathOf(r.key)
	if err != nil {
		return err
	}
	if v, err := c.readVersion(context.Background(), p.file, false, false); err == nil && v.tok != "" {
		return nil
	}
	if err := c.ensureDirs(p.dirs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, unlock, err := c.lockObject(ctx, r.key, p, true)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := readLocked(f, p.file)
	if err != nil || st.exists {
		// A file that cannot be read is not a lost create (a lost one
		// reads as empty or absent): leave it to the reads of the key,
		// which report its damage, rather than refuse the whole store.
		return nil
	}
	img := slotImage(r.body, r.tok)
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		return storeFull(err)
	}
	return nil
}

// syncLogged makes the logged creates' files and directory entries
// durable: each file and directory when they are few, else one syncfs
// where the system has it. A syncfs writes whatever else is dirty on the
// device too, which on a device shared with a busy writer can take long;
// a few files are cheaper synced one by one.
func (c *Bucket) syncLogged(recs []logRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if len(recs) > syncEachMax {
		err := c.fsys.SyncFS(c.root)
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	dirs := map[string]bool{}
	for _, r := range recs {
		p, err := c.pathOf(r.key)
		if err != nil {
			return err
		}
		f, err := c.fsys.OpenFile(p.file, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced by a rename that was synced
		}
		if err != nil {
			return err
		}
		err = f.Datasync()
		f.Close()
		if err != nil {
			return err
		}
		dirs[p.dir] = true
	}
	for d := range dirs {
		if err := c.fsys.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// markDurable tells this process's writers that the logged versions are
// durable, so a CAS on one needs no flush first.
func (c *Bucket) markDurable(recs []logRecord) {
	for _, r := range recs {
		c.durable.set(r.key, r.tok)
	}
}
