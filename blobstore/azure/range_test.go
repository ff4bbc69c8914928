package azure_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/azure"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// rangeTransport sends requests to the server and can break the body of the
// next GET after some bytes, as a dropped connection would, or answer the
// next GET itself with 416 InvalidRange, as Azure does to a range starting
// at the end (Azurite answers that one with an empty 206). It counts GETs
// and HEADs and keeps the range of the last GET.
type rangeTransport struct {
	cutAfter   atomic.Int64
	refuseNext atomic.Bool
	gets       atomic.Int64
	heads      atomic.Int64
	lastRange  atomic.Pointer[string]
}

func (rt *rangeTransport) Do(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodHead:
		rt.heads.Add(1)
	case http.MethodGet:
		rt.gets.Add(1)
		// The SDK's range policy sets the key in lower case, as it is.
		rng := ""
		for k, v := range r.Header {
			if strings.EqualFold(k, "x-ms-range") && len(v) > 0 {
				rng = v[0]
			}
		}
		rt.lastRange.Store(&rng)
		if rt.refuseNext.CompareAndSwap(true, false) {
			return &http.Response{
				StatusCode: http.StatusRequestedRangeNotSatisfiable, Status: "416 Range Not Satisfiable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header:  http.Header{"X-Ms-Error-Code": {"InvalidRange"}},
				Body:    http.NoBody,
				Request: r,
			}, nil
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet {
		if n := rt.cutAfter.Swap(0); n > 0 {
			resp.Body = &cutBody{rc: resp.Body, left: n}
		}
	}
	return resp, err
}

// cutBody fails with a connection reset after left bytes.
type cutBody struct {
	rc   io.ReadCloser
	left int64
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.rc.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *cutBody) Close() error { return c.rc.Close() }

func rangeContainer(t *testing.T, srv *testservers.Azurite) (*blobstore.Container, *rangeTransport) {
	rt := &rangeTransport{}
	cred, err := container.NewSharedKeyCredential(testservers.AzuriteAccount, testservers.AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := container.NewClientWithSharedKeyCredential(srv.Endpoint+"/"+srv.Container, cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: rt}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := azure.New(cc, testservers.AzuriteAccount, srv.Container, uniquePrefix(t), azure.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, rt
}

func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ seed
	}
	return b
}

// A download broken mid-body resumes where it stopped, pinned to the ETag
// of the first answer: the same version's bytes, or ErrPreconditionFailed
// once the blob was replaced, never a mix of two versions.
func testRangeResume(t *testing.T, srv *testservers.Azurite) {
	ctx := t.Context()
	c, rt := rangeContainer(t, srv)
	v1 := patterned(256<<10, 1)
	t1, err := c.Put(ctx, "k", v1)
	if err != nil {
		t.Fatal(err)
	}

	// Unpinned, broken after 1000 bytes: one more GET, from byte 1000.
	rt.cutAfter.Store(1000)
	rc, attrs, err := c.NewRangeReader(ctx, "k", 10, 200<<10, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got, v1[10:10+200<<10]) || attrs.Token != t1 || attrs.Size != int64(len(v1)) {
		t.Fatalf("a resumed range: %d bytes (equal %v), attrs %+v, %v; want v1's bytes 10..%d and %q", len(got), bytes.Equal(got, v1[10:10+200<<10]), attrs, err, 10+200<<10, t1)
	}
	if n, r := rt.gets.Load(), *rt.lastRange.Load(); n != 2 || r != "bytes=1010-204809" {
		t.Fatalf("%d GETs, the last for %q; want 2, the second for bytes=1010-204809", n, r)
	}

	// Broken after 1000 bytes, and replaced before the resume.
	rt.cutAfter.Store(1000)
	rc, _, err = c.NewReader(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 500)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", patterned(256<<10, 2)); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rc)
	_ = rc.Close()
	if !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("a stream of v1 resumed after v2 replaced it: %d more bytes, %v; want ErrPreconditionFailed", len(rest), err)
	}
	if whole := append(head, rest...); !bytes.Equal(whole, v1[:len(whole)]) {
		t.Fatalf("the stream returned bytes that are not v1's")
	}
}

// Azure answers a range starting at the end with 416 InvalidRange: the
// driver asks for the properties to tell the empty stream at the end from a
// range past it.
func testRangeAtEndRefused(t *testing.T, srv *testservers.Azurite) {
	ctx := t.Context()
	c, rt := rangeContainer(t, srv)
	tok, err := c.Put(ctx, "k", []byte("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pin := range []blobstore.Token{"", tok} {
		rt.refuseNext.Store(true)
		heads := rt.heads.Load()
		rc, attrs, err := c.NewRangeReader(ctx, "k", 10, -1, pin)
		if err != nil {
			t.Fatalf("pin %q: a range at the end answered 416: %v; want an empty stream", pin, err)
		}
		got, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || len(got) != 0 || attrs.Size != 10 || attrs.Token != tok {
			t.Fatalf("pin %q: %q, attrs %+v, %v; want nothing, size 10, %q", pin, got, attrs, err, tok)
		}
		if n := rt.heads.Load() - heads; n != 1 {
			t.Fatalf("pin %q: %d HEADs after a 416, want 1", pin, n)
		}
	}
	rt.refuseNext.Store(true)
	if _, _, err := c.NewRangeReader(ctx, "k", 10, -1, `"0x1"`); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Fatalf("a range at the end pinned to a stale token, answered 416: %v; want ErrPreconditionFailed", err)
	}
	rt.refuseNext.Store(true)
	if _, _, err := c.NewRangeReader(ctx, "k", 11, 5, ""); !errors.Is(err, blobstore.ErrInvalidRange) {
		t.Fatalf("a range past the end answered 416: %v; want ErrInvalidRange", err)
	}
	// A zero length is one HEAD and no GET.
	gets, heads := rt.gets.Load(), rt.heads.Load()
	rc, attrs, err := c.NewRangeReader(ctx, "k", 3, 0, tok)
	if err != nil || attrs.Size != 10 || attrs.Token != tok {
		t.Fatalf("a zero-length range: attrs %+v, %v", attrs, err)
	}
	_ = rc.Close()
	if g, h := rt.gets.Load()-gets, rt.heads.Load()-heads; g != 0 || h != 1 {
		t.Fatalf("a zero-length range sent %d GETs and %d HEADs, want 0 and 1", g, h)
	}
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.NewRangeReader(ctx, "k", 0, 0, tok); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("a pinned zero-length range of a deleted blob: %v; want ErrNotFound", err)
	}
}
