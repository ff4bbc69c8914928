package gcs_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/gcs"
	"github.com/shardfence/shardfence/conformance"
)

// TestConformance reads through the XML API; the range checks run again on a
// store opened by URL, which reads through the JSON API.
func TestRangeChecksJSONReads(t *testing.T) {
	only := []string{"range-reads", "range-edges", "range-pinned", "range-cancel", "range-stream-128mib"}
	rep := conformance.Run(t.Context(), openURL(t, ""), conformance.Options{Only: only})
	for _, res := range rep.Results {
		if res.Status == conformance.Fail {
			t.Errorf("%s: %s", res.Name, strings.Join(res.Details, "; "))
		}
	}
	if rep.Count(conformance.Pass) != len(only) {
		t.Errorf("%d of the %d range checks passed", rep.Count(conformance.Pass), len(only))
	}
}

// fake-gcs-server serves a read whatever its ifGenerationMatch says, on both
// read paths. This is why the driver compares the generation it was served
// with the pin itself; if this test starts failing, the emulator enforces the
// condition (and the driver's own comparison is merely redundant).
func TestFakeGCSIgnoresReadPrecondition(t *testing.T) {
	for _, json := range []bool{false, true} {
		var opts []option.ClientOption
		if json {
			opts = append(opts, storage.WithJSONReads())
		}
		ctx := t.Context()
		obj := newClient(t, opts...).Bucket(server.Bucket).Object(uniquePrefix(t) + "/k")
		w := obj.NewWriter(ctx)
		if _, err := w.Write([]byte("body")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		gen := w.Attrs().Generation
		r, err := obj.If(storage.Conditions{GenerationMatch: gen + 1}).NewRangeReader(ctx, 0, -1)
		if err != nil {
			t.Fatalf("JSON reads %v: a read with a stale ifGenerationMatch failed (%v): the emulator now enforces read preconditions", json, err)
		}
		_ = r.Close()
		if r.Attrs.Generation != gen {
			t.Fatalf("JSON reads %v: served generation %d, stored %d", json, r.Attrs.Generation, gen)
		}
	}
}

// The corner cases a Range header cannot say (zero bytes, an offset at or
// past the end) keep the pin and the invalid range, on both read paths.
func TestRangeCorners(t *testing.T) {
	for name, c := range map[string]*blobstore.Container{"xml": newContainer(t, gcs.Options{}), "json": openURL(t, "")} {
		ctx := t.Context()
		old, err := c.Put(ctx, "k", []byte("0123456789"))
		if err != nil {
			t.Fatal(err)
		}
		cur, err := c.Put(ctx, "k", []byte("abcdef"))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			off, n int64
			pin    blobstore.Token
			want   error // nil: an empty stream of cur
		}{
			{6, -1, cur, nil},
			{6, 4, "", nil},
			{3, 0, cur, nil},
			{6, 0, "", nil},
			{7, 0, "", blobstore.ErrInvalidRange},
			{7, -1, cur, blobstore.ErrInvalidRange},
			{8, 0, old, blobstore.ErrPreconditionFailed},
			{6, -1, old, blobstore.ErrPreconditionFailed},
			{3, 0, old, blobstore.ErrPreconditionFailed},
			{2, 2, old, blobstore.ErrPreconditionFailed},
		} {
			rc, attrs, err := c.NewRangeReader(ctx, "k", tc.off, tc.n, tc.pin)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s: range %d/%d pinned to %q: %v, want %v", name, tc.off, tc.n, tc.pin, err, tc.want)
				}
				if err == nil {
					_ = rc.Close()
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: range %d/%d pinned to %q: %v", name, tc.off, tc.n, tc.pin, err)
				continue
			}
			body, err := io.ReadAll(rc)
			_ = rc.Close()
			if err != nil || len(body) != 0 || attrs.Size != 6 || attrs.Token != cur {
				t.Errorf("%s: range %d/%d pinned to %q: %q %v, attrs %+v; want nothing, size 6, token %q", name, tc.off, tc.n, tc.pin, body, err, attrs, cur)
			}
		}
		_, _, err = c.NewRangeReader(ctx, "missing", 0, 0, cur)
		if !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("%s: a zero-length pinned range of a missing key: %v, want ErrNotFound", name, err)
		}
	}
}

// strictReads answers 412 to every read carrying a generation condition, as
// GCS does when the generation does not match.
type strictReads struct{ next http.RoundTripper }

func (s strictReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && (r.Header.Get("X-Goog-If-Generation-Match") != "" || r.URL.Query().Get("ifGenerationMatch") != "") {
		return &http.Response{
			StatusCode: http.StatusPreconditionFailed, Status: "412 Precondition Failed", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:  http.Header{"Content-Type": {"application/json"}},
			Body:    io.NopCloser(strings.NewReader(`{"error":{"code":412,"message":"conditionNotMet"}}`)),
			Request: r,
		}, nil
	}
	return s.next.RoundTrip(r)
}

// A 412 on a pinned read is a replaced object, or a missing one, which the
// driver tells apart.
func TestPinnedRead412(t *testing.T) {
	for _, json := range []bool{false, true} {
		opts := []option.ClientOption{option.WithHTTPClient(&http.Client{Transport: strictReads{http.DefaultTransport}})}
		if json {
			opts = append(opts, storage.WithJSONReads())
		}
		c, err := gcs.New(newClient(t, opts...), server.Bucket, uniquePrefix(t), gcs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		tok, err := c.Put(ctx, "k", []byte("body"))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.NewRangeReader(ctx, "k", 0, 2, tok); !errors.Is(err, blobstore.ErrPreconditionFailed) {
			t.Errorf("JSON reads %v: a pinned read answered 412: %v, want ErrPreconditionFailed", json, err)
		}
		if _, _, err := c.NewRangeReader(ctx, "gone", 0, 2, tok); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("JSON reads %v: a pinned read of a missing key answered 412: %v, want ErrNotFound", json, err)
		}
	}
}
