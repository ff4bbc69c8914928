package blobstore

import (
	"context"
	"strings"
)

// Sub returns a view of c under prefix: every key is stored as prefix+key and
// listed without it. The prefix must be a valid key; a trailing '/' is added.
// Sub is how a shard's keys live under <root>/<shard>/ and how the
// conformance command keeps its scratch keys apart.
func Sub(c Container, prefix string) (Container, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if err := ValidateKey(prefix); err != nil {
		return nil, err
	}
	return &sub{c: c, prefix: prefix + "/"}, nil
}

type sub struct {
	c      Container
	prefix string
}

func (s *sub) String() string             { return s.c.String() + " (under " + s.prefix + ")" }
func (s *sub) Capabilities() Capabilities { return s.c.Capabilities() }
func (s *sub) Close() error               { return s.c.Close() }

// k validates the relative key, so a key like "../x" cannot reach out of the
// prefix even though prefix+key might look valid to the parent.
func (s *sub) k(op, key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", Wrap(op, s.String(), key, err)
	}
	return s.prefix + key, nil
}

func (s *sub) Get(ctx context.Context, key string) (Object, error) {
	k, err := s.k("Get", key)
	if err != nil {
		return Object{}, err
	}
	o, err := s.c.Get(ctx, k)
	o.Key = key
	return o, err
}

func (s *sub) Stat(ctx context.Context, key string) (Attrs, error) {
	k, err := s.k("Stat", key)
	if err != nil {
		return Attrs{}, err
	}
	a, err := s.c.Stat(ctx, k)
	a.Key = key
	return a, err
}

func (s *sub) Put(ctx context.Context, key string, body []byte) (Token, error) {
	k, err := s.k("Put", key)
	if err != nil {
		return "", err
	}
	return s.c.Put(ctx, k, body)
}

func (s *sub) CreateIfAbsent(ctx context.Context, key string, body []byte) (Token, error) {
	k, err := s.k("CreateIfAbsent", key)
	if err != nil {
		return "", err
	}
	return s.c.CreateIfAbsent(ctx, k, body)
}

func (s *sub) CompareAndSwap(ctx context.Context, key string, expected Token, body []byte) (Token, error) {
	k, err := s.k("CompareAndSwap", key)
	if err != nil {
		return "", err
	}
	return s.c.CompareAndSwap(ctx, k, expected, body)
}

func (s *sub) Delete(ctx context.Context, key string) error {
	k, err := s.k("Delete", key)
	if err != nil {
		return err
	}
	return s.c.Delete(ctx, k)
}

func (s *sub) DeleteIfMatch(ctx context.Context, key string, expected Token) error {
	k, err := s.k("DeleteIfMatch", key)
	if err != nil {
		return err
	}
	return s.c.DeleteIfMatch(ctx, k, expected)
}

func (s *sub) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return ListPage{}, Wrap("List", s.String(), prefix, err)
	}
	after := ""
	if startAfter != "" {
		after = s.prefix + startAfter
	}
	page, err := s.c.List(ctx, s.prefix+prefix, after, limit)
	for i := range page.Items {
		page.Items[i].Key = strings.TrimPrefix(page.Items[i].Key, s.prefix)
	}
	return page, err
}
