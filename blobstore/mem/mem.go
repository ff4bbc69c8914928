// Package mem is an in-memory blobstore driver with the same semantics as the
// durable drivers, for fast unit tests and benches.
//
// URL form: mem://name[/prefix]. Containers opened with the same name in one
// process share their objects, so two actors in a test see one store.
package mem

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

func init() {
	blobstore.Register("mem", func(_ context.Context, u *url.URL) (*blobstore.Container, error) {
		if u.Host == "" {
			return nil, fmt.Errorf("%w %q: want mem://name[/prefix]", blobstore.ErrBadURL, u.String())
		}
		return blobstore.NewAt(named(u.Host), u.Path)
	})
}

// The named stores are the driver's registry, like the scheme registry: a
// URL names a store shared by everyone in the process who opens it.
var (
	namedMu sync.Mutex
	stores  = map[string]*Bucket{}
)

func named(name string) *Bucket {
	namedMu.Lock()
	defer namedMu.Unlock()
	b, ok := stores[name]
	if !ok {
		b = NewBucket(name)
		stores[name] = b
	}
	return b
}

// New returns an empty private store.
func New() *blobstore.Container { return blobstore.New(NewBucket("private")) }

type entry struct {
	body  []byte
	token driver.Token
}

// Bucket is the in-memory driver: a sorted map of objects under one lock,
// with a counter for tokens.
type Bucket struct {
	name    string
	mu      sync.Mutex
	objects map[string]entry
	keys    []string // sorted
	counter uint64
}

var (
	_ driver.Bucket      = (*Bucket)(nil)
	_ driver.RangeReader = (*Bucket)(nil)
)

// NewBucket returns an empty store named name in messages.
func NewBucket(name string) *Bucket { return &Bucket{name: name, objects: map[string]entry{}} }

func (b *Bucket) String() string { return "mem://" + b.name }

// Capabilities: every conditional operation is enforced.
func (b *Bucket) Capabilities() driver.Capabilities {
	return driver.Capabilities{ConditionalCreate: true, ConditionalUpdate: true, ConditionalDelete: true}
}

func (b *Bucket) Close() error { return nil }

// Classify has nothing to place: every error is made in the kinds.
func (b *Bucket) Classify(_ driver.Op, err error) error { return err }

// set must be called with b.mu held.
func (b *Bucket) set(k string, body []byte) driver.Token {
	if _, ok := b.objects[k]; !ok {
		i := sort.SearchStrings(b.keys, k)
		b.keys = append(b.keys, "")
		copy(b.keys[i+1:], b.keys[i:])
		b.keys[i] = k
	}
	b.counter++
	t := driver.Token(strconv.FormatUint(b.counter, 10))
	b.objects[k] = entry{body: append([]byte(nil), body...), token: t}
	return t
}

// check tells whether pre holds for key; b.mu must be held.
func (b *Bucket) check(key string, pre driver.Precondition) error {
	e, ok := b.objects[key]
	switch {
	case pre.IfAbsent && ok:
		return blobstore.ErrAlreadyExists
	case pre.IfMatch != "" && (!ok || e.token != pre.IfMatch):
		return blobstore.ErrPreconditionFailed
	}
	return nil
}

func (b *Bucket) Get(_ context.Context, key string) (driver.Object, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.objects[key]
	if !ok {
		return driver.Object{}, blobstore.ErrNotFound
	}
	return driver.Object{Body: append([]byte{}, e.body...), Token: e.token}, nil
}

// NewRangeReader serves a range of the version stored now; bodies are
// never changed in place, so the stream needs no copy and no lock.
func (b *Bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	b.mu.Lock()
	e, ok := b.objects[key]
	b.mu.Unlock()
	if !ok {
		return nil, driver.Attrs{}, blobstore.ErrNotFound
	}
	if pre.IfMatch != "" && pre.IfMatch != e.token {
		return nil, driver.Attrs{}, fmt.Errorf("%w: the object was replaced since the pinned version", blobstore.ErrPreconditionFailed)
	}
	size := int64(len(e.body))
	end, err := driver.Range(size, offset, length, blobstore.ErrInvalidRange)
	if err != nil {
		return nil, driver.Attrs{}, err
	}
	return driver.ContextReader(ctx, bytes.NewReader(e.body[offset:end]), nil), driver.Attrs{Size: size, Token: e.token}, nil
}

func (b *Bucket) Stat(_ context.Context, key string) (driver.Attrs, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.objects[key]
	if !ok {
		return driver.Attrs{}, blobstore.ErrNotFound
	}
	return driver.Attrs{Size: int64(len(e.body)), Token: e.token}, nil
}

func (b *Bucket) Write(_ context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(key, pre); err != nil {
		return "", err
	}
	return b.set(key, body), nil
}

func (b *Bucket) Delete(_ context.Context, key string, pre driver.Precondition) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(key, pre); err != nil {
		return err
	}
	if _, ok := b.objects[key]; ok {
		delete(b.objects, key)
		i := sort.SearchStrings(b.keys, key)
		b.keys = append(b.keys[:i], b.keys[i+1:]...)
	}
	return nil
}

func (b *Bucket) List(_ context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	from := prefix
	if startAfter != "" && startAfter >= from {
		from = startAfter + "\x00"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var page driver.ListPage
	for i := sort.SearchStrings(b.keys, from); i < len(b.keys); i++ {
		k := b.keys[i]
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if len(page.Items) == limit {
			page.More = true
			break
		}
		e := b.objects[k]
		page.Items = append(page.Items, driver.Attrs{Key: k, Size: int64(len(e.body)), Token: e.token})
	}
	return page, nil
}
