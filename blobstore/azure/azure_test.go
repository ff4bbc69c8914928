package azure_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/azure"
	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

var prefixes atomic.Uint64

func uniquePrefix(t *testing.T) string {
	return fmt.Sprintf("t%d-%s", prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "-"))
}

// TestAzurite runs everything that needs the server under one Azurite
// process, since starting Node takes seconds.
func TestAzurite(t *testing.T) {
	srv := testservers.StartAzurite(t)
	srv.SetEnv(t)
	open := func(t *testing.T, query string) *blobstore.Container {
		t.Helper()
		raw := srv.StoreURL(uniquePrefix(t))
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

	t.Run("conformance", func(t *testing.T) {
		conformance.RunContainer(t, func(t *testing.T) *blobstore.Container { return open(t, "") })
	})
	t.Run("fencing", func(t *testing.T) {
		conformance.RunSuiteWithLimits(t, conformance.FencingSuite, open(t, ""), nil)
	})
	t.Run("probe", func(t *testing.T) {
		if err := blobstore.ProbePreconditions(t.Context(), open(t, "")); err != nil {
			t.Fatalf("probe refused Azurite: %v", err)
		}
	})
	t.Run("delete-if-match-enforced", func(t *testing.T) { testDeleteIfMatch(t, open(t, "")) })
	t.Run("token-is-etag", func(t *testing.T) { testTokenIsETag(t, open(t, "")) })
	t.Run("conditional-body-limit", func(t *testing.T) { testBodyLimit(t, open(t, "max_conditional_body=16")) })
	t.Run("write-faults-on-the-wire", func(t *testing.T) { testLostResponse(t, srv) })
	t.Run("range-resume-pinned", func(t *testing.T) { testRangeResume(t, srv) })
	t.Run("range-at-end-refused", func(t *testing.T) { testRangeAtEndRefused(t, srv) })
	t.Run("missing-container", func(t *testing.T) {
		raw := strings.Replace(srv.StoreURL(uniquePrefix(t)), testservers.AzuriteContainer, "no-such-container", 1)
		c, err := blobstore.Open(t.Context(), raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Put(t.Context(), "k", []byte("x"))
		if err == nil || !strings.Contains(err.Error(), "container does not exist") || strings.Contains(err.Error(), testservers.AzuriteKey) {
			t.Fatalf("Put into a missing container: %v; want a message naming the missing container", err)
		}
	})
}

// Azurite enforces If-Match on Delete Blob, which is what lets the driver
// advertise ConditionalDelete (MinIO and fake-gcs-server do not).
func testDeleteIfMatch(t *testing.T, c *blobstore.Container) {
	ctx := t.Context()
	if !c.Capabilities().ConditionalDelete {
		t.Fatal("ConditionalDelete not advertised")
	}
	old, err := c.Put(ctx, "k", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := c.Put(ctx, "k", []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteIfMatch(ctx, "k", old); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("stale DeleteIfMatch: %v, want ErrPreconditionFailed", err)
	}
	for _, bad := range []blobstore.Token{"", "*", " * "} {
		if err := c.DeleteIfMatch(ctx, "k", bad); !errors.Is(err, blobstore.ErrPreconditionFailed) {
			t.Fatalf("DeleteIfMatch with token %q: %v, want ErrPreconditionFailed (never a wildcard)", bad, err)
		}
	}
	if obj, err := c.Get(ctx, "k"); err != nil || string(obj.Body) != "two" || obj.Token != cur {
		t.Fatalf("after refused deletes: %q@%s %v", obj.Body, obj.Token, err)
	}
	if err := c.DeleteIfMatch(ctx, "k", cur); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("after DeleteIfMatch with the current token: %v", err)
	}
}

func testTokenIsETag(t *testing.T, c *blobstore.Container) {
	ctx := t.Context()
	tok, err := c.CreateIfAbsent(ctx, "etag", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Stat(ctx, "etag")
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != tok || !strings.HasPrefix(string(tok), `"`) {
		t.Fatalf("token %q, Stat %q: want the quoted ETag as the service returns it", tok, a.Token)
	}
	if _, err := c.CompareAndSwap(ctx, "etag", "*", []byte("two")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("CAS with the wildcard token: %v, want ErrPreconditionFailed", err)
	}
	if obj, err := c.Get(ctx, "etag"); err != nil || string(obj.Body) != "one" || obj.Token != tok {
		t.Fatalf("after a wildcard CAS: %q@%s %v; want it refused", obj.Body, obj.Token, err)
	}
}

func testBodyLimit(t *testing.T, c *blobstore.Container) {
	ctx := t.Context()
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
}

// lossyTransport sends requests to the server and can lose the response of
// the next PUT after the server has applied it, or answer the next PUT
// itself with an error status and code the server never sent, as a proxy in
// front of the store would; it counts PUTs.
type lossyTransport struct {
	loseOne   atomic.Bool
	answerOne atomic.Pointer[injected]
	puts      atomic.Int64
}

type injected struct {
	status int
	code   string
}

func (l *lossyTransport) Do(r *http.Request) (*http.Response, error) {
	put := r.Method == http.MethodPut
	if put {
		l.puts.Add(1)
		if in := l.answerOne.Swap(nil); in != nil {
			return &http.Response{
				StatusCode: in.status, Status: http.StatusText(in.status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header:  http.Header{"X-Ms-Error-Code": {in.code}},
				Body:    http.NoBody,
				Request: r,
			}, nil
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && put && l.loseOne.CompareAndSwap(true, false) {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (response lost)")
	}
	return resp, err
}

// A conditional write whose response is lost must come back ambiguous after
// one attempt; the pipeline's default retries would resend it, meet its own
// blob and report BlobAlreadyExists for a write that took effect. Error
// answers on the wire map the same way, through the real pipeline.
func testLostResponse(t *testing.T, srv *testservers.Azurite) {
	ctx := t.Context()
	lossy := &lossyTransport{}
	cred, err := container.NewSharedKeyCredential(testservers.AzuriteAccount, testservers.AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := container.NewClientWithSharedKeyCredential(srv.Endpoint+"/"+srv.Container, cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: lossy}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := azure.New(cc, testservers.AzuriteAccount, srv.Container, uniquePrefix(t), azure.Options{})
	if err != nil {
		t.Fatal(err)
	}

	lossy.loseOne.Store(true)
	_, err = c.CreateIfAbsent(ctx, "k", []byte("mine"))
	if !blobstore.IsAmbiguous(err) || errors.Is(err, blobstore.ErrAlreadyExists) {
		t.Fatalf("CreateIfAbsent with a lost response: %v; want ErrAmbiguous and not ErrAlreadyExists", err)
	}
	if n := lossy.puts.Load(); n != 1 {
		t.Fatalf("%d PUTs for one conditional write; a resend could misreport it", n)
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
	if n := lossy.puts.Load(); n != 2 {
		t.Fatalf("%d PUTs for two conditional writes", n)
	}

	// On the wire, a 503 to a conditional write is ambiguous, and a 412
	// that is not ConditionNotMet (a lease) is no precondition failure.
	cur, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lossy.answerOne.Store(&injected{http.StatusServiceUnavailable, "ServerBusy"})
	_, err = c.CompareAndSwap(ctx, "k", cur.Token, []byte("mine three"))
	if !blobstore.IsAmbiguous(err) || !strings.Contains(err.Error(), "503 ServerBusy") {
		t.Fatalf("CompareAndSwap answered 503 ServerBusy: %v; want ErrAmbiguous naming the answer", err)
	}
	lossy.answerOne.Store(&injected{http.StatusPreconditionFailed, "LeaseIdMissing"})
	_, err = c.CompareAndSwap(ctx, "k", cur.Token, []byte("mine three"))
	if err == nil || errors.Is(err, blobstore.ErrPreconditionFailed) || blobstore.IsRetryable(err) {
		t.Fatalf("CompareAndSwap answered 412 LeaseIdMissing: %v; want a definite error that is not a precondition failure", err)
	}
	if n := lossy.puts.Load(); n != 4 {
		t.Fatalf("%d PUTs after four writes; an injected answer was retried", n)
	}
	if _, err := c.CompareAndSwap(ctx, "k", cur.Token, []byte("mine three")); err != nil {
		t.Fatalf("CAS after the injected answers, which never reached the server: %v", err)
	}
}

func TestOpenURLErrors(t *testing.T) {
	t.Setenv("AZURE_STORAGE_ACCOUNT", "")
	t.Setenv("AZURE_STORAGE_KEY", testservers.AzuriteKey)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "")
	for _, raw := range []string{
		"azblob://acct",
		"azblob://acct/",
		"azblob:///container/p",
		"azblob://acct/UPPER/p",
		"azblob://acct/a/p",
		"azblob://acct/bad--name/p",
		"azblob://acct/container/p?endpoint=127.0.0.1:10000",
		"azblob://acct/container/p?max_conditional_body=0",
		"azblob://acct/container/p?max_conditional_body=999999999999",
		"azblob://acct/container/p?conditional_delete=true",
		"azblob://acct/container/a//b",
		"azblob://user:secret@acct/container/p",
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
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), testservers.AzuriteKey) {
			t.Errorf("Open(%s) error shows a credential: %v", raw, err)
		}
	}
}

func TestCredentialsFromEnvironment(t *testing.T) {
	raw := "azblob://acct/container/p?" + url.Values{"endpoint": {"http://127.0.0.1:1"}}.Encode()
	for _, tc := range []struct {
		name                    string
		account, key, conn, sas string
		wantErr                 string
	}{
		{name: "none", wantErr: "no Azure credentials"},
		{name: "key for another account", account: "other", key: testservers.AzuriteKey, wantErr: `belongs to account "other"`},
		{name: "key not base64", key: "not base64 !!", wantErr: "not a valid base64"},
		{name: "key", key: testservers.AzuriteKey},
		{name: "key with matching account", account: "acct", key: testservers.AzuriteKey},
		{name: "sas", sas: "?sv=2020-08-04&sig=c2VjcmV0"},
		{name: "connection string", conn: "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + testservers.AzuriteKey + ";BlobEndpoint=http://127.0.0.1:1/acct;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AZURE_STORAGE_ACCOUNT", tc.account)
			t.Setenv("AZURE_STORAGE_KEY", tc.key)
			t.Setenv("AZURE_STORAGE_CONNECTION_STRING", tc.conn)
			t.Setenv("AZURE_STORAGE_SAS_TOKEN", tc.sas)
			c, err := blobstore.Open(t.Context(), raw)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if s := c.String(); s != "azblob://acct/container/p/" {
					t.Errorf("String() = %q", s)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("Open succeeded, want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), testservers.AzuriteKey) {
				t.Fatalf("Open: %v; want %q and no key", err, tc.wantErr)
			}
		})
	}
}

// Against a closed port nothing is sent, so even a write fails definitely
// and may be retried.
func TestConnectionRefusedIsUnavailable(t *testing.T) {
	t.Setenv("AZURE_STORAGE_ACCOUNT", testservers.AzuriteAccount)
	t.Setenv("AZURE_STORAGE_KEY", testservers.AzuriteKey)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "")
	port, err := testservers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	raw := "azblob://" + testservers.AzuriteAccount + "/c0ntainer/p?" + url.Values{"endpoint": {fmt.Sprintf("http://127.0.0.1:%d", port)}}.Encode()
	c, err := blobstore.Open(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func() error{
		"CreateIfAbsent": func() error { _, err := c.CreateIfAbsent(t.Context(), "k", []byte("x")); return err },
		"CompareAndSwap": func() error { _, err := c.CompareAndSwap(t.Context(), "k", `"0x1"`, []byte("x")); return err },
		"DeleteIfMatch":  func() error { return c.DeleteIfMatch(t.Context(), "k", `"0x1"`) },
		// Reads retry, a bounded number of times.
		"Get": func() error { _, err := c.Get(t.Context(), "k"); return err },
	} {
		err := op()
		if !errors.Is(err, blobstore.ErrUnavailable) || blobstore.IsAmbiguous(err) {
			t.Errorf("%s against a closed port: %v; want ErrUnavailable", name, err)
		}
		var oe *blobstore.OpError
		if !errors.As(err, &oe) || oe.Op.String() != name || oe.Key != "k" {
			t.Errorf("%s: error %v does not name op and key", name, err)
		}
	}
}
