package testservers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	minio "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is a running S3-compatible server with one empty bucket.
type S3Server struct {
	// Kind is "minio" or "versitygw".
	Kind string
	// Host is 127.0.0.1:PORT (or the container's mapped address).
	Host      string
	AccessKey string
	SecretKey string
	Bucket    string
	Region    string
}

// Endpoint is the server's base URL.
func (s *S3Server) Endpoint() string { return "http://" + s.Host }

// S3URL is an s3:// store URL for prefix in the server's bucket, credentials
// included (Redact hides them in messages). Extra options are appended as
// given, e.g. "conditional_delete=true".
func (s *S3Server) S3URL(prefix string, extra ...string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint())
	q.Set("region", s.Region)
	q.Set("access_key", s.AccessKey)
	q.Set("secret_key", s.SecretKey)
	u := "s3://" + s.Bucket + "/" + prefix + "?" + q.Encode()
	for _, e := range extra {
		u += "&" + e
	}
	return u
}

// MinioURL is a minio:// store URL for prefix in the server's bucket, with
// the credentials as user info.
func (s *S3Server) MinioURL(prefix string) string {
	u := url.URL{Scheme: "minio", User: url.UserPassword(s.AccessKey, s.SecretKey), Host: s.Host, Path: "/" + s.Bucket + "/" + prefix, RawQuery: "secure=false"}
	return u.String()
}

// S3Launch is how to run an S3 server, as a local process or in a
// container alike: the server it will be, the program's arguments and
// environment, and the HTTP path that answers once it serves.
type S3Launch struct {
	Server    *S3Server
	Args      []string
	Env       []string
	ReadyPath string
}

// MinIOLaunch is MinIO serving dataDir on 127.0.0.1:port (its console, off,
// on 127.0.0.1:consolePort) with fresh credentials.
func MinIOLaunch(dataDir string, port, consolePort int) S3Launch {
	s := &S3Server{Kind: "minio", Host: "127.0.0.1:" + strconv.Itoa(port), AccessKey: "minio-" + randomHex(6), SecretKey: randomHex(16), Bucket: "shardfence-test", Region: "us-east-1"}
	return S3Launch{
		Server: s,
		Args:   []string{"server", dataDir, "--address", s.Host, "--console-address", "127.0.0.1:" + strconv.Itoa(consolePort), "--quiet"},
		Env: []string{
			"MINIO_ROOT_USER=" + s.AccessKey,
			"MINIO_ROOT_PASSWORD=" + s.SecretKey,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
			"MINIO_CI_CD=1",
		},
		ReadyPath: "/minio/health/ready",
	}
}

// VersityGWLaunch is versitygw on its posix backend serving dataDir (which
// must exist) on 127.0.0.1:port with fresh credentials.
//
// Metadata is kept in extended attributes of the data files, not in a
// --sidecar directory: with a sidecar, a GET racing a PUT of the same key
// can return a body with another version's checksum: data and metadata are
// not published together. dataDir must support user xattrs (ext4, xfs,
// btrfs, overlayfs over those, and tmpfs on Linux 6.6+ do).
func VersityGWLaunch(dataDir string, port int) S3Launch {
	s := &S3Server{Kind: "versitygw", Host: "127.0.0.1:" + strconv.Itoa(port), AccessKey: "versity-" + randomHex(6), SecretKey: randomHex(16), Bucket: "shardfence-test", Region: "us-east-1"}
	return S3Launch{
		Server:    s,
		Args:      []string{"--quiet", "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region, "--port", s.Host, "posix", dataDir},
		ReadyPath: "/",
	}
}

// StartMinIO starts the MinIO binary from `make tools` with a fresh bucket;
// it stops when t ends. (The e2e module runs the same tests against MinIO in
// a container.)
func StartMinIO(t testing.TB) (*S3Server, error) {
	t.Helper()
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	return startS3(t, "minio", MinIOLaunch(filepath.Join(t.TempDir(), "data"), ports[0], ports[1]))
}

// StartMinIOShared is StartMinIO without a test (a benchmark command, a
// TestMain): MinIO serves a fresh directory under dir, which also holds
// its log, with a fresh bucket. The caller stops the process; dir is the
// caller's to remove.
func StartMinIOShared(dir string) (*S3Server, *Process, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, nil, err
	}
	bin, err := Tool("minio")
	if err != nil {
		return nil, nil, err
	}
	l := MinIOLaunch(filepath.Join(dir, "data"), ports[0], ports[1])
	p, err := StartShared("minio", bin, l.Args, l.Env, dir, HTTPReady(l.Server.Endpoint()+l.ReadyPath), 60*time.Second)
	if err != nil {
		return nil, nil, err
	}
	if err := l.Server.MakeBucket(); err != nil {
		p.Stop()
		return nil, nil, err
	}
	return l.Server, p, nil
}

// StartVersityGW starts versitygw from `make tools` on its posix backend
// with a fresh bucket; it stops when t ends.
func StartVersityGW(t testing.TB) (*S3Server, error) {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := mkdirs(dir); err != nil {
		return nil, err
	}
	return startS3(t, "versitygw", VersityGWLaunch(dir, ports[0]))
}

func startS3(t testing.TB, program string, l S3Launch) (*S3Server, error) {
	t.Helper()
	bin, err := Tool(program)
	if err != nil {
		return nil, err
	}
	if _, err := Start(t, program, bin, l.Args, l.Env, HTTPReady(l.Server.Endpoint()+l.ReadyPath), 60*time.Second); err != nil {
		return nil, err
	}
	if err := l.Server.MakeBucket(); err != nil {
		return nil, err
	}
	return l.Server, nil
}

// MakeBucket creates the server's bucket; a starter calls it once the
// server is ready.
func (s *S3Server) MakeBucket() error {
	cl, err := minio.New(s.Host, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		return fmt.Errorf("%s: create bucket %q: %w", s.Kind, s.Bucket, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}
