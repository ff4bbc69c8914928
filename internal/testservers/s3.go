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

// StartMinIO starts a MinIO server with a fresh bucket: in a container when a
// Docker engine answers, else the local binary from `make tools`. It stops
// when t ends.
func StartMinIO(t testing.TB) (*S3Server, error) {
	t.Helper()
	if DockerReachable() {
		return startMinIOContainer(t)
	}
	bin, err := Tool("minio")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	consolePort, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &S3Server{Kind: "minio", Host: "127.0.0.1:" + strconv.Itoa(port), AccessKey: "minio-" + randomHex(6), SecretKey: randomHex(16), Bucket: "shardfence-test", Region: "us-east-1"}
	env := []string{
		"MINIO_ROOT_USER=" + s.AccessKey,
		"MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CI_CD=1",
	}
	args := []string{"server", filepath.Join(t.TempDir(), "data"), "--address", s.Host, "--console-address", "127.0.0.1:" + strconv.Itoa(consolePort), "--quiet"}
	if _, err := Start(t, "minio", bin, args, env, HTTPReady(s.Endpoint()+"/minio/health/ready"), 60*time.Second); err != nil {
		return nil, err
	}
	if err := s.makeBucket(); err != nil {
		return nil, err
	}
	return s, nil
}

// StartVersityGW starts versitygw on its posix backend with a fresh bucket.
// versitygw has no Docker image pinned here, so it always runs from the
// local binary built by `make tools`.
//
// Metadata is kept in extended attributes of the data files, not in a
// --sidecar directory: with a sidecar, a GET racing a PUT of the same key
// can return a body with another version's checksum: data and metadata are
// not published together. The temporary directory must support
// user xattrs (ext4, xfs, btrfs and tmpfs on Linux 6.6+ do).
func StartVersityGW(t testing.TB) (*S3Server, error) {
	t.Helper()
	bin, err := Tool("versitygw")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	s := &S3Server{Kind: "versitygw", Host: "127.0.0.1:" + strconv.Itoa(port), AccessKey: "versity-" + randomHex(6), SecretKey: randomHex(16), Bucket: "shardfence-test", Region: "us-east-1"}
	args := []string{"--quiet", "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region, "--port", s.Host,
		"posix", filepath.Join(dir, "data")}
	if err := mkdirs(filepath.Join(dir, "data")); err != nil {
		return nil, err
	}
	if _, err := Start(t, "versitygw", bin, args, nil, HTTPReady(s.Endpoint()+"/"), 60*time.Second); err != nil {
		return nil, err
	}
	if err := s.makeBucket(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *S3Server) makeBucket() error {
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
