//go:build unix

package fs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// lockPath names the key's lock file by a 128-bit hash, which keeps lock
// names short and flat whatever the key.
func (c *Bucket) lockPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(c.locks, hex.EncodeToString(sum[:16]))
}

// lockKey takes the key's lock in this process and then across processes.
// The returned unlock releases both; with remove it first deletes the lock
// file, which is safe because a waiter that then gets the flock sees its
// file is no longer the one at the path and starts over.
func (c *Bucket) lockKey(ctx context.Context, key string) (func(remove bool), error) {
	release, err := c.keyLocks.acquire(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("waiting for the key's lock: %w", err)
	}
	path := c.lockPath(key)
	f, err := lockFile(ctx, path)
	if err != nil {
		release()
		return nil, err
	}
	return func(remove bool) {
		if remove {
			_ = os.Remove(path)
		}
		_ = f.Close()
		release()
	}, nil
}

// Polling bounds for a lock held by another process: flock cannot be
// interrupted by a context, so the wait is non-blocking tries with backoff.
const (
	lockPollMin = 20 * time.Microsecond
	lockPollMax = 2 * time.Millisecond
)

func lockFile(ctx context.Context, path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, blobstore.Unavailable(fmt.Errorf("opening lock file %s: %w", path, err))
		}
		if err := flockCtx(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		var held, now unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &held); err != nil {
			f.Close()
			return nil, blobstore.Unavailable(err)
		}
		err = unix.Stat(path, &now)
		if err == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return f, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, blobstore.Unavailable(fmt.Errorf("checking lock file %s: %w", path, err))
		}
		// The holder deleted the key and its lock file: lock the new one.
	}
}

func flockCtx(ctx context.Context, f *os.File) error {
	wait := lockPollMin
	var timer *time.Timer
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
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
