package gcs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/gcs"
	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// One server serves the whole package; every container gets its own prefix.
// serverErr says why there is none (fake-gcs-server not installed: each test
// needing it then fails under CI and skips elsewhere).
var (
	server    *testservers.FakeGCS
	serverErr error
)

func TestMain(m *testing.M) {
	server, serverErr = testservers.StartFakeGCS()
	code := m.Run()
	if server != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "fake-gcs-server log (tail):\n%s\n", server.LogTail(4000))
		}
		server.Stop()
	}
	os.Exit(code)
}

// needServer ends the test unless the package's server is running.
func needServer(t *testing.T) {
	t.Helper()
	if server == nil {
		testservers.Unavailable(t, "fake-gcs-server", serverErr)
	}
}

// newClient is a client for the server, closed when the test ends.
func newClient(t *testing.T, opts ...option.ClientOption) *storage.Client {
	t.Helper()
	needServer(t)
	client, err := server.NewClient(t.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

var prefixes atomic.Uint64

func uniquePrefix(t *testing.T) string {
	return fmt.Sprintf("t%d-%s", prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "-"))
}

// newContainer is a fresh namespace through a client built here (XML reads).
func newContainer(t *testing.T, opts gcs.Options) *blobstore.Container {
	t.Helper()
	client := newClient(t)
	c, err := gcs.New(client, server.Bucket, uniquePrefix(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openURL is a fresh namespace opened the way a user opens one: by URL, over
// TCP to 127.0.0.1.
func openURL(t *testing.T, query string) *blobstore.Container {
	t.Helper()
	needServer(t)
	raw := server.StoreURL(uniquePrefix(t))
	if query != "" {
		raw += "&" + query
	}
	c, err := blobstore.Open(t.Context(), raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The suite runs through a client built here, reading through the XML API;
// the shardfence conformance command's test runs it again by URL (JSON
// reads).
func TestConformance(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) *blobstore.Container {
		return newContainer(t, gcs.Options{})
	})
}

// The fencing suite runs through a store opened by URL (JSON reads), the
// way serve opens it; the blob suite above covers the XML read path.
func TestFencing(t *testing.T) {
	conformance.RunSuiteWithLimits(t, conformance.FencingSuite, openURL(t, ""), nil)
}

func TestProbePreconditions(t *testing.T) {
	if err := blobstore.ProbePreconditions(t.Context(), newContainer(t, gcs.Options{})); err != nil {
		t.Fatalf("probe refused fake-gcs-server: %v", err)
	}
}

func TestTokenIsGeneration(t *testing.T) {
	ctx := t.Context()
	c := newContainer(t, gcs.Options{})
	tok, err := c.CreateIfAbsent(ctx, "gen", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	client := newClient(t)
	attrs, err := client.Bucket(server.Bucket).Object(strings.TrimPrefix(c.String(), "gs://"+server.Bucket+"/") + "gen").Attrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(attrs.Generation); string(tok) != want {
		t.Fatalf("token %q, want the object generation %s", tok, want)
	}
	// A token that is no generation cannot match: a definite refusal that
	// names the token, never an unconditional write.
	for _, bad := range []blobstore.Token{"", "0", "-3", "etag-like", `"0x8D"`} {
		_, err := c.CompareAndSwap(ctx, "gen", bad, []byte("two"))
		if !errors.Is(err, blobstore.ErrPreconditionFailed) {
			t.Errorf("CAS with token %q: %v, want ErrPreconditionFailed", bad, err)
		}
	}
	obj, err := c.Get(ctx, "gen")
	if err != nil || string(obj.Body) != "one" || obj.Token != tok {
		t.Fatalf("after refused CASes: %q@%s, %v; want \"one\"@%s", obj.Body, obj.Token, err, tok)
	}
}

// fake-gcs-server deletes on a stale ifGenerationMatch. This is why
// conditional delete is off unless the URL turns it on: if this test starts
// failing, the emulator enforces the condition and the conformance suite can
// run with conditional_delete=true as well.
func TestFakeGCSIgnoresDeletePrecondition(t *testing.T) {
	ctx := t.Context()
	c := newContainer(t, gcs.Options{ConditionalDelete: true})
	old, err := c.Put(ctx, "k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", []byte("two")); err != nil {
		t.Fatal(err)
	}
	err = c.DeleteIfMatch(ctx, "k", old)
	_, statErr := c.Stat(ctx, "k")
	if err == nil && errors.Is(statErr, blobstore.ErrNotFound) {
		return // the known emulator behaviour
	}
	t.Fatalf("stale DeleteIfMatch on fake-gcs-server: %v, then Stat: %v; the emulator now enforces delete preconditions", err, statErr)
}

func TestConditionalDeleteOffByDefault(t *testing.T) {
	ctx := t.Context()
	c := openURL(t, "")
	if c.Capabilities().ConditionalDelete {
		t.Fatal("ConditionalDelete advertised without conditional_delete=true")
	}
	tok, err := c.Put(ctx, "k", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	err = c.DeleteIfMatch(ctx, "k", tok)
	if !errors.Is(err, blobstore.ErrUnsupported) || !strings.Contains(err.Error(), "conditional_delete=true") {
		t.Fatalf("DeleteIfMatch: %v; want ErrUnsupported saying how to turn it on", err)
	}
	if _, err := c.Stat(ctx, "k"); err != nil {
		t.Fatalf("object gone after a refused DeleteIfMatch: %v", err)
	}
	on := openURL(t, "conditional_delete=true")
	if !on.Capabilities().ConditionalDelete {
		t.Fatal("conditional_delete=true did not advertise ConditionalDelete")
	}
}

func TestConditionalBodyLimit(t *testing.T) {
	ctx := t.Context()
	c := openURL(t, "max_conditional_body=16")
	if got := c.Capabilities().MaxConditionalBody; got != 16 {
		t.Fatalf("MaxConditionalBody %d, want 16", got)
	}
	body := bytes.Repeat([]byte("x"), 17)
	if _, err := c.CreateIfAbsent(ctx, "big", body); !errors.Is(err, blobstore.ErrTooLarge) {
		t.Fatalf("CreateIfAbsent of 17 bytes: %v, want ErrTooLarge", err)
	}
	if _, err := c.Stat(ctx, "big"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("refused create left an object: %v", err)
	}
	tok, err := c.CreateIfAbsent(ctx, "big", body[:16])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompareAndSwap(ctx, "big", tok, body); !errors.Is(err, blobstore.ErrTooLarge) {
		t.Fatalf("CompareAndSwap of 17 bytes: %v, want ErrTooLarge", err)
	}
	// Unconditional writes have no such limit.
	if _, err := c.Put(ctx, "big", body); err != nil {
		t.Fatal(err)
	}
}

func TestOpenURLErrors(t *testing.T) {
	for _, raw := range []string{
		"gs:///prefix",
		"gs://bucket/p?endpoint=127.0.0.1:4443",
		"gs://bucket/p?endpoint=ftp://127.0.0.1",
		"gs://bucket/p?conditional_delete=maybe",
		"gs://bucket/p?max_conditional_body=-1",
		"gs://bucket/p?conditonal_delete=true",
		"gs://bucket/a//b?endpoint=http://127.0.0.1:1",
		"gs://user:secret@bucket/p?endpoint=http://127.0.0.1:1",
	} {
		c, err := blobstore.Open(t.Context(), raw)
		if err == nil {
			c.Close()
			t.Errorf("Open(%s) succeeded", raw)
			continue
		}
		if !errors.Is(err, blobstore.ErrBadURL) {
			t.Errorf("Open(%s): %v, want ErrBadURL", raw, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s) error shows the credential: %v", raw, err)
		}
	}
}

// lossyTransport forwards requests to the server and can lose the response
// of the next conditional upload after the server has applied it, as a
// dropped connection would, or answer the next upload itself with an error
// status the server never sent, as a proxy in front of the store would; it
// counts the uploads it saw.
type lossyTransport struct {
	next      http.RoundTripper
	loseOne   atomic.Bool
	answerOne atomic.Int64 // an HTTP status, 0 for none
	uploads   atomic.Int64
}

func (l *lossyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	upload := strings.Contains(r.URL.Path, "/upload/")
	if upload {
		l.uploads.Add(1)
		if status := l.answerOne.Swap(0); status != 0 {
			body := fmt.Sprintf(`{"error":{"code":%d,"message":"injected","errors":[{"reason":"injected"}]}}`, status)
			return &http.Response{
				StatusCode: int(status), Status: http.StatusText(int(status)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header:  http.Header{"Content-Type": {"application/json"}},
				Body:    io.NopCloser(strings.NewReader(body)),
				Request: r,
			}, nil
		}
	}
	resp, err := l.next.RoundTrip(r)
	if err == nil && upload && l.loseOne.CompareAndSwap(true, false) {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (response lost)")
	}
	return resp, err
}

// A conditional write whose response is lost must come back ambiguous: one
// attempt, no resend that would meet its own object and report a definite
// refusal for a write that took effect. Error statuses on the wire map the
// same way, through the real client.
func TestWriteFaultsOnTheWire(t *testing.T) {
	ctx := t.Context()
	lossy := &lossyTransport{next: http.DefaultTransport}
	client := newClient(t, option.WithHTTPClient(&http.Client{Transport: lossy}), storage.WithJSONReads())
	c, err := gcs.New(client, server.Bucket, uniquePrefix(t), gcs.Options{})
	if err != nil {
		t.Fatal(err)
	}

	lossy.loseOne.Store(true)
	_, err = c.CreateIfAbsent(ctx, "k", []byte("mine"))
	if !blobstore.IsAmbiguous(err) || errors.Is(err, blobstore.ErrAlreadyExists) {
		t.Fatalf("CreateIfAbsent with a lost response: %v; want ErrAmbiguous and not ErrAlreadyExists", err)
	}
	if n := lossy.uploads.Load(); n != 1 {
		t.Fatalf("%d upload requests for one conditional write; a resend could misreport it", n)
	}
	obj, err := c.Get(ctx, "k")
	if err != nil || string(obj.Body) != "mine" {
		t.Fatalf("the write took effect on the server, Get: %q %v", obj.Body, err)
	}

	lossy.loseOne.Store(true)
	_, err = c.CompareAndSwap(ctx, "k", obj.Token, []byte("mine two"))
	if !blobstore.IsAmbiguous(err) || errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("CompareAndSwap with a lost response: %v; want ErrAmbiguous and not ErrPreconditionFailed", err)
	}
	if n := lossy.uploads.Load(); n != 2 {
		t.Fatalf("%d upload requests for two conditional writes", n)
	}

	// On the wire, a 409 is a conflict the caller retries, and a 503 to a
	// conditional write is ambiguous: neither may pass for a refusal.
	cur, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lossy.answerOne.Store(http.StatusConflict)
	_, err = c.CompareAndSwap(ctx, "k", cur.Token, []byte("mine three"))
	if !errors.Is(err, blobstore.ErrConflict) || !blobstore.IsRetryable(err) || errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("CompareAndSwap answered 409: %v; want a retryable ErrConflict", err)
	}
	lossy.answerOne.Store(http.StatusServiceUnavailable)
	_, err = c.CreateIfAbsent(ctx, "k2", []byte("x"))
	if !blobstore.IsAmbiguous(err) {
		t.Fatalf("CreateIfAbsent answered 503: %v; want ErrAmbiguous", err)
	}
	if n := lossy.uploads.Load(); n != 4 {
		t.Fatalf("%d upload requests after four writes; an injected answer was retried", n)
	}
	// Neither injected answer reached the server: the conflicting CAS can
	// be retried with the same token.
	if _, err := c.CompareAndSwap(ctx, "k", cur.Token, []byte("mine three")); err != nil {
		t.Fatalf("retried CAS after the 409: %v", err)
	}
}

// A store that refuses connections is unavailable: nothing was sent, so even
// a write is a definite, retryable failure.
func TestConnectionRefusedIsUnavailable(t *testing.T) {
	ctx := t.Context()
	port, err := testservers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	raw := "gs://b/p?" + url.Values{"endpoint": {fmt.Sprintf("http://127.0.0.1:%d", port)}}.Encode()
	c, err := blobstore.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CreateIfAbsent(ctx, "k", []byte("x"))
	if !errors.Is(err, blobstore.ErrUnavailable) || blobstore.IsAmbiguous(err) {
		t.Errorf("CreateIfAbsent against a closed port: %v; want ErrUnavailable", err)
	}
	var oe *blobstore.OpError
	if !errors.As(err, &oe) || oe.Op != blobstore.OpCreateIfAbsent || oe.Key != "k" || !strings.HasPrefix(oe.Store, "gs://b/p") {
		t.Errorf("error %v does not name op, store and key", err)
	}
	// Reads retry, but a bounded number of times: the caller hears that the
	// store is down rather than waiting for its own deadline.
	long, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := c.Get(long, "k"); !errors.Is(err, blobstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get against a closed port: %v; want ErrUnavailable after the retries", err)
	}
	if _, err := c.List(long, "", "", 10); !errors.Is(err, blobstore.ErrUnavailable) {
		t.Errorf("List against a closed port: %v; want ErrUnavailable", err)
	}
}
