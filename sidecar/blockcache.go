package sidecar

import (
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// castagnoli is the CRC-32C table: the checksum of the manifests, of the
// translog, and of every cached block.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func blockSum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// blockKey names one block of one checkpoint file of one shard's term.
type blockKey struct {
	shard string
	term  int64
	file  string
	index int64
}

// errBlockCorrupt: a cached block's bytes no longer match the checksum
// they were stored with; the entry is gone and the caller fetches again.
var errBlockCorrupt = errors.New("cached block does not match its checksum")

// blockCache is the sidecar's on-disk cache of checkpoint blocks read on
// demand: one file per block under dir, at most capacity bytes, the least
// recently used evicted first. Each block's CRC-32C is computed when it is
// stored and checked every time it is served, so a block the disk changed
// is refetched, never served. A block that cannot be written (a full or
// read-only disk) is not cached: put says why and the caller serves the
// bytes it fetched.
type blockCache struct {
	dir      string
	capacity int64

	mu      sync.Mutex
	used    int64
	lru     *list.List // of *cacheEntry, most recent first
	entries map[blockKey]*list.Element
	nextID  uint64
}

type cacheEntry struct {
	key  blockKey
	path string
	size int
	sum  uint32
}

func newBlockCache(dir string, capacity int64) *blockCache {
	return &blockCache{dir: dir, capacity: capacity, lru: list.New(), entries: map[blockKey]*list.Element{}}
}

// get returns the block of key if it is cached and its bytes match the
// checksum it was stored with: (nil, false, nil) on a miss, and
// errBlockCorrupt (the entry dropped) on a mismatch.
func (c *blockCache) get(key blockKey) ([]byte, bool, error) {
	c.mu.Lock()
	el, ok := c.entries[key]
	if !ok {
		c.mu.Unlock()
		return nil, false, nil
	}
	c.lru.MoveToFront(el)
	e := *el.Value.(*cacheEntry)
	c.mu.Unlock()
	b, err := os.ReadFile(e.path)
	if err != nil {
		// Evicted meanwhile, or the disk failed: a miss either way.
		c.drop(key, e.path)
		return nil, false, nil
	}
	if len(b) != e.size || blockSum(b) != e.sum {
		c.drop(key, e.path)
		return nil, false, fmt.Errorf("%w: block %d of %q (%d bytes, %d stored)", errBlockCorrupt, key.index, key.file, len(b), e.size)
	}
	return b, true, nil
}

// put stores b as the block of key, evicting the least recently used
// blocks beyond the capacity. An error means the block was not cached
// (the cache's disk is full or unwritable).
func (c *blockCache) put(key blockKey, b []byte) error {
	c.mu.Lock()
	if _, ok := c.entries[key]; ok {
		c.mu.Unlock()
		return nil
	}
	c.nextID++
	path := filepath.Join(c.dir, "b-"+strconv.FormatUint(c.nextID, 36))
	c.mu.Unlock()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("block cache %s: %w", c.dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("block cache %s: %w", c.dir, err)
	}
	var evicted []string
	c.mu.Lock()
	if _, ok := c.entries[key]; ok {
		c.mu.Unlock()
		_ = os.Remove(path)
		return nil
	}
	c.entries[key] = c.lru.PushFront(&cacheEntry{key: key, path: path, size: len(b), sum: blockSum(b)})
	c.used += int64(len(b))
	for c.used > c.capacity && c.lru.Len() > 1 {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.entries, e.key)
		c.used -= int64(e.size)
		evicted = append(evicted, e.path)
	}
	c.mu.Unlock()
	for _, p := range evicted {
		_ = os.Remove(p)
	}
	return nil
}

// drop removes the entry of key if it is still the one at path.
func (c *blockCache) drop(key blockKey, path string) {
	c.mu.Lock()
	el, ok := c.entries[key]
	if ok && el.Value.(*cacheEntry).path == path {
		c.lru.Remove(el)
		delete(c.entries, key)
		c.used -= int64(el.Value.(*cacheEntry).size)
	}
	c.mu.Unlock()
	_ = os.Remove(path)
}

// remove drops key's block, if cached.
func (c *blockCache) remove(key blockKey) {
	c.mu.Lock()
	el, ok := c.entries[key]
	c.mu.Unlock()
	if ok {
		c.drop(key, el.Value.(*cacheEntry).path)
	}
}

// dropShard removes every block of the shard's term: it turned full, or
// it closed.
func (c *blockCache) dropShard(shard string, term int64) {
	var paths []string
	c.mu.Lock()
	for k, el := range c.entries {
		if k.shard == shard && k.term == term {
			e := el.Value.(*cacheEntry)
			c.lru.Remove(el)
			delete(c.entries, k)
			c.used -= int64(e.size)
			paths = append(paths, e.path)
		}
	}
	c.mu.Unlock()
	for _, p := range paths {
		_ = os.Remove(p)
	}
}

// usage is the bytes and blocks cached now.
func (c *blockCache) usage() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, c.lru.Len()
}

// pathOf is where key's block is stored ("" if it is not): for tests that
// damage a block on disk.
func (c *blockCache) pathOf(key blockKey) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		return el.Value.(*cacheEntry).path
	}
	return ""
}
