//go:build unix

package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shardfence/shardfence/blobstore"
)

// keyLocks serializes the goroutines of one process per key, so at most one
// of them polls the key's flock and a waiter can give up when its context
// ends.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds a token while the key is locked
	refs int
}

func (k *keyLocks) acquire(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	drop := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}

// lockObject takes the key's lock: the in-process lock, then an exclusive
// flock of the key's own file, opened read-write; the returned file is the
// one locked, which the caller reads and writes through and must not
// close (unlock does). With create, a missing file is created, empty: a
// file with no valid slot reads as absent, so the empty file is the
// lock of a key that is being created. Without create, a missing file
// returns a nil file and the in-process lock held.
//
// The file at the key can be replaced (a rename over it) or unlinked by
// the lock's holder, so after the flock the file must still be the one at
// the key; if not, the waiter starts over on the new one. A writer that
// renames a file over the key holds that file's flock too (every
// temporary file is flocked by its writer until it is discarded), so the
// new file is locked from the moment it appears.
func (c *Bucket) lockObject(ctx context.Context, key string, p objectPath, create bool) (file, func(), error) {
	release, err := c.keyLocks.acquire(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("waiting for the key's lock: %w", err)
	}
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	for {
		f, err := c.fsys.OpenFile(p.file, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) && create {
			f, err = c.placePooled(p)
			if f == nil && err == nil {
				f, err = c.fsys.OpenFile(p.file, flag, 0o644)
			}
		}
		if errors.Is(err, os.ErrNotExist) && !create {
			return nil, release, nil
		}
		if err != nil {
			release()
			switch {
			case errors.Is(err, os.ErrNotExist):
				return nil, nil, blobstore.Unavailable(fmt.Errorf("the key's directory vanished (removed by another program?): %w", err))
			case isNameTooLong(err):
				return nil, nil, mapNameErr(err)
			}
			return nil, nil, blobstore.Unavailable(storeFull(fmt.Errorf("opening %s: %w", p.file, err)))
		}
		if err := flockCtx(ctx, f, unix.LOCK_EX); err != nil {
			f.Close()
			release()
			return nil, nil, err
		}
		var held, now unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &held); err != nil {
			f.Close()
			release()
			return nil, nil, blobstore.Unavailable(err)
		}
		err = unix.Stat(p.file, &now)
		if err == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return f, func() { _ = f.Close(); release() }, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, unix.ENOENT) {
			release()
			return nil, nil, blobstore.Unavailable(fmt.Errorf("checking %s: %w", p.file, err))
		}
		// The holder replaced or deleted the key's file: lock the new one.
	}
}

// Polling bounds for a lock held by another process: flock cannot be
// interrupted by a context, so the wait is non-blocking tries with backoff.
const (
	lockPollMin = 20 * time.Microsecond
	lockPollMax = 2 * time.Millisecond
)

func flockCtx(ctx context.Context, f interface {
	Fd() uintptr
	Name() string
}, how int) error {
	wait := lockPollMin
	var timer *time.Timer
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return blobstore.Unavailable(fmt.Errorf("locking %s: %w", f.Name(), err))
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("waiting for the key's lock held by another process: %w", ctx.Err())
		}
		wait = min(2*wait, lockPollMax)
	}
}
