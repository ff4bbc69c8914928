package fence

import (
	"context"
	"errors"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
)

// faultStore wraps a real container and lets a test decide, per request,
// what goes wrong. It stays local to this package's tests; the shared fault
// injector covers the seeded and latency cases.
type faultStore struct {
	blobstore.Container
	mu     sync.Mutex
	hook   func(op, key string) fault
	held   []func()
	bodies map[string][][]byte // every body written per key, in order
}

type fault int

const (
	pass       fault = iota
	failBefore       // ErrUnavailable, nothing applied
	conflict         // S3's 409, nothing applied
	loseResp         // applied, then the response is lost (ErrAmbiguous)
	loseReq          // not applied, ErrAmbiguous (a timeout before the store saw it)
	holdReq          // not applied yet, ErrAmbiguous; applied when release is called
	dropDelete       // Delete reports success without deleting
)

var errInjected = errors.New("injected fault")

func newFaultStore(c blobstore.Container) *faultStore {
	return &faultStore{Container: c, bodies: map[string][][]byte{}}
}

func (f *faultStore) setHook(h func(op, key string) fault) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func (f *faultStore) decide(op, key string) fault {
	f.mu.Lock()
	h := f.hook
	f.mu.Unlock()
	if h == nil {
		return pass
	}
	return h(op, key)
}

// release applies every held request, oldest first.
func (f *faultStore) release() {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, h := range held {
		h()
	}
}

func (f *faultStore) record(key string, body []byte) {
	f.mu.Lock()
	f.bodies[key] = append(f.bodies[key], append([]byte(nil), body...))
	f.mu.Unlock()
}

func (f *faultStore) written(key string) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.bodies[key]...)
}

func (f *faultStore) write(op, key string, body []byte, do func(ctx context.Context) (blobstore.Token, error)) (blobstore.Token, error) {
	wrap := func(err error) error { return blobstore.Wrap(op, f.String(), key, err) }
	switch f.decide(op, key) {
	case failBefore:
		return "", wrap(blobstore.Unavailable(errInjected))
	case conflict:
		return "", wrap(blobstore.ErrConflict)
	case loseReq:
		return "", wrap(blobstore.Ambiguous(errInjected))
	case holdReq:
		f.mu.Lock()
		f.held = append(f.held, func() {
			if _, err := do(context.Background()); err == nil {
				f.record(key, body)
			}
		})
		f.mu.Unlock()
		return "", wrap(blobstore.Ambiguous(errInjected))
	case loseResp:
		if _, err := do(context.Background()); err == nil {
			f.record(key, body)
		}
		return "", wrap(blobstore.Ambiguous(errInjected))
	}
	tok, err := do(context.Background())
	if err == nil {
		f.record(key, body)
	}
	return tok, err
}

func (f *faultStore) Put(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	return f.write("Put", key, body, func(ctx context.Context) (blobstore.Token, error) { return f.Container.Put(ctx, key, body) })
}

func (f *faultStore) CreateIfAbsent(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	return f.write("CreateIfAbsent", key, body, func(ctx context.Context) (blobstore.Token, error) {
		return f.Container.CreateIfAbsent(ctx, key, body)
	})
}

func (f *faultStore) CompareAndSwap(ctx context.Context, key string, expected blobstore.Token, body []byte) (blobstore.Token, error) {
	return f.write("CompareAndSwap", key, body, func(ctx context.Context) (blobstore.Token, error) {
		return f.Container.CompareAndSwap(ctx, key, expected, body)
	})
}

func (f *faultStore) Delete(ctx context.Context, key string) error {
	switch f.decide("Delete", key) {
	case dropDelete:
		return nil
	case failBefore:
		return blobstore.Wrap("Delete", f.String(), key, blobstore.Unavailable(errInjected))
	case loseResp:
		_ = f.Container.Delete(ctx, key)
		return blobstore.Wrap("Delete", f.String(), key, blobstore.Ambiguous(errInjected))
	}
	return f.Container.Delete(ctx, key)
}

func (f *faultStore) Get(ctx context.Context, key string) (blobstore.Object, error) {
	switch f.decide("Get", key) {
	case failBefore, loseReq, loseResp:
		return blobstore.Object{}, blobstore.Wrap("Get", f.String(), key, blobstore.Ambiguous(errInjected))
	}
	return f.Container.Get(ctx, key)
}

func (f *faultStore) List(ctx context.Context, prefix, startAfter string, limit int) (blobstore.ListPage, error) {
	switch f.decide("List", prefix) {
	case failBefore, loseReq, loseResp:
		return blobstore.ListPage{}, blobstore.Wrap("List", f.String(), prefix, blobstore.Unavailable(errInjected))
	}
	return f.Container.List(ctx, prefix, startAfter, limit)
}

// nth returns a hook that injects f on the n-th (1-based) request of op on
// keys with the given prefix, and passes everything else.
func nth(op, keyPrefix string, n int, f fault) func(string, string) fault {
	var mu sync.Mutex
	seen := 0
	return func(o, k string) fault {
		if o != op || len(k) < len(keyPrefix) || k[:len(keyPrefix)] != keyPrefix {
			return pass
		}
		mu.Lock()
		defer mu.Unlock()
		seen++
		if seen == n {
			return f
		}
		return pass
	}
}
