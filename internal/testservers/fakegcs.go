package testservers

import (
	"fmt"
	"io"
	"net/url"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// FakeGCSBucket is the bucket every FakeGCS server starts with.
const FakeGCSBucket = "shardfence-test"

// FakeGCS is fake-gcs-server running inside the test process, listening on
// 127.0.0.1 over plain HTTP so that a gs:// URL with ?endpoint= reaches it
// as well as the in-process client does.
type FakeGCS struct {
	srv *fakestorage.Server
	// Bucket exists from the start.
	Bucket string
}

// StartFakeGCS starts a server with FakeGCSBucket created. It needs no
// testing.TB so a TestMain can share one server across a package; call Stop
// when done.
func StartFakeGCS() (*FakeGCS, error) {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http",
		Host:   "127.0.0.1",
		Writer: io.Discard,
	})
	if err != nil {
		return nil, fmt.Errorf("start fake-gcs-server: %w", err)
	}
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: FakeGCSBucket})
	return &FakeGCS{srv: srv, Bucket: FakeGCSBucket}, nil
}

// NewFakeGCS starts a server for one test and stops it when the test ends.
func NewFakeGCS(t testing.TB) *FakeGCS {
	t.Helper()
	f, err := StartFakeGCS()
	if err != nil {
		Unavailable(t, "fake-gcs-server", err)
	}
	t.Cleanup(f.Stop)
	return f
}

// URL is the server's base URL (http://127.0.0.1:PORT), the value for a
// gs:// URL's endpoint option or STORAGE_EMULATOR_HOST.
func (f *FakeGCS) URL() string { return f.srv.URL() }

// StoreURL is a gs:// URL for prefix in the bucket, pointed at this server.
func (f *FakeGCS) StoreURL(prefix string) string {
	return "gs://" + f.Bucket + "/" + prefix + "?" + url.Values{"endpoint": {f.URL()}}.Encode()
}

// Client returns a client wired to the server in process, without
// credentials. The caller closes it.
func (f *FakeGCS) Client() *storage.Client { return f.srv.Client() }

// Stop shuts the server down.
func (f *FakeGCS) Stop() { f.srv.Stop() }
