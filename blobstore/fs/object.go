//go:build unix

package fs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/shardfence/shardfence/blobstore"
)

// Single-version files: a header (magic, token, body length, CRC-32C of the
// body) followed by the body, never changed in place. Bodies larger than
// maxSlotBody are stored so (by a fsynced temporary file renamed over the
// key), and so were all objects before slot files (slots.go) existed.
const (
	headerLen = 32
	tokenLen  = 16
)

var (
	magic      = [4]byte{'S', 'F', 'O', 1}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// combineLimit is the largest body copied behind its header for a single
// write; larger bodies are written in two calls rather than copied.
const combineLimit = 64 << 10

func encodeHeader(h []byte, tok [tokenLen]byte, body []byte) {
	copy(h[0:4], magic[:])
	copy(h[4:20], tok[:])
	binary.LittleEndian.PutUint64(h[20:28], uint64(len(body)))
	binary.LittleEndian.PutUint32(h[28:32], crc32.Checksum(body, castagnoli))
}

// decodeHeader checks the magic and that the file size matches the recorded
// body length, and returns the token and the recorded CRC.
func decodeHeader(h []byte, fileSize int64) (blobstore.Token, uint32, error) {
	if fileSize < headerLen || len(h) < headerLen {
		return "", 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorruptObject, fileSize, headerLen)
	}
	if [4]byte(h[0:4]) != magic {
		return "", 0, fmt.Errorf("%w: bad magic %x", ErrCorruptObject, h[0:4])
	}
	n := binary.LittleEndian.Uint64(h[20:28])
	if n != uint64(fileSize-headerLen) {
		return "", 0, fmt.Errorf("%w: header records %d body bytes, file holds %d", ErrCorruptObject, n, fileSize-headerLen)
	}
	return blobstore.Token(hex.EncodeToString(h[4:20])), binary.LittleEndian.Uint32(h[28:32]), nil
}

// readHeader reads and checks the header of an open object file: its
// token, body size and body CRC. Everything read from f afterwards belongs
// to that version, whatever replaces the key meanwhile.
func readHeader(f *os.File, path string) (blobstore.Token, int64, uint32, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}
	var h [headerLen]byte
	if fi.Size() >= headerLen {
		if _, err := f.ReadAt(h[:], 0); err != nil {
			return "", 0, 0, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	tok, sum, err := decodeHeader(h[:], fi.Size())
	if err != nil {
		return "", 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return tok, fi.Size() - headerLen, sum, nil
}

// bodyReader streams bytes of one open object file by pread (a section
// reader, so no shared file offset). It turns a file that ends before the
// range the header promised (cut in place by another program) into
// ErrCorruptObject rather than a short stream, and when it covers the
// whole body it checks the body's CRC at the end, so a whole stream is as
// safe as Get; a partial range cannot be checked.
type bodyReader struct {
	r      *io.SectionReader
	left   int64 // bytes of the range not read yet
	path   string
	verify bool // the range is the whole body: check crc against sum
	crc    uint32
	sum    uint32
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.verify {
		b.crc = crc32.Update(b.crc, castagnoli, p[:n])
	}
	if err != io.EOF {
		return n, err
	}
	switch {
	case b.left > 0:
		return n, fmt.Errorf("%w: %s: the file ended %d bytes before the length its header records", ErrCorruptObject, b.path, b.left)
	case b.verify && b.crc != b.sum:
		return n, fmt.Errorf("%w: %s: body checksum mismatch", ErrCorruptObject, b.path)
	}
	return n, io.EOF
}

// tempFile is a write in flight. Its creator holds an exclusive flock on it
// for its whole life, which is how RemoveStaleTemp tells a live writer's
// file from a dead one's without trusting pids or clocks.
type tempFile struct {
	f         file
	fsys      fileSystem
	path      string
	published bool // renamed into place: the name no longer exists
}

// discard removes an unpublished temporary file, then releases its lock:
// in that order, a cleaner never finds our name unlocked.
func (t *tempFile) discard() {
	if t.f == nil {
		return
	}
	if !t.published {
		_ = t.fsys.Remove(t.path)
	}
	_ = t.f.Close()
	t.f = nil
}

func (c *Bucket) createTemp() (*tempFile, error) { return c.createTempNamed("w") }

func (c *Bucket) createTempNamed(label string) (*tempFile, error) {
	for attempt := 0; attempt < 8; attempt++ {
		var rnd [12]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, err
		}
		path := filepath.Join(c.tmp, hex.EncodeToString(rnd[:])+"-"+label)
		f, err := c.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating a temporary file in %s: %w", c.tmp, err)
		}
		if err := flock(f, unix.LOCK_EX); err != nil {
			f.Close()
			_ = c.fsys.Remove(path)
			return nil, fmt.Errorf("locking temporary file %s: %w", path, err)
		}
		// A cleaner may have locked and unlinked the file between our
		// create and our lock; then start over under a new name.
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return nil, err
		}
		if st.Nlink == 0 {
			f.Close()
			continue
		}
		return &tempFile{f: f, fsys: c.fsys, path: path}, nil
	}
	return nil, fmt.Errorf("creating a temporary file in %s: gave up after repeated name clashes", c.tmp)
}

func newToken() ([tokenLen]byte, error) {
	var t [tokenLen]byte
	_, err := rand.Read(t[:])
	return t, err
}

// storeFull says so when a write failed for lack of space or quota: every
// write needs a temporary file first, so a full device stops them all.
func storeFull(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("store full (free space or quota on the store's device): %w", err)
	}
	return err
}

// writeTemp writes header and body to a new temporary file and makes its
// data durable. Errors here precede any visible effect.
func (c *Bucket) writeTemp(body []byte) (*tempFile, blobstore.Token, error) {
	tok, err := newToken()
	if err != nil {
		return nil, "", blobstore.Unavailable(err)
	}
	t, err := c.createTemp()
	if err != nil {
		return nil, "", blobstore.Unavailable(storeFull(err))
	}
	if err := writeBody(t.f, tok, body); err != nil {
		t.discard()
		return nil, "", blobstore.Unavailable(storeFull(fmt.Errorf("writing temporary file %s: %w", t.path, err)))
	}
	if err := t.f.Datasync(); err != nil {
		t.discard()
		return nil, "", blobstore.Unavailable(storeFull(fmt.Errorf("syncing temporary file %s: %w", t.path, err)))
	}
	if c.hook != nil {
		c.hook("temp-synced")
	}
	return t, blobstore.Token(hex.EncodeToString(tok[:])), nil
}

func writeBody(f io.Writer, tok [tokenLen]byte, body []byte) error {
	if len(body) <= combineLimit {
		buf := make([]byte, headerLen+len(body))
		encodeHeader(buf, tok, body)
		copy(buf[headerLen:], body)
		_, err := f.Write(buf)
		return err
	}
	var h [headerLen]byte
	encodeHeader(h[:], tok, body)
	if _, err := f.Write(h[:]); err != nil {
		return err
	}
	_, err := f.Write(body)
	return err
}

// RemoveStaleTemp removes temporary files whose writer is gone: a file
// whose flock can be taken has no live writer, since every writer holds its
// lock until the file is renamed away or removed. Open calls it; a
// long-running process may call it from time to time. It returns how many
// files it removed.
func (c *Bucket) RemoveStaleTemp(ctx context.Context) (int, error) {
	d, err := os.Open(c.tmp)
	if err != nil {
		return 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		ok, err := removeIfAbandoned(filepath.Join(c.tmp, name))
		if err != nil {
			return removed, err
		}
		if ok {
			removed++
		}
	}
	return removed, nil
}

func removeIfAbandoned(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR) {
			return false, nil // a live writer
		}
		return false, fmt.Errorf("locking %s: %w", path, err)
	}
	// The writer may have finished and renamed the file away after we
	// opened it; remove the name only if it still names what we locked.
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return false, err
	}
	if err := unix.Stat(path, &now); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if held.Ino != now.Ino || held.Dev != now.Dev {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// flock takes a blocking flock, retrying on EINTR.
func flock(f interface{ Fd() uintptr }, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
