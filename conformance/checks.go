package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
)

var allChecks = []Check{
	{Name: "crud", Description: "Get/Stat/Put/CreateIfAbsent/CompareAndSwap/Delete on one key", run: checkCRUD},
	{Name: "tokens-unique", Description: "a token is never reused for different content, across delete and re-create", run: checkTokensUnique},
	{Name: "create-if-absent-race", Description: "16 racing CreateIfAbsent: exactly one wins, its content is stored", run: checkCreateRace},
	{Name: "cas-increments", Description: "5 workers x 10 get-then-CAS increments end at exactly 50", run: checkCASIncrements},
	{Name: "cas-chain", Description: "20 CAS calls in a row, each on the token the previous one returned", run: checkCASChain},
	{Name: "cas-stale", Description: "a CAS with a stale, empty or foreign token fails and changes nothing", run: checkCASStale},
	{Name: "cas-missing-key", Description: "a CAS on a missing or deleted key fails with ErrPreconditionFailed", run: checkCASMissing},
	{Name: "delete-if-match", Description: "DeleteIfMatch enforces its token, or is refused as unsupported", run: checkDeleteIfMatch},
	{Name: "delete-idempotent", Description: "deleting a missing key succeeds", run: checkDeleteIdempotent},
	{Name: "bodies-small", Description: "empty and all-byte-values bodies round-trip through every write", run: checkBodiesSmall},
	{Name: "bodies-16mib", Description: "a 16 MiB body round-trips byte-exact", run: checkBodies16MiB},
	{Name: "keys-unicode", Description: "unicode and punctuation keys round-trip and list byte-exact", run: checkKeysUnicode},
	{Name: "keys-invalid", Description: "invalid keys fail with ErrInvalidKey and write nothing", run: checkKeysInvalid},
	{Name: "context-cancelled", Description: "a cancelled or expired context fails every call and writes nothing", run: checkContextCancelled},
	{Name: "errors-typed", Description: "errors are OpErrors naming op, store and key; definite answers are not retryable", run: checkErrorsTyped},
	{Name: "list-pagination", Description: "1,100+ keys list in byte order across pages, startAfter and limits", run: checkListPagination},
	{Name: "list-prefix", Description: "prefix filtering, including a prefix that ends mid-segment", run: checkListPrefix},
	{Name: "list-order-unicode", Description: "non-ASCII keys list in UTF-8 byte order", run: checkListOrderUnicode},
	{Name: "keys-object-and-prefix", Description: "a key and a longer key under it ('a', 'a/b') coexist and both list (advisory)", Advisory: true, run: checkObjectAndPrefix},
	{Name: "linearizable", Description: "concurrent Get/CreateIfAbsent/CAS/Delete(IfMatch) histories are linearizable", run: checkLinearizable},
	{Name: "probe-preconditions", Description: "blobstore.ProbePreconditions accepts the store", run: checkProbe},
	// The streaming and ranged reads (Container.NewReader and
	// NewRangeReader, ranges.go).
	{Name: "range-reads", Description: "whole and ranged streams, short reads at the end, empty objects, a range past the end, a missing key", run: checkRangeReads},
	{Name: "range-edges", Description: "the ranges HTTP cannot say as asked: zero bytes, a start at or past the end, a length past the int64 range, each pinned to the current version, to a replaced one and to a missing key", run: checkRangeEdges},
	{Name: "range-pinned", Description: "a range pinned to a version fails once the object is replaced, and a pinned stream never mixes two versions", run: checkRangePinned},
	{Name: "range-cancel", Description: "cancelling the context mid-body fails the stream's next reads", run: checkRangeCancel},
	{Name: "range-stream-128mib", Description: "a 128 MiB object streams byte-exact without being held in memory", run: checkRangeLarge},
}

func checkCRUD(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "crud/object"
	expectMissing(t, c, key, "before any write")

	body1 := []byte("crud body one")
	t1, err := c.Put(ctx, key, body1)
	mustOK(t, err, "Put of a new key")
	if t1 == "" {
		t.Errorf("Put returned an empty token")
	}
	expectObject(t, c, key, body1, t1, "after Put")

	body2 := []byte("crud body two, a different length")
	t2, err := c.Put(ctx, key, body2)
	mustOK(t, err, "Put over an existing key")
	if t2 == t1 {
		t.Errorf("Put of different content returned the same token %q", t2)
	}
	expectObject(t, c, key, body2, t2, "after overwriting Put")

	_, err = c.CreateIfAbsent(ctx, key, []byte("crud must not land"))
	expectErr(t, err, blobstore.ErrAlreadyExists, "CreateIfAbsent", key, "CreateIfAbsent on an existing key")
	expectObject(t, c, key, body2, t2, "after a refused CreateIfAbsent")

	key2 := "crud/created"
	body3 := []byte("crud created")
	t3, err := c.CreateIfAbsent(ctx, key2, body3)
	mustOK(t, err, "CreateIfAbsent of a new key")
	expectObject(t, c, key2, body3, t3, "after CreateIfAbsent")

	body4 := []byte("crud swapped")
	t4, err := c.CompareAndSwap(ctx, key, t2, body4)
	mustOK(t, err, "CompareAndSwap with the current token")
	if t4 == t2 {
		t.Errorf("CompareAndSwap to different content returned the unchanged token %q", t4)
	}
	expectObject(t, c, key, body4, t4, "after CompareAndSwap")

	mustOK(t, c.Delete(ctx, key), "Delete")
	expectMissing(t, c, key, "after Delete")
	expectObject(t, c, key2, body3, t3, "a neighbour after Delete")

	items, err := blobstore.ListAll(ctx, c, "crud/")
	mustOK(t, err, "List crud/")
	if len(items) != 1 || items[0].Key != key2 || items[0].Size != int64(len(body3)) || items[0].Token != t3 {
		t.Errorf("List crud/ = %+v, want only {%s %d %s}", items, key2, len(body3), t3)
	}
}

func checkTokensUnique(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "tokens/object"
	seen := map[blobstore.Token]string{}
	var all []blobstore.Token
	note := func(tok blobstore.Token, body, how string) {
		t.Helper()
		if tok == "" {
			t.Errorf("%s returned an empty token", how)
			return
		}
		if prev, ok := seen[tok]; ok && prev != body {
			t.Errorf("%s returned token %q, already used for different content %q; a stale CAS could then overwrite newer data", how, tok, prev)
		}
		seen[tok] = body
		all = append(all, tok)
	}
	body := func(i int) string { return fmt.Sprintf("tokens content %d", i) }

	tok, err := c.CreateIfAbsent(ctx, key, []byte(body(0)))
	mustOK(t, err, "CreateIfAbsent")
	note(tok, body(0), "CreateIfAbsent")
	tok, err = c.Put(ctx, key, []byte(body(1)))
	mustOK(t, err, "Put")
	note(tok, body(1), "Put")
	tok, err = c.CompareAndSwap(ctx, key, tok, []byte(body(2)))
	mustOK(t, err, "CompareAndSwap")
	note(tok, body(2), "CompareAndSwap")
	beforeDelete := tok

	mustOK(t, c.Delete(ctx, key), "Delete")
	tok, err = c.CreateIfAbsent(ctx, key, []byte(body(3)))
	mustOK(t, err, "CreateIfAbsent after Delete")
	note(tok, body(3), "CreateIfAbsent after Delete")
	_, err = c.CompareAndSwap(ctx, key, beforeDelete, []byte("tokens must not land"))
	expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "CAS with the token from before Delete and re-create")

	tok, err = c.CompareAndSwap(ctx, key, tok, []byte(body(4)))
	mustOK(t, err, "CompareAndSwap after re-create")
	note(tok, body(4), "CompareAndSwap after re-create")
	mustOK(t, c.Delete(ctx, key), "second Delete")
	tok, err = c.Put(ctx, key, []byte(body(5)))
	mustOK(t, err, "Put after Delete")
	note(tok, body(5), "Put after Delete")
	expectObject(t, c, key, []byte(body(5)), tok, "at the end")
	t.Logf("tokens seen: %q", all)
}

func checkCreateRace(t T, c *blobstore.Container) {
	ctx := t.Context()
	const writers = 16
	for round := range 3 {
		key := fmt.Sprintf("race/create-%d", round)
		type result struct {
			tok blobstore.Token
			err error
		}
		results := make([]result, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				body := fmt.Appendf(nil, "round %d writer %d", round, i)
				var r result
				r.err = withConflictRetry(ctx, func() error {
					var err error
					r.tok, err = c.CreateIfAbsent(ctx, key, body)
					return err
				})
				results[i] = r
			})
		}
		close(start)
		wg.Wait()
		var winners []int
		for i, r := range results {
			switch {
			case r.err == nil:
				winners = append(winners, i)
			case errors.Is(r.err, blobstore.ErrAlreadyExists):
			default:
				t.Errorf("round %d writer %d: CreateIfAbsent failed with %v, want success or ErrAlreadyExists", round, i, r.err)
			}
		}
		if len(winners) != 1 {
			t.Errorf("round %d: %d of %d racing CreateIfAbsent calls succeeded (writers %v), want exactly 1", round, len(winners), writers, winners)
			continue
		}
		w := winners[0]
		expectObject(t, c, key, fmt.Appendf(nil, "round %d writer %d", round, w), results[w].tok, fmt.Sprintf("round %d winner %d", round, w))
	}
}

func checkCASIncrements(t T, c *blobstore.Container) {
	ctx := t.Context()
	const workers, increments = 5, 10
	key := "race/counter"
	_, err := c.CreateIfAbsent(ctx, key, []byte("0"))
	mustOK(t, err, "CreateIfAbsent of the counter")

	var mu sync.Mutex
	wrote := map[int]int{} // value -> how many successful CAS wrote it
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			done := 0
			for attempt := 0; done < increments; attempt++ {
				if attempt == 2000 {
					t.Errorf("worker %d: %d increments after %d attempts; the store never let this worker win", w, done, attempt)
					return
				}
				obj, err := c.Get(ctx, key)
				if err != nil {
					t.Errorf("worker %d: Get: %v", w, err)
					return
				}
				n, err := strconv.Atoi(string(obj.Body))
				if err != nil {
					t.Errorf("worker %d: counter holds %s, not a number", w, describeBody(obj.Body))
					return
				}
				// Yielding between read and write lets an in-process store
				// interleave workers the way network latency does.
				runtime.Gosched()
				_, err = c.CompareAndSwap(ctx, key, obj.Token, []byte(strconv.Itoa(n+1)))
				switch {
				case err == nil:
					done++
					mu.Lock()
					wrote[n+1]++
					mu.Unlock()
				case errors.Is(err, blobstore.ErrPreconditionFailed), errors.Is(err, blobstore.ErrConflict):
				default:
					t.Errorf("worker %d: CompareAndSwap: %v", w, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	obj, err := c.Get(ctx, key)
	mustOK(t, err, "Get of the counter")
	if string(obj.Body) != strconv.Itoa(workers*increments) {
		t.Errorf("counter ends at %s after %d x %d successful increments, want %d: some CAS calls succeeded on a stale token", describeBody(obj.Body), workers, increments, workers*increments)
	}
	for v, n := range wrote {
		if n > 1 {
			t.Errorf("value %d was written by %d successful CAS calls from the same version", v, n)
		}
	}
}

// checkCASChain is the fence key's write path: every sync swaps on the token
// the previous swap returned, with no read in between.
func checkCASChain(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "cas/chain"
	tok, err := c.CreateIfAbsent(ctx, key, []byte("chain 0"))
	mustOK(t, err, "CreateIfAbsent")
	var body []byte
	for i := 1; i <= 20; i++ {
		body = fmt.Appendf(nil, "chain %d", i)
		next, err := c.CompareAndSwap(ctx, key, tok, body)
		mustOK(t, err, fmt.Sprintf("CAS #%d on the token CAS #%d returned", i, i-1))
		if next == tok {
			t.Errorf("CAS #%d returned the token it was given, %q", i, tok)
		}
		tok = next
	}
	expectObject(t, c, key, body, tok, "after 20 chained CAS calls")
}

func checkCASStale(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "cas/stale"
	tA, err := c.Put(ctx, key, []byte("cas version A"))
	mustOK(t, err, "Put A")
	tB, err := c.CompareAndSwap(ctx, key, tA, []byte("cas version B"))
	mustOK(t, err, "CAS A->B")
	bodyB := []byte("cas version B")

	_, err = c.CompareAndSwap(ctx, key, tA, []byte("cas stale C"))
	expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "CAS with the stale token of A")
	expectObject(t, c, key, bodyB, tB, "after the stale CAS")

	_, err = c.CompareAndSwap(ctx, key, "", []byte("cas empty-token D"))
	expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "CAS with the empty token (must never become an unconditional write)")
	expectObject(t, c, key, bodyB, tB, "after the empty-token CAS")

	other, err := c.Put(ctx, "cas/other", []byte("cas other key"))
	mustOK(t, err, "Put of another key")
	if other != tB {
		_, err = c.CompareAndSwap(ctx, key, other, []byte("cas foreign E"))
		expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "CAS with another key's token")
	}
	_, err = c.CompareAndSwap(ctx, key, blobstore.Token(`"made-up-`+randomHex(8)+`"`), []byte("cas bogus F"))
	expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "CAS with a made-up token")
	expectObject(t, c, key, bodyB, tB, "after every refused CAS")
}

func checkCASMissing(t T, c *blobstore.Container) {
	ctx := t.Context()
	tok, err := c.Put(ctx, "cas/present", []byte("cas present"))
	mustOK(t, err, "Put of a present key")
	key := "cas/missing"
	_, err = c.CompareAndSwap(ctx, key, tok, []byte("cas must not land"))
	expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "CAS on a never-written key")
	expectMissing(t, c, key, "after a CAS on a missing key")

	deleted := "cas/deleted"
	dtok, err := c.Put(ctx, deleted, []byte("cas soon deleted"))
	mustOK(t, err, "Put")
	mustOK(t, c.Delete(ctx, deleted), "Delete")
	_, err = c.CompareAndSwap(ctx, deleted, dtok, []byte("cas must not resurrect"))
	expectErr(t, err, blobstore.ErrPreconditionFailed, "CompareAndSwap", deleted, "CAS on a deleted key with its last token")
	expectMissing(t, c, deleted, "after a CAS on a deleted key")
}

func checkDeleteIfMatch(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "delete/conditional"
	t1, err := c.Put(ctx, key, []byte("delete one"))
	mustOK(t, err, "Put")
	if !c.Capabilities().ConditionalDelete {
		err := c.DeleteIfMatch(ctx, key, t1)
		expectErr(t, err, blobstore.ErrUnsupported, "DeleteIfMatch", key, "DeleteIfMatch on a store without ConditionalDelete")
		expectObject(t, c, key, []byte("delete one"), t1, "after an unsupported DeleteIfMatch")
		return
	}
	t2, err := c.Put(ctx, key, []byte("delete two"))
	mustOK(t, err, "Put")
	err = c.DeleteIfMatch(ctx, key, t1)
	expectErr(t, err, blobstore.ErrPreconditionFailed, "DeleteIfMatch", key, "DeleteIfMatch with a stale token (the driver claims ConditionalDelete)")
	expectObject(t, c, key, []byte("delete two"), t2, "after a stale DeleteIfMatch")
	err = c.DeleteIfMatch(ctx, key, "")
	expectErr(t, err, blobstore.ErrPreconditionFailed, "DeleteIfMatch", key, "DeleteIfMatch with the empty token (must never become an unconditional delete)")
	expectObject(t, c, key, []byte("delete two"), t2, "after an empty-token DeleteIfMatch")

	mustOK(t, c.DeleteIfMatch(ctx, key, t2), "DeleteIfMatch with the current token")
	expectMissing(t, c, key, "after DeleteIfMatch")
	err = c.DeleteIfMatch(ctx, key, t2)
	expectErr(t, err, blobstore.ErrPreconditionFailed, "DeleteIfMatch", key, "DeleteIfMatch on a missing key")
}

func checkDeleteIdempotent(t T, c *blobstore.Container) {
	ctx := t.Context()
	mustOK(t, c.Delete(ctx, "delete/never-written"), "Delete of a never-written key")
	mustOK(t, c.Delete(ctx, "delete/no/such/dir/key"), "Delete of a key under a never-written prefix")
	key := "delete/twice"
	_, err := c.Put(ctx, key, []byte("delete me twice"))
	mustOK(t, err, "Put")
	mustOK(t, c.Delete(ctx, key), "first Delete")
	mustOK(t, c.Delete(ctx, key), "second Delete of the same key")
	expectMissing(t, c, key, "after two Deletes")
}

func checkBodiesSmall(t T, c *blobstore.Container) {
	ctx := t.Context()
	allBytes := make([]byte, 512)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	tok, err := c.Put(ctx, "bodies/empty-put", nil)
	mustOK(t, err, "Put of an empty body")
	expectObject(t, c, "bodies/empty-put", []byte{}, tok, "empty body by Put")

	tok, err = c.CreateIfAbsent(ctx, "bodies/empty-create", []byte{})
	mustOK(t, err, "CreateIfAbsent of an empty body")
	expectObject(t, c, "bodies/empty-create", []byte{}, tok, "empty body by CreateIfAbsent")

	tok, err = c.CompareAndSwap(ctx, "bodies/empty-create", tok, allBytes)
	mustOK(t, err, "CAS from empty to all byte values")
	expectObject(t, c, "bodies/empty-create", allBytes, tok, "all byte values by CAS")

	tok, err = c.CompareAndSwap(ctx, "bodies/empty-create", tok, nil)
	mustOK(t, err, "CAS back to an empty body")
	expectObject(t, c, "bodies/empty-create", []byte{}, tok, "empty body by CAS")

	// A trailing newline and CRLF must survive: no driver may treat a
	// body as text.
	text := []byte("line one\r\nline two\n\x00\n")
	tok, err = c.Put(ctx, "bodies/text", text)
	mustOK(t, err, "Put of a text-like body")
	expectObject(t, c, "bodies/text", text, tok, "text-like body")
}

func checkBodies16MiB(t T, c *blobstore.Container) {
	// Its bodies would count against a heap measurement running beside it.
	heapMeasure.Lock()
	defer heapMeasure.Unlock()
	ctx := t.Context()
	const size = 16 << 20
	rng := rand.NewChaCha8([32]byte{'s', 'h', 'a', 'r', 'd', 'f', 'e', 'n', 'c', 'e'})
	body := make([]byte, size)
	_, _ = rng.Read(body) // ChaCha8.Read never fails
	key := "bodies/16mib"
	tok, err := c.Put(ctx, key, body)
	mustOK(t, err, "Put of 16 MiB")
	expectBigBody(t, c, key, body, tok)

	next := slices.Clone(body)
	next[0] ^= 0xff
	next[size/2] ^= 0xff
	next[size-1] ^= 0xff
	limit := c.Capabilities().MaxConditionalBody
	tok2, err := c.CompareAndSwap(ctx, key, tok, next)
	if limit > 0 && limit < size {
		expectErr(t, err, blobstore.ErrTooLarge, "CompareAndSwap", key, fmt.Sprintf("CAS of 16 MiB over the store's %d-byte conditional limit", limit))
		expectBigBody(t, c, key, body, tok)
		return
	}
	mustOK(t, err, "CAS of 16 MiB")
	expectBigBody(t, c, key, next, tok2)
}

// expectBigBody is expectObject without dumping megabytes into a message.
func expectBigBody(t T, c *blobstore.Container, key string, want []byte, tok blobstore.Token) {
	t.Helper()
	obj, err := c.Get(t.Context(), key)
	if err != nil {
		t.Errorf("Get %q: %v", key, err)
		return
	}
	if obj.Token != tok {
		t.Errorf("Get %q token %q, want %q", key, obj.Token, tok)
	}
	if !bytes.Equal(obj.Body, want) {
		at := 0
		for at < min(len(obj.Body), len(want)) && obj.Body[at] == want[at] {
			at++
		}
		t.Errorf("Get %q returned %d bytes, want %d; first difference at byte %d", key, len(obj.Body), len(want), at)
	}
	a, err := c.Stat(t.Context(), key)
	if err != nil {
		t.Errorf("Stat %q: %v", key, err)
	} else if a.Size != int64(len(want)) {
		t.Errorf("Stat %q size %d, want %d", key, a.Size, len(want))
	}
}

// unicodeKeys are valid keys that break drivers which mishandle URL
// escaping or normalise names. The two "e-acute" keys are different byte
// strings (precomposed and combining) and must stay two objects.
var unicodeKeys = []string{
	"unicode/ünïcödé",
	"unicode/日本語/キー",
	"unicode/ключ",
	"unicode/emoji-😀",
	"unicode/nfc-\u00e9",
	"unicode/nfd-e\u0301",
	"unicode/fullwidth-Ａ",
	"unicode/space and+plus%25percent",
	"unicode/query?a=b&c=d#frag",
	"unicode/punct~!@$^*()[]{},;'`",
	"unicode/.hidden",
	"unicode/dots..in..name",
}

func checkKeysUnicode(t T, c *blobstore.Container) {
	ctx := t.Context()
	toks := map[string]blobstore.Token{}
	for _, k := range unicodeKeys {
		tok, err := c.Put(ctx, k, []byte("body of "+k))
		if err != nil {
			t.Errorf("Put %q: %v", k, err)
			continue
		}
		toks[k] = tok
	}
	for _, k := range unicodeKeys {
		if tok, ok := toks[k]; ok {
			expectObject(t, c, k, []byte("body of "+k), tok, fmt.Sprintf("key %q", k))
		}
	}
	items, err := blobstore.ListAll(ctx, c, "unicode/")
	mustOK(t, err, "List unicode/")
	var got []string
	for _, it := range items {
		got = append(got, it.Key)
	}
	want := slices.Sorted(slices.Values(unicodeKeys))
	if !slices.Equal(got, want) {
		t.Errorf("List unicode/ returned\n  %q\nwant (byte order)\n  %q", got, want)
	}
	for _, k := range unicodeKeys {
		items, err := blobstore.ListAll(ctx, c, k)
		if err != nil {
			t.Errorf("List with prefix %q: %v", k, err)
			continue
		}
		if len(items) != 1 || items[0].Key != k {
			t.Errorf("List with prefix %q returned %+v, want exactly that key", k, items)
		}
	}
	for _, k := range unicodeKeys {
		if err := c.Delete(ctx, k); err != nil {
			t.Errorf("Delete %q: %v", k, err)
		}
	}
	items, err = blobstore.ListAll(ctx, c, "unicode/")
	mustOK(t, err, "List unicode/ after Delete")
	if len(items) != 0 {
		t.Errorf("after deleting every unicode key, List unicode/ still returns %+v", items)
	}
}

// invalidKeys break ValidateKey; the container must refuse them on every
// store before anything is sent.
var invalidKeys = map[string]string{
	"empty":            "",
	"dot":              ".",
	"dot-dot":          "..",
	"dot-dot-segment":  "a/../b",
	"dot-segment":      "a/./b",
	"leading-slash":    "/lead",
	"trailing-slash":   "trail/",
	"empty-segment":    "a//b",
	"nul":              "nul\x00byte",
	"control":          "ctrl\x01char",
	"invalid-utf8":     "bad-utf8-\xff\xfe",
	"longer-than-1024": strings.Repeat("k", blobstore.MaxKeyLen+1),
}

func checkKeysInvalid(t T, c *blobstore.Container) {
	ctx := t.Context()
	// A real token, so a driver cannot fail the conditional calls for the
	// token's sake instead of the key's.
	tok, err := c.Put(ctx, "valid/key", []byte("valid"))
	mustOK(t, err, "Put of a valid key")
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range invalidKeys {
			if !yield(n) {
				return
			}
		}
	}) {
		key := invalidKeys[name]
		what := func(op string) string { return fmt.Sprintf("%s with the %s key %q", op, name, truncate(key)) }
		_, err := c.Get(ctx, key)
		expectErr(t, err, blobstore.ErrInvalidKey, "Get", key, what("Get"))
		_, err = c.Stat(ctx, key)
		expectErr(t, err, blobstore.ErrInvalidKey, "Stat", key, what("Stat"))
		_, err = c.Put(ctx, key, []byte("invalid"))
		expectErr(t, err, blobstore.ErrInvalidKey, "Put", key, what("Put"))
		_, err = c.CreateIfAbsent(ctx, key, []byte("invalid"))
		expectErr(t, err, blobstore.ErrInvalidKey, "CreateIfAbsent", key, what("CreateIfAbsent"))
		_, err = c.CompareAndSwap(ctx, key, tok, []byte("invalid"))
		expectErr(t, err, blobstore.ErrInvalidKey, "CompareAndSwap", key, what("CompareAndSwap"))
		err = c.Delete(ctx, key)
		expectErr(t, err, blobstore.ErrInvalidKey, "Delete", key, what("Delete"))
		err = c.DeleteIfMatch(ctx, key, tok)
		expectErr(t, err, blobstore.ErrInvalidKey, "DeleteIfMatch", key, what("DeleteIfMatch"))
	}
	for _, prefix := range []string{"/lead", "..", "a//b", "a/../", "bad-\xff", "nul\x00"} {
		_, err := c.List(ctx, prefix, "", 10)
		if !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("List with the invalid prefix %q: error %v, want ErrInvalidKey", prefix, err)
		}
	}
	items, err := blobstore.ListAll(ctx, c, "")
	mustOK(t, err, "List after the invalid calls")
	if len(items) != 1 || items[0].Key != "valid/key" {
		t.Errorf("after only invalid-key writes, the container holds %+v, want only valid/key", items)
	}
	expectObject(t, c, "valid/key", []byte("valid"), tok, "the valid key after invalid-key calls")
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func checkContextCancelled(t T, c *blobstore.Container) {
	live := t.Context()
	key := "ctx/existing"
	body := []byte("ctx existing")
	tok, err := c.Put(live, key, body)
	mustOK(t, err, "Put")

	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithTimeout(live, -1)
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"cancelled", cancelled, context.Canceled}, {"expired", expired, context.DeadlineExceeded}} {
		check := func(err error, op, k string) {
			t.Helper()
			if errors.Is(err, blobstore.ErrUnsupported) && op == "DeleteIfMatch" && !c.Capabilities().ConditionalDelete {
				return
			}
			expectErr(t, err, tc.want, op, k, fmt.Sprintf("%s with a %s context", op, tc.name))
		}
		_, err := c.Get(tc.ctx, key)
		check(err, "Get", key)
		_, err = c.Stat(tc.ctx, key)
		check(err, "Stat", key)
		_, err = c.Put(tc.ctx, "ctx/put-"+tc.name, []byte("must not land"))
		check(err, "Put", "ctx/put-"+tc.name)
		_, err = c.CreateIfAbsent(tc.ctx, "ctx/create-"+tc.name, []byte("must not land"))
		check(err, "CreateIfAbsent", "ctx/create-"+tc.name)
		_, err = c.CompareAndSwap(tc.ctx, key, tok, []byte("must not land"))
		check(err, "CompareAndSwap", key)
		check(c.Delete(tc.ctx, key), "Delete", key)
		check(c.DeleteIfMatch(tc.ctx, key, tok), "DeleteIfMatch", key)
		_, err = c.List(tc.ctx, "ctx/", "", 10)
		if !errors.Is(err, tc.want) {
			t.Errorf("List with a %s context: error %v, want one matching %v", tc.name, err, tc.want)
		}
		expectMissing(t, c, "ctx/put-"+tc.name, "Put with a "+tc.name+" context")
		expectMissing(t, c, "ctx/create-"+tc.name, "CreateIfAbsent with a "+tc.name+" context")
	}
	expectObject(t, c, key, body, tok, "after CAS, Delete and DeleteIfMatch with dead contexts")
}

func checkErrorsTyped(t T, c *blobstore.Container) {
	ctx := t.Context()
	key := "errors/present"
	tok, err := c.Put(ctx, key, []byte("errors one"))
	mustOK(t, err, "Put")
	_, err = c.Put(ctx, key, []byte("errors two"))
	mustOK(t, err, "Put")
	definite := func(err error, target error, op, k, what string) {
		t.Helper()
		if !expectErr(t, err, target, op, k, what) {
			return
		}
		if !strings.Contains(err.Error(), k) {
			t.Errorf("%s: message %q does not name the key %q", what, err, k)
		}
		if blobstore.IsRetryable(err) || blobstore.IsAmbiguous(err) {
			t.Errorf("%s: a definite answer is marked retryable or ambiguous (%v); callers would retry a settled outcome", what, err)
		}
		if !blobstore.IsDefinite(err) {
			t.Errorf("%s: blobstore.IsDefinite is false for %v", what, err)
		}
	}
	_, err = c.Get(ctx, "errors/missing")
	definite(err, blobstore.ErrNotFound, "Get", "errors/missing", "Get of a missing key")
	_, err = c.Stat(ctx, "errors/missing")
	definite(err, blobstore.ErrNotFound, "Stat", "errors/missing", "Stat of a missing key")
	_, err = c.CreateIfAbsent(ctx, key, []byte("x"))
	definite(err, blobstore.ErrAlreadyExists, "CreateIfAbsent", key, "CreateIfAbsent of an existing key")
	_, err = c.CompareAndSwap(ctx, key, tok, []byte("x"))
	definite(err, blobstore.ErrPreconditionFailed, "CompareAndSwap", key, "stale CompareAndSwap")
	_, err = c.CompareAndSwap(ctx, "errors/missing", tok, []byte("x"))
	definite(err, blobstore.ErrPreconditionFailed, "CompareAndSwap", "errors/missing", "CompareAndSwap of a missing key")
	if c.Capabilities().ConditionalDelete {
		definite(c.DeleteIfMatch(ctx, key, tok), blobstore.ErrPreconditionFailed, "DeleteIfMatch", key, "stale DeleteIfMatch")
	} else {
		definite(c.DeleteIfMatch(ctx, key, tok), blobstore.ErrUnsupported, "DeleteIfMatch", key, "unsupported DeleteIfMatch")
	}
	_, err = c.Put(ctx, "errors//bad", []byte("x"))
	definite(err, blobstore.ErrInvalidKey, "Put", "errors//bad", "Put of an invalid key")
	_, err = c.List(ctx, "/errors", "", 10)
	if err == nil || !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Errorf("List of an invalid prefix: error %v, want ErrInvalidKey", err)
	} else {
		var oe *blobstore.OpError
		if !errors.As(err, &oe) || oe.Op != blobstore.OpList {
			t.Errorf("List of an invalid prefix: error %q is not an OpError for List", err)
		}
	}
}

func checkProbe(t T, c *blobstore.Container) {
	if err := blobstore.ProbePreconditions(t.Context(), c); err != nil {
		t.Errorf("ProbePreconditions: %v", err)
	}
}
