// Package mem is an in-memory blobstore driver with the same semantics as the
// durable drivers, for fast unit tests and the protocol checker.
//
// URL form: mem://name[/prefix]. Containers opened with the same name in one
// process share their objects, so two actors in a test see one store.
package mem

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
)

func init() {
	blobstore.Register("mem", func(_ context.Context, u *url.URL) (blobstore.Container, error) {
		if u.Host == "" {
			return nil, fmt.Errorf("%w %q: want mem://name[/prefix]", blobstore.ErrBadURL, u.String())
		}
		prefix := strings.Trim(u.Path, "/")
		if prefix != "" {
			if err := blobstore.ValidateKey(prefix); err != nil {
				return nil, fmt.Errorf("%w %q: prefix: %v", blobstore.ErrBadURL, u.String(), err)
			}
			prefix += "/"
		}
		return &Container{s: named(u.Host), prefix: prefix, name: u.Host}, nil
	})
}

var (
	namedMu sync.Mutex
	stores  = map[string]*store{}
)

func named(name string) *store {
	namedMu.Lock()
	defer namedMu.Unlock()
	s, ok := stores[name]
	if !ok {
		s = newStore()
		stores[name] = s
	}
	return s
}

type entry struct {
	body  []byte
	token blobstore.Token
}

type store struct {
	mu      sync.Mutex
	objects map[string]entry
	keys    []string // sorted
	counter uint64
}

func newStore() *store { return &store{objects: map[string]entry{}} }

// Container is an in-memory container. The zero value is not usable: call New.
type Container struct {
	s      *store
	prefix string
	name   string
}

var _ blobstore.Container = (*Container)(nil)

// New returns an empty private store.
func New() *Container { return &Container{s: newStore(), name: "private"} }

func (c *Container) String() string {
	return "mem://" + c.name + "/" + c.prefix
}

// Capabilities: every conditional operation is enforced.
func (c *Container) Capabilities() blobstore.Capabilities {
	return blobstore.Capabilities{ConditionalCreate: true, ConditionalUpdate: true, ConditionalDelete: true}
}

func (c *Container) Close() error { return nil }

func (c *Container) check(ctx context.Context, op, key string) error {
	if err := blobstore.ValidateKey(key); err != nil {
		return blobstore.Wrap(op, c.String(), key, err)
	}
	if err := ctx.Err(); err != nil {
		return blobstore.Wrap(op, c.String(), key, err)
	}
	return nil
}

func (c *Container) fail(op, key string, err error) error {
	return blobstore.Wrap(op, c.String(), key, err)
}

// newToken must be called with s.mu held.
func (s *store) newToken() blobstore.Token {
	s.counter++
	return blobstore.Token(strconv.FormatUint(s.counter, 10))
}

// set must be called with s.mu held.
func (s *store) set(k string, body []byte) blobstore.Token {
	if _, ok := s.objects[k]; !ok {
		i := sort.SearchStrings(s.keys, k)
		s.keys = append(s.keys, "")
		copy(s.keys[i+1:], s.keys[i:])
		s.keys[i] = k
	}
	t := s.newToken()
	s.objects[k] = entry{body: append([]byte(nil), body...), token: t}
	return t
}

// remove must be called with s.mu held.
func (s *store) remove(k string) {
	if _, ok := s.objects[k]; !ok {
		return
	}
	delete(s.objects, k)
	i := sort.SearchStrings(s.keys, k)
	s.keys = append(s.keys[:i], s.keys[i+1:]...)
}

func (c *Container) Get(ctx context.Context, key string) (blobstore.Object, error) {
	if err := c.check(ctx, "Get", key); err != nil {
		return blobstore.Object{}, err
	}
	c.s.mu.Lock()
	e, ok := c.s.objects[c.prefix+key]
	c.s.mu.Unlock()
	if !ok {
		return blobstore.Object{}, c.fail("Get", key, blobstore.ErrNotFound)
	}
	return blobstore.Object{Key: key, Body: append([]byte{}, e.body...), Token: e.token}, nil
}

func (c *Container) Stat(ctx context.Context, key string) (blobstore.Attrs, error) {
	if err := c.check(ctx, "Stat", key); err != nil {
		return blobstore.Attrs{}, err
	}
	c.s.mu.Lock()
	e, ok := c.s.objects[c.prefix+key]
	c.s.mu.Unlock()
	if !ok {
		return blobstore.Attrs{}, c.fail("Stat", key, blobstore.ErrNotFound)
	}
	return blobstore.Attrs{Key: key, Size: int64(len(e.body)), Token: e.token}, nil
}

func (c *Container) Put(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	if err := c.check(ctx, "Put", key); err != nil {
		return "", err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.set(c.prefix+key, body), nil
}

func (c *Container) CreateIfAbsent(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	if err := c.check(ctx, "CreateIfAbsent", key); err != nil {
		return "", err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, ok := c.s.objects[c.prefix+key]; ok {
		return "", c.fail("CreateIfAbsent", key, blobstore.ErrAlreadyExists)
	}
	return c.s.set(c.prefix+key, body), nil
}

func (c *Container) CompareAndSwap(ctx context.Context, key string, expected blobstore.Token, body []byte) (blobstore.Token, error) {
	if err := c.check(ctx, "CompareAndSwap", key); err != nil {
		return "", err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e, ok := c.s.objects[c.prefix+key]
	if !ok || e.token != expected || expected == "" {
		return "", c.fail("CompareAndSwap", key, blobstore.ErrPreconditionFailed)
	}
	return c.s.set(c.prefix+key, body), nil
}

func (c *Container) Delete(ctx context.Context, key string) error {
	if err := c.check(ctx, "Delete", key); err != nil {
		return err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.remove(c.prefix + key)
	return nil
}

func (c *Container) DeleteIfMatch(ctx context.Context, key string, expected blobstore.Token) error {
	if err := c.check(ctx, "DeleteIfMatch", key); err != nil {
		return err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e, ok := c.s.objects[c.prefix+key]
	if !ok || e.token != expected {
		return c.fail("DeleteIfMatch", key, blobstore.ErrPreconditionFailed)
	}
	c.s.remove(c.prefix + key)
	return nil
}

func (c *Container) List(ctx context.Context, prefix, startAfter string, limit int) (blobstore.ListPage, error) {
	if err := blobstore.ValidatePrefix(prefix); err != nil {
		return blobstore.ListPage{}, c.fail("List", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return blobstore.ListPage{}, c.fail("List", prefix, err)
	}
	if limit <= 0 || limit > blobstore.DefaultListLimit {
		limit = blobstore.DefaultListLimit
	}
	full := c.prefix + prefix
	from := full
	if sa := c.prefix + startAfter; startAfter != "" && sa >= from {
		from = sa + "\x00"
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var page blobstore.ListPage
	for i := sort.SearchStrings(c.s.keys, from); i < len(c.s.keys); i++ {
		k := c.s.keys[i]
		if !strings.HasPrefix(k, full) {
			break
		}
		if len(page.Items) == limit {
			page.More = true
			break
		}
		e := c.s.objects[k]
		page.Items = append(page.Items, blobstore.Attrs{Key: k[len(c.prefix):], Size: int64(len(e.body)), Token: e.token})
	}
	return page, nil
}
