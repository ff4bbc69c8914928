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
// MinIO accepts If-Match on DELETE and deletes anyway, so this driver does
// not offer ConditionalDelete; DeleteIfMatch returns ErrUnsupported.
package minio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	minio "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

func init() {
	blobstore.Register("minio", func(ctx context.Context, u *url.URL) (blobstore.Container, error) {
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

// Container is one bucket and prefix of a MinIO server.
type Container struct {
	// retrying serves reads and unconditional writes; once sends each
	// conditional request a single time.
	retrying, once minio.Core
	bucket         string
	prefix         string // "" or ends in '/'
	name           string
	caps           blobstore.Capabilities
}

var _ blobstore.Container = (*Container)(nil)

// New opens a container. It sends no request: a wrong bucket or credentials
// show on the first operation.
func New(_ context.Context, cfg Config) (*Container, error) {
	name := "minio://" + cfg.Endpoint + "/" + cfg.Bucket + "/" + cfg.Prefix
	if cfg.Bucket == "" || cfg.Endpoint == "" {
		return nil, fmt.Errorf("%w %s: minio container needs an endpoint and a bucket", blobstore.ErrBadURL, name)
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		if err := blobstore.ValidateKey(prefix); err != nil {
			return nil, fmt.Errorf("%w %s: prefix: %v", blobstore.ErrBadURL, name, err)
		}
		prefix += "/"
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
	return &Container{
		retrying: retrying,
		once:     once,
		bucket:   cfg.Bucket,
		prefix:   prefix,
		name:     name,
		caps: blobstore.Capabilities{
			ConditionalCreate:  true,
			ConditionalUpdate:  true,
			MaxConditionalBody: s3compat.MaxSinglePut,
		},
	}, nil
}

func (c *Container) String() string                       { return c.name }
func (c *Container) Capabilities() blobstore.Capabilities { return c.caps }

// Close releases nothing: the transport holds only idle connections.
func (c *Container) Close() error { return nil }

// objectKey validates key and returns the store key. A context that is
// already done fails here, before anything is sent, so a write cut off this
// early is a definite failure rather than an ambiguous one.
func (c *Container) objectKey(ctx context.Context, op, key string) (string, error) {
	if err := blobstore.ValidateKey(key); err != nil {
		return "", blobstore.Wrap(op, c.name, key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", blobstore.Wrap(op, c.name, key, err)
	}
	full := c.prefix + key
	if err := s3compat.MaxObjectKey(full); err != nil {
		return "", blobstore.Wrap(op, c.name, key, err)
	}
	return full, nil
}

// answer extracts the store's answer from a client error.
func answer(err error) s3compat.Answer {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return s3compat.Answer{Status: er.StatusCode, Code: er.Code, Message: er.Message}
	}
	return s3compat.Answer{}
}

func (c *Container) fail(op, key string, kind s3compat.Op, err error) error {
	return blobstore.Wrap(op, c.name, key, s3compat.Map(kind, c.bucket, credentialHint, answer(err), err))
}

func (c *Container) Get(ctx context.Context, key string) (blobstore.Object, error) {
	k, err := c.objectKey(ctx, "Get", key)
	if err != nil {
		return blobstore.Object{}, err
	}
	rc, info, _, err := c.retrying.GetObject(ctx, c.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		return blobstore.Object{}, c.fail("Get", key, s3compat.Read, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if info.Size > 0 && info.Size < 1<<30 {
		buf.Grow(int(info.Size))
	}
	if _, err := io.Copy(&buf, rc); err != nil {
		return blobstore.Object{}, c.fail("Get", key, s3compat.Read, err)
	}
	return blobstore.Object{Key: key, Body: buf.Bytes(), Token: s3compat.Token(info.ETag)}, nil
}

func (c *Container) Stat(ctx context.Context, key string) (blobstore.Attrs, error) {
	k, err := c.objectKey(ctx, "Stat", key)
	if err != nil {
		return blobstore.Attrs{}, err
	}
	info, err := c.retrying.StatObject(ctx, c.bucket, k, minio.StatObjectOptions{})
	if err != nil {
		return blobstore.Attrs{}, c.fail("Stat", key, s3compat.Read, err)
	}
	return blobstore.Attrs{Key: key, Size: info.Size, Token: s3compat.Token(info.ETag)}, nil
}

func (c *Container) Put(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	return c.put(ctx, "Put", key, body, s3compat.Write, minio.PutObjectOptions{})
}

func (c *Container) CreateIfAbsent(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	var opts minio.PutObjectOptions
	opts.SetMatchETagExcept("*")
	return c.put(ctx, "CreateIfAbsent", key, body, s3compat.Create, opts)
}

func (c *Container) CompareAndSwap(ctx context.Context, key string, expected blobstore.Token, body []byte) (blobstore.Token, error) {
	etag := strings.Trim(string(expected), `"`)
	if etag == "" || etag == "*" {
		// An empty or wildcard If-Match would match any version.
		return "", blobstore.Wrap("CompareAndSwap", c.name, key, fmt.Errorf("%w: expected token %q names no version", blobstore.ErrPreconditionFailed, expected))
	}
	var opts minio.PutObjectOptions
	opts.SetMatchETag(etag) // adds the quotes back
	return c.put(ctx, "CompareAndSwap", key, body, s3compat.CAS, opts)
}

func (c *Container) put(ctx context.Context, op, key string, body []byte, kind s3compat.Op, opts minio.PutObjectOptions) (blobstore.Token, error) {
	k, err := c.objectKey(ctx, op, key)
	if err != nil {
		return "", err
	}
	client := c.retrying
	if kind != s3compat.Write {
		if err := blobstore.CheckConditionalBody(op, c.name, key, len(body), c.caps); err != nil {
			return "", err
		}
		client = c.once
	} else if len(body) > s3compat.MaxSinglePut {
		return "", blobstore.Wrap(op, c.name, key, fmt.Errorf("%w: %d bytes exceed the %d-byte limit of one PUT", blobstore.ErrTooLarge, len(body), s3compat.MaxSinglePut))
	}
	// Core.PutObject is always one PUT of the given size, never multipart.
	info, err := client.PutObject(ctx, c.bucket, k, bytes.NewReader(body), int64(len(body)), "", "", opts)
	if err != nil {
		return "", c.fail(op, key, kind, err)
	}
	t := s3compat.Token(info.ETag)
	if t == "" {
		// The write took effect but its version is unknown; only a read
		// can tell whether what is stored now is ours.
		return "", blobstore.Wrap(op, c.name, key, blobstore.Ambiguous(errors.New("store answered the PUT without an ETag")))
	}
	return t, nil
}

func (c *Container) Delete(ctx context.Context, key string) error {
	k, err := c.objectKey(ctx, "Delete", key)
	if err != nil {
		return err
	}
	if err := c.retrying.RemoveObject(ctx, c.bucket, k, minio.RemoveObjectOptions{}); err != nil {
		if a := answer(err); a.Status == http.StatusNotFound && a.Code != "NoSuchBucket" {
			return nil
		}
		return c.fail("Delete", key, s3compat.Write, err)
	}
	return nil
}

func (c *Container) DeleteIfMatch(ctx context.Context, key string, _ blobstore.Token) error {
	if _, err := c.objectKey(ctx, "DeleteIfMatch", key); err != nil {
		return err
	}
	return blobstore.Wrap("DeleteIfMatch", c.name, key, fmt.Errorf("%w: MinIO ignores If-Match on DELETE, so the minio driver offers no conditional delete", blobstore.ErrUnsupported))
}

func (c *Container) List(ctx context.Context, prefix, startAfter string, limit int) (blobstore.ListPage, error) {
	if err := blobstore.ValidatePrefix(prefix); err != nil {
		return blobstore.ListPage{}, blobstore.Wrap("List", c.name, prefix, err)
	}
	if limit <= 0 || limit > blobstore.DefaultListLimit {
		limit = blobstore.DefaultListLimit
	}
	opts := minio.ListObjectsOptions{Prefix: c.prefix + prefix, Recursive: true, MaxKeys: limit}
	if startAfter != "" {
		opts.StartAfter = c.prefix + startAfter
	}
	// The iterator would page on by itself; stopping at a full page keeps
	// this to one request. Asking for limit+1 keys would tell whether more
	// remain, but a limit of 1000 would then take two requests; a full page
	// reports More instead, which the contract allows ("may remain").
	if err := ctx.Err(); err != nil {
		return blobstore.ListPage{}, blobstore.Wrap("List", c.name, prefix, err)
	}
	var page blobstore.ListPage
	for o := range c.retrying.Client.ListObjectsIter(ctx, c.bucket, opts) {
		if o.Err != nil {
			return blobstore.ListPage{}, c.fail("List", prefix, s3compat.Read, o.Err)
		}
		if !strings.HasPrefix(o.Key, c.prefix) {
			continue
		}
		page.Items = append(page.Items, blobstore.Attrs{Key: o.Key[len(c.prefix):], Size: o.Size, Token: s3compat.Token(o.ETag)})
		if len(page.Items) == limit {
			page.More = true
			break
		}
	}
	// The iterator ends without an error when the context ends.
	if err := ctx.Err(); err != nil {
		return blobstore.ListPage{}, c.fail("List", prefix, s3compat.Read, err)
	}
	return page, nil
}
