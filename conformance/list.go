package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
)

// putKeys writes every key with its own name as body, concurrently, because
// over a thousand sequential PUTs dominate a run on a real store.
func putKeys(t T, c *blobstore.Container, keys []string) map[string]blobstore.Token {
	t.Helper()
	var mu sync.Mutex
	toks := make(map[string]blobstore.Token, len(keys))
	var firstErr error
	forEach(t.Context(), keys, 32, func(ctx context.Context, k string) {
		tok, err := c.Put(ctx, k, []byte(k))
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("writing %q: %w", k, err)
		}
		toks[k] = tok
	})
	mustOK(t, firstErr, fmt.Sprintf("writing %d keys", len(keys)))
	return toks
}

// pageThrough lists prefix from startAfter in pages of limit, checking every
// page's shape, and returns the keys in the order listed.
func pageThrough(t T, c *blobstore.Container, prefix, startAfter string, limit int, what string) []string {
	t.Helper()
	var got []string
	after := startAfter
	for pages := 0; ; pages++ {
		if pages > 5000 {
			t.Errorf("%s: more than 5000 pages; the listing does not advance", what)
			return got
		}
		page, err := c.List(t.Context(), prefix, after, limit)
		if err != nil {
			t.Errorf("%s: List(%q, after %q, limit %d): %v", what, prefix, after, limit, err)
			return got
		}
		if limit > 0 && len(page.Items) > limit {
			t.Errorf("%s: page of %d items exceeds the limit %d", what, len(page.Items), limit)
		}
		for _, it := range page.Items {
			if it.Key <= after && after != "" {
				t.Errorf("%s: key %q listed after startAfter %q, not strictly above it", what, it.Key, after)
			}
			if len(got) > 0 && it.Key <= got[len(got)-1] {
				t.Errorf("%s: key %q listed after %q: not in increasing byte order", what, it.Key, got[len(got)-1])
			}
			got = append(got, it.Key)
			after = it.Key
		}
		if !page.More || len(page.Items) == 0 {
			if page.More {
				t.Errorf("%s: empty page with More set; a caller would loop forever", what)
			}
			return got
		}
	}
}

// listKeys is a thousand-plus keys whose byte order differs from numeric
// order ("n/10" < "n/9") plus punctuation that sorts around '/'.
func listKeys() []string {
	var keys []string
	for i := range 1100 {
		keys = append(keys, "list/n/"+strconv.Itoa(i))
	}
	// No key here is a path prefix of another ("a" beside "a/b"): stores
	// built on a filesystem cannot hold both, the protocol never needs it,
	// and keys-object-and-prefix reports it on its own.
	for _, s := range []string{"A", "Z", "a/c", "z", "0", "9", "_", "~", "a-b", "a.b", "a/b", "a0", "a b", "a+b", "n-", "n.", "n0", "m", "o"} {
		keys = append(keys, "list/"+s)
	}
	return keys
}

func checkListPagination(t T, c *blobstore.Container) {
	ctx := t.Context()
	keys := listKeys()
	toks := putKeys(t, c, keys)
	want := slices.Sorted(slices.Values(keys))

	first, err := c.List(ctx, "list/", "", blobstore.DefaultListLimit)
	mustOK(t, err, "List with the default limit")
	if len(first.Items) == 0 || len(first.Items) > blobstore.DefaultListLimit || !first.More {
		t.Errorf("first page of %d keys with limit %d: %d items, More=%v; want 1..%d items and More", len(want), blobstore.DefaultListLimit, len(first.Items), first.More, blobstore.DefaultListLimit)
	}
	for _, it := range first.Items[:min(len(first.Items), 5)] {
		if it.Size != int64(len(it.Key)) {
			t.Errorf("List item %q has size %d, want %d", it.Key, it.Size, len(it.Key))
		}
		if it.Token != toks[it.Key] {
			t.Errorf("List item %q has token %q, Put returned %q", it.Key, it.Token, toks[it.Key])
		}
	}

	for _, limit := range []int{blobstore.DefaultListLimit, 97, 5000} {
		got := pageThrough(t, c, "list/", "", limit, fmt.Sprintf("paging with limit %d", limit))
		if !slices.Equal(got, want) {
			t.Errorf("paging with limit %d listed %d keys, want %d in byte order; %s", limit, len(got), len(want), firstDiff(got, want))
		}
	}
	// One key per page across the keys whose order hinges on punctuation
	// ('space' < '+' < '-' < '.' < '/' < '0'); a page per key over all of
	// them would cost a thousand requests.
	var wantA []string
	for _, k := range want {
		if strings.HasPrefix(k, "list/a") {
			wantA = append(wantA, k)
		}
	}
	small := pageThrough(t, c, "list/a", "", 1, "paging list/a with limit 1")
	if !slices.Equal(small, wantA) {
		t.Errorf("paging list/a with limit 1 = %q, want %q", small, wantA)
	}

	after := func(startAfter string) []string {
		i := sort.Search(len(want), func(i int) bool { return want[i] > startAfter })
		return want[i:]
	}
	for _, sa := range []string{
		"list/n/5000",     // between two keys, not itself a key
		"list/n/500",      // an existing key: listing starts strictly after it
		"list/a/b",        // a key with a '/' inside the listed prefix
		"a",               // before the prefix: the whole prefix
		want[len(want)-1], // the last key: nothing
		"zzz",             // after the prefix
	} {
		got := pageThrough(t, c, "list/", sa, 250, fmt.Sprintf("startAfter %q", sa))
		if exp := after(sa); !slices.Equal(got, exp) {
			t.Errorf("List list/ after %q: %d keys, want %d; %s", sa, len(got), len(exp), firstDiff(got, exp))
		}
	}
	last, err := c.List(ctx, "list/", want[len(want)-1], 10)
	mustOK(t, err, "List after the last key")
	if len(last.Items) != 0 || last.More {
		t.Errorf("List after the last key: %d items, More=%v; want none and no More", len(last.Items), last.More)
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at #%d: got %q, want %q", i, got[i], want[i])
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Sprintf("extra keys from %q", got[len(want)])
	case len(want) > len(got):
		return fmt.Sprintf("missing keys from %q", want[len(got)])
	}
	return "same keys"
}

func checkListPrefix(t T, c *blobstore.Container) {
	keys := []string{"pre/abc/1", "pre/abc/2", "pre/abd", "pre/ab", "pre/ab-x", "pre/a/b", "pre/b", "prefix-sibling", "pre-x/1", "other/1"}
	putKeys(t, c, keys)
	filter := func(prefix, startAfter string) []string {
		var out []string
		for _, k := range slices.Sorted(slices.Values(keys)) {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix && k > startAfter {
				out = append(out, k)
			}
		}
		return out
	}
	for _, tc := range []struct{ prefix, after string }{
		{"pre/", ""},
		{"pre/ab", ""}, // ends mid-segment: pre/ab, pre/ab-x, pre/abc/..., pre/abd
		{"pre/abc/", ""},
		{"pre/abc/1", ""}, // a whole key as prefix
		{"pre", ""},       // pre-x/ sorts before pre/ ('-' < '/'), prefix-sibling after
		{"pre/a", ""},
		{"nomatch/", ""},
		{"pre/ab", "pre/abc/1"},
		{"pre/ab", "pre/a"}, // startAfter before the first match
		{"pre/", "zzz"},
		{"", ""},
		{"", "pre/b"},
	} {
		for _, limit := range []int{2, blobstore.DefaultListLimit} {
			what := fmt.Sprintf("List(prefix %q, after %q, limit %d)", tc.prefix, tc.after, limit)
			got := pageThrough(t, c, tc.prefix, tc.after, limit, what)
			if want := filter(tc.prefix, tc.after); !slices.Equal(got, want) {
				t.Errorf("%s = %q, want %q", what, got, want)
			}
		}
	}
}

func checkListOrderUnicode(t T, c *blobstore.Container) {
	// UTF-16 order (some stores' native order) puts U+1F600 before U+FF21;
	// UTF-8 byte order, the contract, puts it after.
	keys := []string{"uni/a", "uni/z", "uni/~", "uni/\u00e9", "uni/\u00ff", "uni/\u0100", "uni/\uff21", "uni/\U0001F600", "uni/\u4e2d"}
	putKeys(t, c, keys)
	want := slices.Sorted(slices.Values(keys))
	for _, limit := range []int{1, 3, blobstore.DefaultListLimit} {
		got := pageThrough(t, c, "uni/", "", limit, fmt.Sprintf("unicode listing with limit %d", limit))
		if !slices.Equal(got, want) {
			t.Errorf("List uni/ with limit %d = %q, want UTF-8 byte order %q", limit, got, want)
		}
	}
	got := pageThrough(t, c, "uni/", "uni/\uff21", 10, "unicode startAfter")
	if exp := want[slices.Index(want, "uni/\uff21")+1:]; !slices.Equal(got, exp) {
		t.Errorf("List uni/ after %q = %q, want %q", "uni/\uff21", got, exp)
	}
}

// checkObjectAndPrefix: S3, GCS and Azure hold "a" and "a/b" at once; stores
// built on a filesystem (MinIO, versitygw's posix backend) may refuse one of
// them or hide it from List. The protocol's key layout never stores a key
// that is a path prefix of another, so this check is advisory.
func checkObjectAndPrefix(t T, c *blobstore.Container) {
	ctx := t.Context()
	keys := []string{"both/a", "both/a/b"}
	for _, k := range keys {
		if _, err := c.Put(ctx, k, []byte(k)); err != nil {
			t.Fatalf("Put %q beside %q: %v", k, keys, err)
		}
	}
	for _, k := range keys {
		o, err := c.Get(ctx, k)
		if err != nil || string(o.Body) != k {
			t.Errorf("Get %q = %q, %v; want its own body", k, o.Body, err)
		}
	}
	got := pageThrough(t, c, "both/", "", blobstore.DefaultListLimit, "List both/")
	if !slices.Equal(got, keys) {
		t.Errorf("List both/ = %q, want %q", got, keys)
	}
}
