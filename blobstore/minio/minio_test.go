package minio_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/minio"
	_ "github.com/shardfence/shardfence/blobstore/s3"
	"github.com/shardfence/shardfence/conformance"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

func TestMinIO(t *testing.T) {
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	var n atomic.Int64
	newContainer := func(t *testing.T) *blobstore.Container {
		return testservers.OpenStore(t, srv.MinioURL(fmt.Sprintf("t%d", n.Add(1))))
	}
	t.Run("conformance", func(t *testing.T) {
		conformance.RunWithLimits(t, newContainer(t), nil)
	})
	t.Run("fencing", func(t *testing.T) {
		conformance.RunSuiteWithLimits(t, conformance.FencingSuite, newContainer(t), nil)
	})
	t.Run("probe", func(t *testing.T) {
		if err := blobstore.ProbePreconditions(t.Context(), newContainer(t)); err != nil {
			t.Fatalf("probe refused MinIO: %v", err)
		}
	})
	t.Run("same-tokens-as-s3-scheme", func(t *testing.T) {
		// One object seen through both drivers has one token, so a CAS
		// chain can move between them.
		prefix := fmt.Sprintf("t%d", n.Add(1))
		m := testservers.OpenStore(t, srv.MinioURL(prefix))
		s := testservers.OpenStore(t, srv.S3URL(prefix))
		ctx := t.Context()
		t1, err := m.CreateIfAbsent(ctx, "k", []byte("by minio"))
		if err != nil {
			t.Fatal(err)
		}
		obj, err := s.Get(ctx, "k")
		if err != nil || obj.Token != t1 {
			t.Fatalf("s3 scheme reads token %s (%v); minio scheme wrote %s", obj.Token, err, t1)
		}
		t2, err := s.CompareAndSwap(ctx, "k", t1, []byte("by s3"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.CompareAndSwap(ctx, "k", t1, []byte("stale")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
			t.Fatalf("stale CAS through the minio scheme: %v; want ErrPreconditionFailed", err)
		}
		if _, err := m.CompareAndSwap(ctx, "k", t2, []byte("by minio again")); err != nil {
			t.Fatalf("CAS through the minio scheme with the s3 scheme's token: %v", err)
		}
		page, err := m.List(ctx, "", "", 10)
		if err != nil || len(page.Items) != 1 || page.Items[0].Key != "k" {
			t.Fatalf("List: %+v %v", page, err)
		}
		cur, err := s.Stat(ctx, "k")
		if err != nil || page.Items[0].Token != cur.Token {
			t.Fatalf("List token %s, Stat token %s (%v)", page.Items[0].Token, cur.Token, err)
		}
	})
	t.Run("lost-response-is-ambiguous", func(t *testing.T) {
		// A retry of a conditional PUT whose response was lost would meet
		// the driver's own write and come back 412.
		proxy := testservers.NewS3Proxy(t, srv.Endpoint())
		via := *srv
		via.Host = strings.TrimPrefix(proxy.URL, "http://")
		c := testservers.OpenStore(t, via.MinioURL(fmt.Sprintf("t%d", n.Add(1))))
		ctx := t.Context()
		proxy.LoseResponse(1)
		_, err := c.CreateIfAbsent(ctx, "k", []byte("mine"))
		if !blobstore.IsAmbiguous(err) || errors.Is(err, blobstore.ErrAlreadyExists) {
			t.Fatalf("create whose response was lost: %v; want ErrAmbiguous, never ErrAlreadyExists", err)
		}
		if got := proxy.Conditional(); got != 1 {
			t.Errorf("%d conditional PUTs for one create; want exactly 1", got)
		}
		obj, err := c.Get(ctx, "k")
		if err != nil || string(obj.Body) != "mine" {
			t.Fatalf("after the lost create: %q %v; the write landed and must read back", obj.Body, err)
		}
		proxy.Conflict(1)
		if _, err := c.CompareAndSwap(ctx, "k", obj.Token, []byte("next")); !errors.Is(err, blobstore.ErrConflict) || !blobstore.IsRetryable(err) {
			t.Fatalf("CAS answered 409: %v; want a retryable ErrConflict", err)
		}
		if got := proxy.Conditional(); got != 2 {
			t.Errorf("%d conditional PUTs after one create and one CAS; want exactly 2", got)
		}
	})
	t.Run("wrong-credentials", func(t *testing.T) {
		u, _ := url.Parse(srv.MinioURL("p"))
		u.User = url.UserPassword(srv.AccessKey, "wrong-secret-value")
		c := testservers.OpenStore(t, u.String())
		_, err := c.CreateIfAbsent(t.Context(), "k", []byte("v"))
		if err == nil || blobstore.IsRetryable(err) || blobstore.IsDefinite(err) {
			t.Fatalf("create with a wrong secret: %v; want a non-retryable access error", err)
		}
		if strings.Contains(err.Error(), "wrong-secret-value") || strings.Contains(c.String(), "wrong-secret-value") {
			t.Errorf("error or name shows the secret: %v / %s", err, c)
		}
	})
}

// MinIO fails no required check. Its "a" beside "a/b" listing gap is only
// the advisory keys-object-and-prefix check (the s3 package's tests pin it
// down).

func TestParseURL(t *testing.T) {
	t.Setenv("MINIO_ACCESS_KEY", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "envkey")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
	parse := func(raw string) (minio.Config, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return minio.ParseURL(u)
	}
	cfg, err := parse("minio://127.0.0.1:9000/bkt/shards/a?secure=false")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Endpoint != "127.0.0.1:9000" || cfg.Bucket != "bkt" || cfg.Prefix != "shards/a" || cfg.Secure || cfg.AccessKey != "envkey" || cfg.SecretKey != "envsecret" {
		t.Errorf("parsed %+v", cfg)
	}
	t.Setenv("MINIO_ACCESS_KEY", "mkey")
	t.Setenv("MINIO_SECRET_KEY", "msecret")
	cfg, err = parse("minio://store:9000/bkt")
	if err != nil || !cfg.Secure || cfg.AccessKey != "mkey" || cfg.SecretKey != "msecret" || cfg.Prefix != "" {
		t.Errorf("MINIO_* env not preferred or secure not default: %+v %v", cfg, err)
	}
	cfg, err = parse("minio://ui:us@store:9000/bkt/p")
	if err != nil || cfg.AccessKey != "ui" || cfg.SecretKey != "us" {
		t.Errorf("user info not preferred: %+v %v", cfg, err)
	}
	// A bucket name minio-go refuses on every request is refused here:
	// too short, a character no bucket name has, two dots in a row.
	for _, bad := range []string{"minio:///bkt", "minio://h:1/", "minio://h:1/bkt?secure=maybe", "minio://h:1/bkt?sekure=true",
		"minio://h:1/dm/p", "minio://h:1/b!x", "minio://h:1/a..b"} {
		if _, err := parse(bad); !errors.Is(err, blobstore.ErrBadURL) {
			t.Errorf("ParseURL(%q) = %v; want ErrBadURL", bad, err)
		}
	}
}

func TestNoConditionalDelete(t *testing.T) {
	c := testservers.OpenStore(t, "minio://ak:supersecret@127.0.0.1:1/bkt/p?secure=false")
	if c.Capabilities().ConditionalDelete {
		t.Fatal("minio driver claims ConditionalDelete; MinIO ignores If-Match on DELETE")
	}
	if err := c.DeleteIfMatch(t.Context(), "k", `"x"`); !errors.Is(err, blobstore.ErrUnsupported) {
		t.Errorf("DeleteIfMatch: %v; want ErrUnsupported", err)
	}
	if strings.Contains(c.String(), "supersecret") {
		t.Errorf("String() shows the secret: %s", c)
	}
	if _, err := c.CompareAndSwap(t.Context(), "k", "", nil); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Errorf("CAS with the empty token: %v; want ErrPreconditionFailed without sending", err)
	}
	if _, err := c.CompareAndSwap(t.Context(), "k", `"*"`, nil); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Errorf("CAS with a wildcard token: %v; want ErrPreconditionFailed without sending", err)
	}
	// Nothing listens on port 1: a create was never sent.
	if _, err := c.CreateIfAbsent(t.Context(), "k", []byte("x")); !errors.Is(err, blobstore.ErrUnavailable) || blobstore.IsAmbiguous(err) {
		t.Errorf("create against a closed port: %v; want ErrUnavailable, not ambiguous", err)
	}
}

// A minio:// URL is HTTPS unless it says secure=false: against a plain
// HTTP server every call fails, and the error says how to fix the URL.
// With secure=false the same server is reached (and answers as it can).
func TestPlainHTTPServerErrorNamesSecureFalse(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "not an S3 server", http.StatusTeapot)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	c := testservers.OpenStore(t, "minio://ak:supersecret@"+host+"/bkt")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := c.Get(ctx, "k")
	if err == nil || !strings.Contains(err.Error(), "add ?secure=false for a server without TLS") {
		t.Fatalf("Get over HTTPS from a plain HTTP server: %v; want the secure=false hint", err)
	}
	t.Log(err)
	if !errors.Is(err, blobstore.ErrUnavailable) {
		t.Errorf("Get: %v; want it to stay ErrUnavailable", err)
	}
	_, err = c.CreateIfAbsent(ctx, "k", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "add ?secure=false") {
		t.Fatalf("CreateIfAbsent over HTTPS from a plain HTTP server: %v; want the secure=false hint", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the server answered %d HTTP requests sent over TLS", hits.Load())
	}

	plain := testservers.OpenStore(t, "minio://ak:supersecret@"+host+"/bkt?secure=false")
	_, err = plain.Get(ctx, "k")
	if err == nil || strings.Contains(err.Error(), "secure=false") {
		t.Fatalf("Get with secure=false: %v; want the server's refusal without the hint", err)
	}
	if hits.Load() == 0 {
		t.Fatal("secure=false did not reach the plain HTTP server")
	}
}
