//go:build unix

package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// testStore is the portable container over a bucket whose insides the
// tests reach into.
type testStore struct {
	*blobstore.Container
	b *Bucket
}

func openTest(dir string) (testStore, error) {
	b, err := OpenBucket(dir)
	if err != nil {
		return testStore{}, err
	}
	return testStore{Container: blobstore.New(b), b: b}, nil
}

func newTestContainer(t *testing.T) testStore {
	t.Helper()
	c, err := openTest(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustPut(t *testing.T, c testStore, key, body string) blobstore.Token {
	t.Helper()
	tok, err := c.Put(t.Context(), key, []byte(body))
	if err != nil {
		t.Fatalf("Put %q: %v", key, err)
	}
	return tok
}

func mustGet(t *testing.T, c testStore, key string) blobstore.Object {
	t.Helper()
	o, err := c.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	return o
}

func TestConditionalWrites(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	const key = "fence/fence__0001"

	t1, err := c.CreateIfAbsent(ctx, key, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateIfAbsent(ctx, key, []byte("other")); !errors.Is(err, blobstore.ErrAlreadyExists) {
		t.Fatalf("second create: got %v, want ErrAlreadyExists", err)
	}
	t2, err := c.CompareAndSwap(ctx, key, t1, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if t2 == t1 {
		t.Fatal("CAS returned the old token")
	}
	if _, err := c.CompareAndSwap(ctx, key, t1, []byte("stale")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("stale CAS: got %v, want ErrPreconditionFailed", err)
	}
	if _, err := c.CompareAndSwap(ctx, key, "", []byte("empty")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("CAS with empty token: got %v, want ErrPreconditionFailed", err)
	}
	if _, err := c.CompareAndSwap(ctx, "fence/missing", t2, []byte("x")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("CAS on missing key: got %v, want ErrPreconditionFailed", err)
	}
	o := mustGet(t, c, key)
	if string(o.Body) != "two" || o.Token != t2 {
		t.Fatalf("Get = %q %s, want \"two\" %s", o.Body, o.Token, t2)
	}
	a, err := c.Stat(ctx, key)
	if err != nil || a.Size != 3 || a.Token != t2 {
		t.Fatalf("Stat = %+v, %v; want size 3 token %s", a, err, t2)
	}
	if err := c.DeleteIfMatch(ctx, key, t1); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("stale DeleteIfMatch: got %v", err)
	}
	if err := c.DeleteIfMatch(ctx, key, t2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, key); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get after delete: got %v, want ErrNotFound", err)
	}
	if err := c.DeleteIfMatch(ctx, key, t2); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("DeleteIfMatch on missing key: got %v", err)
	}
	if err := c.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	// A deleted key leaves no file behind.
	if p, _ := c.b.pathOf(key); true {
		if _, err := os.Stat(p.file); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("file of a deleted key: %v", err)
		}
	}
}

// Tokens come from the file, not from process memory: a recreated key and a
// reopened store never hand out a token seen before for other content.
func TestTokensNeverReused(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	seen := map[blobstore.Token]string{}
	note := func(tok blobstore.Token, body string) {
		t.Helper()
		if prev, ok := seen[tok]; ok {
			t.Fatalf("token %s reused: first for %q, now for %q", tok, prev, body)
		}
		seen[tok] = body
	}
	for round := range 3 {
		c, err := openTest(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			body := fmt.Sprintf("round %d write %d", round, i)
			tok, err := c.CreateIfAbsent(ctx, "k", []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			note(tok, body)
			if o := mustGet(t, c, "k"); o.Token != tok {
				t.Fatalf("Get token %s, create returned %s", o.Token, tok)
			}
			tok = mustPut(t, c, "k", body+" put")
			note(tok, body+" put")
			if err := c.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestKeyAndDirectoryCoexist(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	mustPut(t, c, "a/b", "child")
	mustPut(t, c, "a", "parent")
	mustPut(t, c, "a/b/c", "grandchild")
	for k, want := range map[string]string{"a": "parent", "a/b": "child", "a/b/c": "grandchild"} {
		if o := mustGet(t, c, k); string(o.Body) != want {
			t.Fatalf("Get %q = %q, want %q", k, o.Body, want)
		}
	}
	if err := c.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if o := mustGet(t, c, "a/b"); string(o.Body) != "child" {
		t.Fatalf("a/b after deleting a: %q", o.Body)
	}
	if _, err := c.Get(ctx, "a"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get a: %v", err)
	}
}

func listKeys(t *testing.T, c testStore, prefix, startAfter string, limit int) ([]string, bool) {
	t.Helper()
	page, err := c.List(t.Context(), prefix, startAfter, limit)
	if err != nil {
		t.Fatalf("List(%q, %q, %d): %v", prefix, startAfter, limit, err)
	}
	var keys []string
	for _, it := range page.Items {
		keys = append(keys, it.Key)
	}
	return keys, page.More
}

func TestListOrderTrickyKeys(t *testing.T) {
	c := newTestContainer(t)
	keys := []string{
		"a", "a/b", "a-b", "a.b", "a0", "a/b/c", "a/b-", "a/b.", "a/b!", "a/b0",
		"a!", "a/", "é", "é/x", "e\u0301", "日本/語", "日本", "z", "~", "a b", "o.x", "d.x",
		"a/\u00ff", "a/\U0001F600", "a/b/c/d/e",
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return blobstore.ValidateKey(k) != nil })
	bodies := map[string]string{}
	for i, k := range keys {
		body := strings.Repeat("x", i)
		mustPut(t, c, k, body)
		bodies[k] = body
	}
	want := slices.Clone(keys)
	sort.Strings(want)

	got, more := listKeys(t, c, "", "", 0)
	if more || !slices.Equal(got, want) {
		t.Fatalf("List all:\n got %q (more %v)\nwant %q", got, more, want)
	}
	page, err := c.List(t.Context(), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		o := mustGet(t, c, it.Key)
		if it.Token != o.Token || it.Size != int64(len(bodies[it.Key])) {
			t.Fatalf("List item %+v disagrees with Get (token %s, size %d)", it, o.Token, len(bodies[it.Key]))
		}
	}

	// Every prefix, including ones ending mid-segment or at a '/', and every
	// startAfter, in pages of every size, against the sorted key list.
	prefixes := []string{"", "a", "a/", "a/b", "a/b/", "a/b/c", "a-", "é", "日", "日本/", "zz", "a/b/c/d/"}
	for _, p := range prefixes {
		var wantP []string
		for _, k := range want {
			if strings.HasPrefix(k, p) {
				wantP = append(wantP, k)
			}
		}
		for _, after := range append([]string{"", "a/b", "a/b/", "a/b/c/d/e", "a0", "é", "\xff"}, wantP...) {
			var exp []string
			for _, k := range wantP {
				if k > after {
					exp = append(exp, k)
				}
			}
			for _, limit := range []int{1, 2, 3, 1000} {
				var all []string
				cursor := after
				for pages := 0; ; pages++ {
					if pages > len(want)+1 {
						t.Fatalf("List(%q, %q, %d) does not terminate", p, after, limit)
					}
					ks, more := listKeys(t, c, p, cursor, limit)
					if len(ks) > limit {
						t.Fatalf("List(%q, %q, %d) returned %d items", p, cursor, limit, len(ks))
					}
					all = append(all, ks...)
					if !more {
						break
					}
					cursor = ks[len(ks)-1]
				}
				if !slices.Equal(all, exp) {
					t.Fatalf("List prefix %q after %q limit %d:\n got %q\nwant %q", p, after, limit, all, exp)
				}
			}
		}
	}
}

func TestListWalksOnlyThePrefixSubtree(t *testing.T) {
	c := newTestContainer(t)
	mustPut(t, c, "shard1/fence/f1", "x")
	mustPut(t, c, "shard1/seal/s1", "x")
	// Replace a sibling subtree by a plain file: a walk that visits it fails
	// to read it as a directory.
	sibling := filepath.Join(c.b.objects, dirPrefix+"shard2")
	if err := os.WriteFile(sibling, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"shard1/", "shard1/fe", "shard1/fence/"} {
		got, _ := listKeys(t, c, p, "", 0)
		if len(got) == 0 || !strings.HasPrefix(got[0], "shard1/") {
			t.Fatalf("List %q: %q", p, got)
		}
	}
	if _, err := c.List(t.Context(), "shard", "", 0); err == nil {
		t.Fatal("a listing over the planted file read it without error")
	}
}

func TestKeyRules(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	long := strings.Repeat("s", c.b.maxSegment+1)
	for _, key := range []string{"../escape", "a/../../b", "/abs", "a//b", "a/./b", "", "x/" + long, long} {
		_, err := c.Put(ctx, key, []byte("x"))
		if !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Fatalf("Put %q: got %v, want ErrInvalidKey", key, err)
		}
		var oe *blobstore.OpError
		if !errors.As(err, &oe) || oe.Op != blobstore.OpPut || oe.Store != c.String() {
			t.Fatalf("Put %q: error %v is not an OpError naming the op and store", key, err)
		}
	}
	// The longest segment that fits is accepted.
	ok := strings.Repeat("s", c.b.maxSegment)
	mustPut(t, c, ok+"/"+ok, "fits")
	if got, _ := listKeys(t, c, ok[:10], "", 0); !slices.Equal(got, []string{ok + "/" + ok}) {
		t.Fatalf("list of long key: %q", got)
	}
	// Nothing escaped the object tree.
	entries, err := os.ReadDir(c.b.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{logName, formatName, locksDir, objectsDir, tmpDir}) {
		t.Fatalf("store directory holds %q", names)
	}
}

// A damaged single-version file (a large object) is ErrCorruptObject.
func TestCorruptObjectIsReported(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	mustPut(t, c, "k", strings.Repeat("hello world ", 10000))
	p, err := c.b.pathOf("k")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p.file)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 0xff
	if err := os.WriteFile(p.file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, ErrCorruptObject) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("Get of a flipped byte: %v", err)
	}
	if err := os.WriteFile(p.file, raw[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "k"); !errors.Is(err, ErrCorruptObject) {
		t.Fatalf("Stat of a truncated file: %v", err)
	}
	if _, err := c.List(ctx, "", "", 0); !errors.Is(err, ErrCorruptObject) {
		t.Fatalf("List over a truncated file: %v", err)
	}
}

// A slot file whose current slot fails its checksum reads as the other
// slot's version: the format cannot tell a slot torn by a write that was
// never acknowledged from one damaged later. With both slots damaged the
// key reads as absent, like a create that never completed, and a create
// succeeds over it.
func TestDamagedSlots(t *testing.T) {
	ctx := t.Context()
	c := newTestContainer(t)
	t1, err := c.CreateIfAbsent(ctx, "k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	t2, err := c.CompareAndSwap(ctx, "k", t1, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.b.pathOf("k")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p.file)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 2*slotAlign {
		t.Fatalf("slot file of a 3-byte body is %d bytes, want %d", len(raw), 2*slotAlign)
	}
	if o := mustGet(t, c, "k"); string(o.Body) != "two" || o.Token != t2 {
		t.Fatalf("Get = %q %s, want two %s", o.Body, o.Token, t2)
	}
	raw[slotAlign+slotHeaderLen] ^= 0xff // slot 1 holds "two"
	if err := os.WriteFile(p.file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if o := mustGet(t, c, "k"); string(o.Body) != "one" || o.Token != t1 {
		t.Fatalf("Get with slot 1 damaged = %q %s, want one %s", o.Body, o.Token, t1)
	}
	raw[slotHeaderLen] ^= 0xff
	if err := os.WriteFile(p.file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get with both slots damaged: %v, want ErrNotFound", err)
	}
	if keys, _ := listKeys(t, c, "", "", 0); len(keys) != 0 {
		t.Fatalf("List with both slots damaged: %q", keys)
	}
	if _, err := c.CompareAndSwap(ctx, "k", t1, []byte("x")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("CAS over no valid slot: %v", err)
	}
	t3, err := c.CreateIfAbsent(ctx, "k", []byte("three"))
	if err != nil {
		t.Fatalf("create over no valid slot: %v", err)
	}
	if o := mustGet(t, c, "k"); string(o.Body) != "three" || o.Token != t3 {
		t.Fatalf("Get = %q %s, want three %s", o.Body, o.Token, t3)
	}
}

func TestOpenRefusesUnknownFormat(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, formatName), []byte("something else 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openTest(dir); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("Open: got %v, want ErrBadLayout", err)
	}
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openTest(foreign); !errors.Is(err, ErrBadLayout) || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("Open of a directory with other files: got %v, want ErrBadLayout naming the file", err)
	}
	if entries, _ := os.ReadDir(foreign); len(entries) != 1 {
		t.Fatalf("Open of a foreign directory changed it: %d entries", len(entries))
	}
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openTest(file); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("Open of a file: got %v, want ErrBadLayout", err)
	}
}

func TestOpenCreatesNestedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x", "y", "store")
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, "k", "v")
	c2, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o := mustGet(t, c2, "k"); string(o.Body) != "v" {
		t.Fatalf("reopened store reads %q", o.Body)
	}
}

func TestOpenURL(t *testing.T) {
	ctx := t.Context()
	abs := t.TempDir()
	c, err := blobstore.Open(ctx, "file://"+abs)
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != "file://"+abs {
		t.Fatalf("String() = %q", c.String())
	}
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	t.Chdir(t.TempDir())
	rel, err := blobstore.Open(ctx, "file://./data/store")
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if got := rel.String(); got != "file://"+filepath.Join(wd, "data", "store") {
		t.Fatalf("relative store at %q", got)
	}

	for _, bad := range []string{"file://host/dir", "file:rel", "file://", "file:///x?secret=1"} {
		if _, err := blobstore.Open(ctx, bad); !errors.Is(err, blobstore.ErrBadURL) {
			t.Fatalf("Open %q: got %v, want ErrBadURL", bad, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := blobstore.Open(cancelled, "file://"+abs); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v", err)
	}
	u, _ := url.Parse("file://localhost" + abs)
	if d, err := dirFromURL(u); err != nil || d != abs {
		t.Fatalf("localhost URL: %q, %v", d, err)
	}
}

// A CAS waiting for a key locked by another holder (here a second
// container, standing in for another process) gives up when its context
// ends, and leaves the object alone.
func TestLockWaitHonoursContext(t *testing.T) {
	dir := t.TempDir()
	a, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok := mustPut(t, a, "k", "v1")
	unlock, err := lockKey(t.Context(), a, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = b.CompareAndSwap(ctx, "k", tok, []byte("v2"))
	if !errors.Is(err, context.DeadlineExceeded) || blobstore.IsAmbiguous(err) {
		t.Fatalf("CAS behind a held lock: got %v, want a definite DeadlineExceeded", err)
	}
	unlock()
	if o := mustGet(t, b, "k"); string(o.Body) != "v1" || o.Token != tok {
		t.Fatalf("object changed by a timed-out CAS: %q", o.Body)
	}
	if _, err := b.CompareAndSwap(t.Context(), "k", tok, []byte("v2")); err != nil {
		t.Fatalf("CAS after the lock is free: %v", err)
	}
	if n := countFiles(t, filepath.Join(dir, tmpDir)); n != 0 {
		t.Fatalf("%d temporary files left after the timed-out CAS", n)
	}
}

func TestCancelledContextWritesNothing(t *testing.T) {
	c := newTestContainer(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Put(ctx, "k", []byte("v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: %v", err)
	}
	if _, err := c.CreateIfAbsent(ctx, "k", []byte("v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateIfAbsent: %v", err)
	}
	if _, err := c.Get(t.Context(), "k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
}

func TestLargeBody(t *testing.T) {
	c := newTestContainer(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), (combineLimit*3)/16+7)
	tok, err := c.CreateIfAbsent(t.Context(), "big", body)
	if err != nil {
		t.Fatal(err)
	}
	o := mustGet(t, c, "big")
	if !bytes.Equal(o.Body, body) || o.Token != tok {
		t.Fatalf("large body read back wrong (%d bytes)", len(o.Body))
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// Deleting a key removes its lock file while another holder may be waiting
// on it; that waiter must end up holding the lock file now at the path, so a
// third caller still has to wait for it.
// lockKey takes the key's lock as a writer does.
func lockKey(ctx context.Context, c testStore, key string, create bool) (func(), error) {
	p, err := c.b.pathOf(key)
	if err != nil {
		return nil, err
	}
	_, unlock, err := c.b.lockObject(ctx, key, p, create)
	return unlock, err
}

// The key's lock is the flock of the key's file: a waiter whose file is
// deleted (or replaced) while it waits locks the file that is at the key
// when it gets its turn, so two writers never both hold the key.
func TestKeyLockFollowsTheKeysFile(t *testing.T) {
	dir := t.TempDir()
	var cs []testStore
	for range 3 {
		c, err := openTest(dir)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	mustPut(t, cs[0], "k", "v")
	p, _ := cs[0].b.pathOf("k")
	unlockA, err := lockKey(t.Context(), cs[0], "k", true)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := lockKey(t.Context(), cs[1], "k", true)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		got <- u
	}()
	// Give the waiter time to open the file that is about to go.
	time.Sleep(20 * time.Millisecond)
	if err := os.Remove(p.file); err != nil {
		t.Fatal(err)
	}
	unlockA()
	unlockB := <-got
	if unlockB == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := lockKey(ctx, cs[2], "k", true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third caller took the key's lock while it was held: %v", err)
	}
	unlockB()
	unlockC, err := lockKey(t.Context(), cs[2], "k", true)
	if err != nil {
		t.Fatal(err)
	}
	unlockC()
}

// Two processes opening the same new directory: one finds no FORMAT, the
// other writes it, and the first then lists the directory. It must take the
// FORMAT for a concurrent first open, not for a foreign file.
func TestFirstOpenSeesAConcurrentFirstOpensFormat(t *testing.T) {
	dir := t.TempDir()
	late := &Bucket{root: dir}
	if err := late.checkFormat(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a new directory: checkFormat = %v, want not exist", err)
	}
	if _, err := OpenBucket(dir); err != nil {
		t.Fatal(err)
	}
	if err := late.checkOnlyOurs(); err != nil {
		t.Fatalf("the directory after another first open: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, formatName), []byte("other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := late.checkOnlyOurs(); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("a FORMAT of another kind: %v, want ErrBadLayout", err)
	}
}
