package s3

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

func TestClassifyGetRange(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"412 on a pinned GET", sdkError("GetObject", 412, &smithy.GenericAPIError{Code: "PreconditionFailed"}), blobstore.ErrPreconditionFailed},
		{"404 on a pinned GET", sdkError("GetObject", 404, &smithy.GenericAPIError{Code: "NoSuchKey"}), blobstore.ErrNotFound},
		{"416 InvalidRange", sdkError("GetObject", 416, &smithy.GenericAPIError{Code: "InvalidRange"}), blobstore.ErrInvalidRange},
		{"503 is a read's", sdkError("GetObject", 503, &smithy.GenericAPIError{Code: "ServiceUnavailable"}), blobstore.ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := (&bucket{bucket: "bkt"}).Classify(driver.OpGetRange, tc.err)
			if !errors.Is(got, tc.want) || blobstore.IsAmbiguous(got) {
				t.Fatalf("Classify = %v; want errors.Is %v, not ambiguous", got, tc.want)
			}
		})
	}
}

// A store that ignores the Range header answers 200 with the whole body:
// the stream must still hold exactly the range, and Attrs the whole size.
func TestRangeFromStoreIgnoringRange(t *testing.T) {
	body := "0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", "10")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, body)
		}
	}))
	defer srv.Close()
	b, err := newBucket(context.Background(), Config{Bucket: "bkt", Endpoint: srv.URL, PathStyle: true, AccessKey: "a", SecretKey: "b"})
	if err != nil {
		t.Fatal(err)
	}
	c := blobstore.New(b)
	for _, tc := range []struct {
		off, n int64
		want   string
	}{
		{0, -1, body},
		{2, 3, "234"},
		{8, 100, "89"},
		{10, -1, ""},
		{10, 0, ""},
		{4, 0, ""},
	} {
		rc, attrs, err := c.NewRangeReader(t.Context(), "k", tc.off, tc.n, "")
		if err != nil {
			t.Errorf("range %d/%d: %v", tc.off, tc.n, err)
			continue
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != tc.want || attrs.Size != 10 || attrs.Token != `"v1"` {
			t.Errorf("range %d/%d: %q, %+v, %v; want %q, size 10, token \"v1\"", tc.off, tc.n, got, attrs, err, tc.want)
		}
	}
	if _, _, err := c.NewRangeReader(t.Context(), "k", 11, 1, ""); !errors.Is(err, blobstore.ErrInvalidRange) {
		t.Errorf("range past the end: %v; want ErrInvalidRange", err)
	}
}

// An unpinned range that the GET finds past the end while the HEAD finds
// it inside the object (the object grew between the two) is read again,
// not answered with an empty stream.
func TestRangeRetriesWhenTheObjectGrew(t *testing.T) {
	gets := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodHead:
			w.Header().Set("ETag", `"v2"`)
			w.Header().Set("Content-Length", "20")
		case gets == 0:
			gets++
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			_, _ = io.WriteString(w, `<Error><Code>InvalidRange</Code><Message>not satisfiable</Message></Error>`)
		default:
			gets++
			w.Header().Set("ETag", `"v2"`)
			w.Header().Set("Content-Range", "bytes 10-11/20")
			w.Header().Set("Content-Length", "2")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = io.WriteString(w, "ab")
		}
	}))
	defer srv.Close()
	b, err := newBucket(context.Background(), Config{Bucket: "bkt", Endpoint: srv.URL, PathStyle: true, AccessKey: "a", SecretKey: "b"})
	if err != nil {
		t.Fatal(err)
	}
	rc, attrs, err := blobstore.New(b).NewRangeReader(t.Context(), "k", 10, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "ab" || attrs.Size != 20 || attrs.Token != `"v2"` || gets != 2 {
		t.Errorf("%q, %+v, %v after %d GETs; want \"ab\", size 20, token \"v2\" after 2", got, attrs, err, gets)
	}
}
