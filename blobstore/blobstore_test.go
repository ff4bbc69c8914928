package blobstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestErrorsWrapAndClassify(t *testing.T) {
	err := blobstore.Wrap(blobstore.OpCompareAndSwap, "mem://x/", "fence/k", blobstore.ErrPreconditionFailed)
	var oe *blobstore.OpError
	if !errors.As(err, &oe) || oe.Op != blobstore.OpCompareAndSwap || oe.Key != "fence/k" {
		t.Fatalf("Wrap did not produce an OpError with op and key: %#v", err)
	}
	if !errors.Is(err, blobstore.ErrPreconditionFailed) || !blobstore.IsDefinite(err) || blobstore.IsRetryable(err) {
		t.Fatalf("a precondition failure must be definite and not retryable: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "fence/k") || !strings.Contains(msg, "CompareAndSwap") {
		t.Fatalf("message %q does not name the op and key", msg)
	}
	if again := blobstore.Wrap(blobstore.OpGet, "s", "other", err); again != err {
		t.Fatalf("Wrap re-wrapped an OpError: %v", again)
	}

	amb := blobstore.Wrap(blobstore.OpPut, "s", "k", blobstore.Ambiguous(context.DeadlineExceeded))
	if !blobstore.IsAmbiguous(amb) || !errors.Is(amb, context.DeadlineExceeded) || !blobstore.IsRetryable(amb) || blobstore.IsDefinite(amb) {
		t.Fatalf("ambiguous timeout misclassified: %v", amb)
	}
	if blobstore.Ambiguous(amb) != amb {
		t.Fatal("Ambiguous wrapped an already ambiguous error twice")
	}
	if !blobstore.IsRetryable(blobstore.Wrap(blobstore.OpPut, "s", "k", blobstore.ErrConflict)) {
		t.Fatal("a 409 conflict must be retryable")
	}
	if !blobstore.IsRetryable(blobstore.Unavailable(errors.New("connection refused"))) {
		t.Fatal("an unavailable store must be retryable")
	}
	if blobstore.IsRetryable(context.Canceled) || blobstore.IsRetryable(nil) {
		t.Fatal("cancellation and nil are not retryable")
	}
}

func TestOpenMemAndUnknownScheme(t *testing.T) {
	ctx := context.Background()
	a, err := blobstore.Open(ctx, "mem://open-test/p")
	if err != nil {
		t.Fatal(err)
	}
	b, err := blobstore.Open(ctx, "mem://open-test/p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if o, err := b.Get(ctx, "k"); err != nil || string(o.Body) != "v" {
		t.Fatalf("containers opened by the same mem:// name do not share objects: %v %q", err, o.Body)
	}
	for _, bad := range []string{"nosuch://x", "no-scheme", "mem://", "mem://x/../y"} {
		if _, err := blobstore.Open(ctx, bad); !errors.Is(err, blobstore.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrBadURL", bad, err)
		}
	}
	if _, err := blobstore.Open(ctx, "nosuch://secretuser:secretpass@host/x"); err == nil || strings.Contains(err.Error(), "secretpass") {
		t.Fatalf("error leaks credentials or is nil: %v", err)
	}
}

func TestRedact(t *testing.T) {
	got := blobstore.Redact("s3://AKIA:verysecret@bucket/p?region=us-east-1&secret_key=hush&endpoint=http://127.0.0.1:9000")
	for _, leak := range []string{"verysecret", "hush", "AKIA"} {
		if strings.Contains(got, leak) {
			t.Fatalf("Redact left %q in %q", leak, got)
		}
	}
	if !strings.Contains(got, "region=us-east-1") || !strings.Contains(got, "bucket/p") {
		t.Fatalf("Redact removed harmless parts: %q", got)
	}
}

// Only the values of known harmless options are shown: every other
// parameter's value is redacted, whatever its name (a word list let
// pass=, passphrase=, cred= and private= through, in "unknown option"
// errors too).
func TestRedactShowsOnlyHarmlessOptionValues(t *testing.T) {
	const secret = "SEKRIT9"
	for _, name := range []string{"pass", "passphrase", "cred", "private", "x", "Region", "p", "session"} {
		raw := "s3://bucket/p?region=eu-west-1&path_style=true&" + name + "=" + secret
		got := blobstore.Redact(raw)
		if strings.Contains(got, secret) || !strings.Contains(got, "region=eu-west-1") || !strings.Contains(got, "path_style=true") {
			t.Errorf("Redact(%q) = %q", raw, got)
		}
		if _, err := blobstore.Open(context.Background(), raw); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): %v", raw, err)
		}
	}
	const shown = "s3://bucket/p?conditional_delete=true&endpoint=http%3A%2F%2F127.0.0.1%3A9000&max_conditional_body=5&region=r&secure=false"
	if got := blobstore.Redact(shown); got != shown {
		t.Errorf("Redact(%q) = %q: a harmless option lost its value", shown, got)
	}
}

// A URL with nothing after its scheme keeps its "//" in errors.
func TestRedactKeepsAnEmptyURLRecognisable(t *testing.T) {
	for raw, want := range map[string]string{"s3://": "s3://", "gs://?region=1": "gs://?region=1", "gs://?x=1": "gs://?x=REDACTED", "file:///d": "file:///d", "mem://a": "mem://a"} {
		if got := blobstore.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

// A secret in any position of a store URL never reaches an error or the
// redacted form: user info, credential-like parameters, user info inside
// endpoint=, fragments, unparseable queries, and URLs that do not parse at
// all (a *url.Error repeats the whole raw URL).
func TestRedactKeepsSecretsOutOfEveryPosition(t *testing.T) {
	const secret = "SEKRIT9"
	urls := []string{
		"minio://AK:" + secret + "@127.0.0.1:1/bucket/p",
		"minio://AK:" + secret + "@[::1/bucket/p",
		"s3://bucket/p?secret_key=" + secret + "&access_key=AK",
		"s3://bucket/p?secret=" + secret,
		"s3://bucket/p?key=" + secret,
		"azblob://acct/c/p?sig=" + secret,
		"azblob://acct/c/p?SAS=" + secret,
		"s3://bucket/p?endpoint=http://AK:" + secret + "@127.0.0.1:1",
		"s3://bucket/p?endpoint=http://AK:" + secret + "@[::1",
		"gs://bucket/p?endpoint=http%3A%2F%2Fu%3A" + secret + "%40127.0.0.1%3A1",
		"s3://bucket/p?secret=" + secret + "%ZZ",
		"s3://bucket/p?region=x;secret=" + secret,
		"s3://bucket/p#" + secret,
		"s3:AK:" + secret + "@bucket",
		"file:///tmp/x?secret=" + secret + "\x01",
		"minio://AK:" + secret + "@host:99999999/bucket",
		"minio://host:" + secret + "/bucket",
		"s3://bucket/p?secret=" + secret + "\n",
		"\x00minio://AK:" + secret + "@host/b",
	}
	for _, raw := range urls {
		if got := blobstore.Redact(raw); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q", raw, got)
		}
		_, err := blobstore.Open(context.Background(), raw)
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): %v", raw, err)
		}
	}
}

func TestSubKeepsKeysInsideItsPrefix(t *testing.T) {
	ctx := context.Background()
	root := mem.New()
	s, err := blobstore.Sub(root, "shards/s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "fence/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, "shards/s10/fence/a", []byte("other shard")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "../s10/fence/a", []byte("escape")); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Fatalf("Sub accepted a key escaping its prefix: %v", err)
	}
	o, err := root.Get(ctx, "shards/s1/fence/a")
	if err != nil || string(o.Body) != "1" {
		t.Fatalf("Sub did not store under its prefix: %v", err)
	}
	page, err := s.List(ctx, "", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].Key != "fence/a" {
		t.Fatalf("Sub listed %+v, want exactly fence/a (not the s10 sibling)", page.Items)
	}
	if _, err := blobstore.Sub(root, "../x"); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Fatalf("Sub accepted an escaping prefix: %v", err)
	}
}

func TestListAllPages(t *testing.T) {
	ctx := context.Background()
	c := mem.New()
	n := blobstore.DefaultListLimit*2 + 7
	for i := 0; i < n; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("k/%05d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Put(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}
	all, err := blobstore.ListAll(ctx, c, "k/")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n || all[0].Key != "k/00000" || all[n-1].Key != fmt.Sprintf("k/%05d", n-1) {
		t.Fatalf("ListAll returned %d keys (first %q), want %d in order", len(all), all[0].Key, n)
	}
}

// limited is a store with the limits and gaps of a real one, which counts
// the requests that reach it.
type limited struct {
	*mem.Bucket
	caps     blobstore.Capabilities
	requests atomic.Int64
}

func (l *limited) Capabilities() blobstore.Capabilities { return l.caps }

func (l *limited) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (blobstore.Token, error) {
	l.requests.Add(1)
	return l.Bucket.Write(ctx, key, body, pre)
}

func (l *limited) Delete(ctx context.Context, key string, pre driver.Precondition) error {
	l.requests.Add(1)
	return l.Bucket.Delete(ctx, key, pre)
}

func TestContainerRefusesBeforeTheDriver(t *testing.T) {
	ctx := t.Context()
	d := &limited{Bucket: mem.NewBucket("limited"), caps: blobstore.Capabilities{ConditionalCreate: true, ConditionalUpdate: true, MaxConditionalBody: 10, MaxBody: 20}}
	c, err := blobstore.NewAt(d, "p")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.CreateIfAbsent(ctx, "k", make([]byte, 10))
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		call func() error
		want error
		msg  string
	}{
		{"conditional body over the limit", func() error { _, err := c.CompareAndSwap(ctx, "k", tok, make([]byte, 11)); return err }, blobstore.ErrTooLarge, "11 bytes"},
		{"body over the store's limit", func() error { _, err := c.Put(ctx, "k", make([]byte, 21)); return err }, blobstore.ErrTooLarge, "21 bytes"},
		{"conditional delete not offered", func() error { return c.DeleteIfMatch(ctx, "k", tok) }, blobstore.ErrUnsupported, "conditional delete"},
		{"empty token", func() error { _, err := c.CompareAndSwap(ctx, "k", "", nil); return err }, blobstore.ErrPreconditionFailed, "names no version"},
		{"wildcard token", func() error { _, err := c.CompareAndSwap(ctx, "k", `"*"`, nil); return err }, blobstore.ErrPreconditionFailed, "names no version"},
		{"invalid key", func() error { _, err := c.Put(ctx, "a//b", nil); return err }, blobstore.ErrInvalidKey, "empty segment"},
		{"done context", func() error { _, err := c.Put(cancelled, "k", nil); return err }, context.Canceled, "canceled"},
	} {
		err := tc.call()
		var oe *blobstore.OpError
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || !errors.As(err, &oe) || oe.Store != "mem://limited/p/" {
			t.Errorf("%s: %v, want an OpError on mem://limited/p/ matching %v and saying %q", tc.name, err, tc.want, tc.msg)
		}
	}
	if n := d.requests.Load(); n != 1 {
		t.Errorf("%d requests reached the driver, want only the first create", n)
	}
	if _, err := c.CompareAndSwap(ctx, "k", tok, make([]byte, 10)); err != nil {
		t.Errorf("a conditional body at the limit: %v", err)
	}
}

func TestMiddlewareSeesKeysRelativeToItsContainer(t *testing.T) {
	ctx := t.Context()
	root := mem.New()
	shards, err := blobstore.Sub(root, "shards")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	watched := shards.With("watched", func(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
		seen = append(seen, call.Op.String()+" "+call.Key)
		return next(ctx, call)
	})
	s1, err := blobstore.Sub(watched, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Put(ctx, "fence/a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	page, err := s1.List(ctx, "fence/", "", 0)
	if err != nil || len(page.Items) != 1 || page.Items[0].Key != "fence/a" {
		t.Fatalf("List through the middleware: %+v, %v", page, err)
	}
	if _, err := root.Get(ctx, "shards/s1/fence/a"); err != nil {
		t.Fatalf("the write is not under the full prefix: %v", err)
	}
	if fmt.Sprint(seen) != "[Put s1/fence/a List s1/fence/]" {
		t.Errorf("middleware saw %q", seen)
	}
	if s := s1.String(); s != "watched(mem://private/shards/s1/)" {
		t.Errorf("String() = %q", s)
	}
	_, err = s1.Get(ctx, "missing")
	var oe *blobstore.OpError
	if !errors.As(err, &oe) || oe.Key != "missing" || oe.Store != s1.String() {
		t.Errorf("error %v does not name the key relative to the container called", err)
	}
}

func TestProbeAcceptsEnforcingStore(t *testing.T) {
	ctx := context.Background()
	c := mem.New()
	if err := blobstore.ProbePreconditions(ctx, c); err != nil {
		t.Fatalf("probe refused an enforcing store: %v", err)
	}
	left, err := c.List(ctx, "", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Fatalf("probe left scratch keys behind: %+v", left.Items)
	}
}
