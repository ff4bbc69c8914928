//go:build unix

package fs

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// A new object's file comes from a pool of unnamed files (O_TMPFILE)
// allocated ahead of time and linked in place: allocating an inode can
// cost far more than the create's one fdatasync (several times the floor
// on some virtualized disks), while a link costs a directory change. A
// pooled file has no name until it is linked, so nothing of the pool is
// ever seen in the store's directory, a dead process leaves nothing, and
// link(2) refuses an existing name as a create needs. The file is flocked
// before it is linked, so it is locked from the moment it appears at a key
// (lockObject), and empty, which at a key reads as absent: a create that
// fails after the link leaves nothing visible. Nothing about it is synced:
// the create that takes it makes it durable. Where the system has no
// unnamed files, creates make their own.
const poolSize = 32

type filePool struct {
	c *Bucket

	mu      sync.Mutex
	files   []file
	filling bool
	stopped chan struct{} // closed when the filling goroutine ends
	closed  bool
	off     bool // unnamed files are not supported here, or failed
	// inline: take makes each file when asked, on the caller's
	// goroutine (the power-cut model asks for it, so a seed replays
	// exactly).
	inline bool
}

// inlinePool is implemented by file systems that want pooled files made
// on the caller's goroutine.
type inlinePool interface{ inlinePool() bool }

func newFilePool(c *Bucket) *filePool {
	ip, ok := c.fsys.(inlinePool)
	return &filePool{c: c, inline: ok && ip.inlinePool()}
}

// make creates one unnamed file, flocked.
func (p *filePool) make() (file, error) {
	f, err := p.c.fsys.OpenUnnamed(p.c.tmp)
	if err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// take returns a pooled file, open and flocked, or nil when none is
// ready, and starts a refill below half.
func (p *filePool) take() file {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.off {
		return nil
	}
	if p.inline {
		f, err := p.make()
		if err != nil {
			return nil
		}
		return f
	}
	var f file
	if n := len(p.files); n > 0 {
		f = p.files[n-1]
		p.files = p.files[:n-1]
	}
	if len(p.files) < poolSize/2 && !p.filling {
		p.filling = true
		p.stopped = make(chan struct{})
		go p.fill(p.stopped)
	}
	return f
}

func (p *filePool) fill(stopped chan struct{}) {
	defer close(stopped)
	for {
		p.mu.Lock()
		if p.closed || len(p.files) >= poolSize {
			p.filling = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		f, err := p.make()
		p.mu.Lock()
		if err != nil {
			// Unsupported (EOPNOTSUPP, EISDIR on old kernels), or the
			// store's directory is gone: creates make their own files.
			p.off, p.filling = true, false
			p.mu.Unlock()
			return
		}
		if p.closed {
			p.filling = false
			p.mu.Unlock()
			f.Close()
			return
		}
		p.files = append(p.files, f)
		p.mu.Unlock()
	}
}

// close stops the filling and closes the pooled files, which frees them.
func (p *filePool) close() {
	p.mu.Lock()
	p.closed = true
	stopped := p.stopped
	p.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
	p.mu.Lock()
	files := p.files
	p.files = nil
	p.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
}

// placePooled links a pooled file, empty and flocked by this process, at
// the key's missing file. It returns nil and no error when the pool has
// none ready or the key's file appeared meanwhile; the caller then opens
// the key's file, creating it.
func (c *Bucket) placePooled(p objectPath) (file, error) {
	f := c.pool.take()
	if f == nil {
		return nil, nil
	}
	err := c.fsys.LinkUnnamed(f, p.file)
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, unix.EEXIST):
		f.Close()
		return nil, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENAMETOOLONG):
		f.Close()
		return nil, err
	}
	// Linking an unnamed file is refused here (no /proc, no privilege
	// for AT_EMPTY_PATH): creates make their own files from now on.
	f.Close()
	c.pool.mu.Lock()
	c.pool.off = true
	c.pool.mu.Unlock()
	return nil, nil
}
