// Package minio is the blobstore driver for MinIO (and other S3-compatible
// stores) through the MinIO Go client.
//
// URL form:
//
//	minio://[ACCESS:SECRET@]host:port/bucket[/prefix][?secure=true|false][&region=R]
//
// Credentials come from the URL's user info (for local servers; redacted in
// every message), else MINIO_ACCESS_KEY and MINIO_SECRET_KEY, else
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. secure defaults to true
// (HTTPS).
//
// Conditional writes are single PUTs of a known size (never multipart):
// CreateIfAbsent sends If-None-Match: *, CompareAndSwap sends If-Match with
// the expected ETag. A token is the ETag in its quoted form, the same token
// the s3 driver returns for the same object.
//
// Retries follow the s3 driver: conditional writes are sent exactly once, so
// a retry can never meet the driver's own earlier write and report it as a
// precondition failure; a 5xx, timeout or transport error after the request
// may have left is blobstore.ErrAmbiguous, for the caller to settle by
// reading. Reads and unconditional writes keep the client's retries.
//
// Streaming reads are one ranged GET (If-Match when pinned), streamed from
// the response body (GetRange); the ranges HTTP cannot say are the portable
// layer's to settle.
//
// MinIO accepts If-Match on DELETE and deletes anyway, so this driver does
// not offer ConditionalDelete; DeleteIfMatch returns ErrUnsupported.
package minio

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	minio "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

func init() {
	blobstore.Register("minio", func(ctx context.Context, u *url.URL) (*blobstore.Container, error) {
		cfg, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return New(ctx, cfg)
	})
}

const credentialHint = "URL user info, MINIO_ACCESS_KEY/MINIO_SECRET_KEY, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"

// Config opens a container without a URL.
type Config struct {
	// Endpoint is host:port, without a scheme.
	Endpoint string
	Secure   bool
	Region   string
	Bucket   string
	// Prefix is prepended to every key; it must be a valid key or empty.
	Prefix               string
	AccessKey, SecretKey string
}

// ParseURL reads a Config from a minio:// URL, filling credentials from the
// environment when the URL has none.
func ParseURL(u *url.URL) (Config, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: %s", blobstore.ErrBadURL, blobstore.RedactURL(u), fmt.Sprintf(format, a...))
	}
	if u.Host == "" {
		return Config{}, bad("no host; want minio://host:port/bucket[/prefix]")
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if bucket == "" {
		return Config{}, bad("no bucket; want minio://host:port/bucket[/prefix]")
	}
	if err := s3utils.CheckValidBucketName(bucket); err != nil {
		// minio-go refuses such a name on every request, before sending
		// it, and the error would read as an unknown outcome.
		return Config{}, bad("bucket %q: %v", bucket, err)
	}
	cfg := Config{Endpoint: u.Host, Secure: true, Bucket: bucket, Prefix: strings.Trim(prefix, "/")}
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "secure":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, bad("secure=%q is not true or false", v)
			}
			cfg.Secure = b
		case "region":
			cfg.Region = v
		default:
			return Config{}, bad("unknown option %q (known: secure, region)", k)
		}
	}
	switch {
	case u.User != nil:
		cfg.AccessKey = u.User.Username()
		cfg.SecretKey, _ = u.User.Password()
	case os.Getenv("MINIO_ACCESS_KEY") != "":
		cfg.AccessKey, cfg.SecretKey = os.Getenv("MINIO_ACCESS_KEY"), os.Getenv("MINIO_SECRET_KEY")
	default:
		cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
	return cfg, nil
}

// bucket is the driver: one bucket of a MinIO server.
type bucket struct {
	// retrying serves reads and unconditional writes; once sends each
	// conditional request a single time.
	retrying, once minio.Core
	bucket         string
	name           string
	secure         bool // HTTPS (the URL's secure, default true)
}

var (
	_ driver.Bucket      = (*bucket)(nil)
	_ driver.KeyChecker  = (*bucket)(nil)
	_ driver.Explainer   = (*bucket)(nil)
	_ driver.RangeGetter = (*bucket)(nil)
)

// New opens a container. It sends no request: a wrong bucket or credentials
// show on the first operation.
func New(_ context.Context, cfg Config) (*blobstore.Container, error) {
	name := "minio://" + cfg.Endpoint + "/" + cfg.Bucket
	if cfg.Bucket == "" || cfg.Endpoint == "" {
		return nil, fmt.Errorf("%w %s: minio container needs an endpoint and a bucket", blobstore.ErrBadURL, name)
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("%w %s: bucket %q: %v", blobstore.ErrBadURL, name, cfg.Bucket, err)
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("%w %s: no credentials (give %s)", blobstore.ErrBadURL, name, credentialHint)
	}
	transport, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, fmt.Errorf("minio container %s: %w", name, err)
	}
	newClient := func(maxRetries int) (minio.Core, error) {
		cl, err := minio.New(cfg.Endpoint, &minio.Options{
			Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
			Secure:       cfg.Secure,
			Region:       cfg.Region,
			Transport:    transport,
			BucketLookup: minio.BucketLookupPath,
			MaxRetries:   maxRetries,
		})
		if err != nil {
			return minio.Core{}, fmt.Errorf("minio container %s: %w", name, err)
		}
		return minio.Core{Client: cl}, nil
	}
	retrying, err := newClient(0) // 0: the client's default retries
	if err != nil {
		return nil, err
	}
	once, err := newClient(1)
	if err != nil {
		return nil, err
	}
	return blobstore.NewAt(&bucket{retrying: retrying, once: once, bucket: cfg.Bucket, name: name, secure: cfg.Secure}, cfg.Prefix)
}

func (b *bucket) String() string { return b.name }

// Capabilities: MinIO accepts If-Match on DELETE and deletes anyway, so
// there is no conditional delete.
func (b *bucket) Capabilities() blobstore.Capabilities {
	return blobstore.Capabilities{
		ConditionalCreate:  true,
		ConditionalUpdate:  true,
		MaxConditionalBody: s3compat.MaxSinglePut,
		MaxBody:            s3compat.MaxSinglePut,
	}
}

// Close releases nothing: the transport holds only idle connections.
func (b *bucket) Close() error { return nil }

// CheckKey refuses a key longer than S3 allows once prefixed.
func (b *bucket) CheckKey(key string) error { return s3compat.CheckKey(key) }

// Unsupported says why there is no conditional delete.
func (b *bucket) Unsupported(driver.Op) string {
	return "MinIO ignores If-Match on DELETE, so the minio driver offers no conditional delete"
}

// Classify reads the store's answer out of a client error, as the s3
// driver does (s3compat.Map).
func (b *bucket) Classify(op driver.Op, err error) error {
	var a s3compat.Answer
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		a = s3compat.Answer{Status: er.StatusCode, Code: er.Code, Message: er.Message}
	}
	mapped := s3compat.Map(op, b.bucket, credentialHint, a, err)
	if b.secure && plainHTTPServer(err) {
		// The classification stays (a write's outcome is not guessed);
		// the advice is what a person needs.
		return fmt.Errorf("%w (%s)", mapped, secureHint)
	}
	return mapped
}

// secureHint is the advice for an HTTPS client that met a plain HTTP
// server: the minio:// URL is HTTPS unless it says otherwise.
const secureHint = "the server does not speak TLS: add ?secure=false for a server without TLS"

// plainHTTPServer reports whether err is an HTTPS request answered by a
// server without TLS: net/http's "server gave HTTP response to HTTPS
// client", or the TLS handshake's first record that is no TLS record.
func plainHTTPServer(err error) bool {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "server gave HTTP response to HTTPS client") || strings.Contains(msg, "first record does not look like a TLS handshake")
}

func (b *bucket) Get(ctx context.Context, key string) (driver.Object, error) {
	rc, info, _, err := b.retrying.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return driver.Object{}, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if info.Size > 0 && info.Size < 1<<30 {
		buf.Grow(int(info.Size))
	}
	if _, err := io.Copy(&buf, rc); err != nil {
		return driver.Object{}, err
	}
	return driver.Object{Body: buf.Bytes(), Token: s3compat.Token(info.ETag)}, nil
}

// GetRange is one GET, sent before it returns (Core.GetObject is not
// lazy), with the range as its Range header (none for the whole object)
// and If-Match when pinned; the stream is the response body itself. What a
// range HTTP cannot say costs is decided by the portable layer
// (blobstore/ranges.go).
func (b *bucket) GetRange(ctx context.Context, key string, r driver.ByteRange, pre driver.Precondition) (driver.RangeAnswer, error) {
	var opts minio.GetObjectOptions
	if pre.IfMatch != "" {
		if err := opts.SetMatchETag(strings.Trim(string(pre.IfMatch), `"`)); err != nil {
			return driver.RangeAnswer{}, err
		}
	}
	if h := r.Header(); h != "" {
		opts.Set("Range", h)
	}
	rc, info, h, err := b.retrying.GetObject(ctx, b.bucket, key, opts)
	if err != nil {
		return driver.RangeAnswer{}, err
	}
	// info.Size is the Content-Length, -1 when absent.
	a, err := driver.HTTPAnswer(rc, s3compat.Token(info.ETag), h.Get("Content-Range"), &info.Size)
	if err != nil {
		rc.Close()
	}
	return a, err
}

func (b *bucket) Stat(ctx context.Context, key string) (driver.Attrs, error) {
	info, err := b.retrying.StatObject(ctx, b.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return driver.Attrs{}, err
	}
	return driver.Attrs{Size: info.Size, Token: s3compat.Token(info.ETag)}, nil
}

// Write is one PUT of a known size, never multipart: If-None-Match: * for a
// create, If-Match for a CAS.
func (b *bucket) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	client := b.once
	var opts minio.PutObjectOptions
	switch {
	case pre.IfAbsent:
		opts.SetMatchETagExcept("*")
	case pre.IfMatch != "":
		opts.SetMatchETag(strings.Trim(string(pre.IfMatch), `"`)) // adds the quotes back
	default:
		client = b.retrying
	}
	info, err := client.PutObject(ctx, b.bucket, key, bytes.NewReader(body), int64(len(body)), "", "", opts)
	if err != nil {
		return "", err
	}
	t := s3compat.Token(info.ETag)
	if t == "" {
		// The write took effect but its version is unknown; only a read
		// can tell whether what is stored now is ours.
		return "", blobstore.Ambiguous(errors.New("store answered the PUT without an ETag"))
	}
	return t, nil
}

// Delete is unconditional: the container refuses DeleteIfMatch, since the
// bucket does not advertise ConditionalDelete.
func (b *bucket) Delete(ctx context.Context, key string, _ driver.Precondition) error {
	return b.retrying.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{})
}

// List stops at a full page: the iterator would page on by itself, and one
// request is enough. Asking for limit+1 keys would tell whether more
// remain, but a limit of 1000 would then take two requests; a full page
// reports More instead, which the contract allows ("may remain").
func (b *bucket) List(ctx context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	opts := minio.ListObjectsOptions{Prefix: prefix, StartAfter: startAfter, Recursive: true, MaxKeys: limit}
	var page driver.ListPage
	for o := range b.retrying.Client.ListObjectsIter(ctx, b.bucket, opts) {
		if o.Err != nil {
			return driver.ListPage{}, o.Err
		}
		page.Items = append(page.Items, driver.Attrs{Key: o.Key, Size: o.Size, Token: s3compat.Token(o.ETag)})
		if len(page.Items) == limit {
			page.More = true
			break
		}
	}
	// The iterator ends without an error when the context ends.
	if err := ctx.Err(); err != nil {
		return driver.ListPage{}, err
	}
	return page, nil
}
