package blobstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestErrorsWrapAndClassify(t *testing.T) {
	err := blobstore.Wrap("CompareAndSwap", "mem://x/", "fence/k", blobstore.ErrPreconditionFailed)
	var oe *blobstore.OpError
	if !errors.As(err, &oe) || oe.Op != "CompareAndSwap" || oe.Key != "fence/k" {
		t.Fatalf("Wrap did not produce an OpError with op and key: %#v", err)
	}
	if !errors.Is(err, blobstore.ErrPreconditionFailed) || !blobstore.IsDefinite(err) || blobstore.IsRetryable(err) {
		t.Fatalf("a precondition failure must be definite and not retryable: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "fence/k") || !strings.Contains(msg, "CompareAndSwap") {
		t.Fatalf("message %q does not name the op and key", msg)
	}
	if again := blobstore.Wrap("Get", "s", "other", err); again != err {
		t.Fatalf("Wrap re-wrapped an OpError: %v", again)
	}

	amb := blobstore.Wrap("Put", "s", "k", blobstore.Ambiguous(context.DeadlineExceeded))
	if !blobstore.IsAmbiguous(amb) || !errors.Is(amb, context.DeadlineExceeded) || !blobstore.IsRetryable(amb) || blobstore.IsDefinite(amb) {
		t.Fatalf("ambiguous timeout misclassified: %v", amb)
	}
	if blobstore.Ambiguous(amb) != amb {
		t.Fatal("Ambiguous wrapped an already ambiguous error twice")
	}
	if !blobstore.IsRetryable(blobstore.Wrap("Put", "s", "k", blobstore.ErrConflict)) {
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

func TestCheckConditionalBody(t *testing.T) {
	caps := blobstore.Capabilities{MaxConditionalBody: 10}
	if err := blobstore.CheckConditionalBody("CompareAndSwap", "s", "k", 10, caps); err != nil {
		t.Fatal(err)
	}
	err := blobstore.CheckConditionalBody("CompareAndSwap", "s", "k", 11, caps)
	if !errors.Is(err, blobstore.ErrTooLarge) || !strings.Contains(err.Error(), "11 bytes") {
		t.Fatalf("oversized conditional body: %v", err)
	}
	if err := blobstore.CheckConditionalBody("CompareAndSwap", "s", "k", 1<<30, blobstore.Capabilities{}); err != nil {
		t.Fatalf("no limit means no refusal: %v", err)
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
