package testservers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"
)

// FakeGCSBucket is the bucket every FakeGCS server starts with.
const FakeGCSBucket = "shardfence-test"

// FakeGCS is a fake-gcs-server process (`make tools` installs it) listening
// on 127.0.0.1 over plain HTTP with its in-memory backend. It runs as a
// separate program, like MinIO, rather than inside the test binary: linked
// in, its module (Pub/Sub, Arrow, gRPC servers...) would become a
// requirement of every program importing this module's blobstore package.
type FakeGCS struct {
	proc *Process
	dir  string
	url  string
	// Bucket exists from the start.
	Bucket string
}

// StartFakeGCS starts a server with FakeGCSBucket created. It needs no
// testing.TB so a TestMain can share one server across a package; call Stop
// when done. The error says what to install when the program is missing.
func StartFakeGCS() (*FakeGCS, error) {
	bin, err := Tool("fake-gcs-server")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shardfence-fake-gcs-")
	if err != nil {
		return nil, err
	}
	// An empty directory under -data is an empty bucket at start.
	seed := filepath.Join(dir, "seed")
	if err := mkdirs(filepath.Join(seed, FakeGCSBucket)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f := &FakeGCS{dir: dir, url: "http://127.0.0.1:" + strconv.Itoa(port), Bucket: FakeGCSBucket}
	// -public-host: XML reads (GET /bucket/object) are routed only when
	// the request's Host is the server's public host.
	args := []string{"-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
		"-backend", "memory", "-data", seed, "-external-url", f.url, "-public-host", "127.0.0.1:" + strconv.Itoa(port), "-log-level", "warn"}
	f.proc, err = StartShared("fake-gcs-server", bin, args, nil, dir, HTTPReady(f.url+"/storage/v1/b/"+FakeGCSBucket), 60*time.Second)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return f, nil
}

// NewFakeGCS starts a server for one test and stops it when the test ends.
func NewFakeGCS(t testing.TB) *FakeGCS {
	t.Helper()
	f, err := StartFakeGCS()
	if err != nil {
		Unavailable(t, "fake-gcs-server", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fake-gcs-server log (tail):\n%s", f.proc.LogTail(4000))
		}
		f.Stop()
	})
	return f
}

// URL is the server's base URL (http://127.0.0.1:PORT), the value for a
// gs:// URL's endpoint option or STORAGE_EMULATOR_HOST.
func (f *FakeGCS) URL() string { return f.url }

// StoreURL is a gs:// URL for prefix in the bucket, pointed at this server.
func (f *FakeGCS) StoreURL(prefix string) string {
	return "gs://" + f.Bucket + "/" + prefix + "?" + url.Values{"endpoint": {f.URL()}}.Encode()
}

// NewClient returns a client for the server, without credentials, reading
// through the XML API as the client does by default (a gs:// URL with
// endpoint= reads through the JSON API instead, so the two ways to open a
// store cover both read paths). The caller closes it.
func (f *FakeGCS) NewClient(ctx context.Context, opts ...option.ClientOption) (*storage.Client, error) {
	opts = append([]option.ClientOption{option.WithEndpoint(f.url + "/storage/v1/"), option.WithoutAuthentication()}, opts...)
	c, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("client for fake-gcs-server at %s: %w", f.url, err)
	}
	return c, nil
}

// LogTail returns the last n bytes of the server's log.
func (f *FakeGCS) LogTail(n int) string { return f.proc.LogTail(n) }

// Stop ends the server and removes its directory.
func (f *FakeGCS) Stop() {
	f.proc.Stop()
	os.RemoveAll(f.dir)
}
