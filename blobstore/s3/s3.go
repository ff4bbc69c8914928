// Package s3 is the blobstore driver for Amazon S3 and S3-compatible stores
// (MinIO, versitygw, and others that implement conditional PUTs).
//
// URL form:
//
//	s3://bucket[/prefix][?region=R][&endpoint=URL][&path_style=true|false]
//	   [&conditional_delete=true][&access_key=K&secret_key=S]
//
// Credentials come from the AWS SDK's standard chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, shared profiles, web identity, instance roles) unless
// access_key and secret_key are given in the URL, which is meant for local
// emulators. They never appear in String() or in errors. endpoint points the
// client at a non-AWS store; path_style defaults to true when endpoint is
// set, since most such stores do not serve virtual-hosted buckets.
//
// Conditional writes are single PUTs: CreateIfAbsent sends If-None-Match: *,
// CompareAndSwap sends If-Match with the expected ETag. A token is the ETag
// exactly as the store returns it, quotes included.
//
// Streaming reads (GetRange, ranges.go) are one GET with a Range header,
// and If-Match with the token when pinned; the ranges HTTP cannot say (zero
// bytes, a start at the end) are the portable layer's to settle.
//
// Retries. An SDK retry of a conditional PUT whose response was lost can
// meet the driver's own earlier write and come back 412, which would turn a
// success into a definite "someone else won". So conditional operations
// (CreateIfAbsent, CompareAndSwap, DeleteIfMatch) are sent exactly once, and
// a timeout, a transport error after the request may have left, a 5xx, or a
// cancelled context while the request was in flight is reported as
// blobstore.ErrAmbiguous; the caller settles it by reading the key. Reads,
// unconditional Puts and Deletes keep the SDK's standard retries, which are
// harmless for them; an unconditional write that still fails with a 5xx or a
// transport error is ambiguous as well. Definite answers map to the typed
// errors: 412 is ErrAlreadyExists for a create and ErrPreconditionFailed
// otherwise, a 404 answering If-Match is ErrPreconditionFailed, and 409
// (ConditionalRequestConflict) is the retryable ErrConflict.
//
// Conditional delete. AWS S3 and versitygw refuse a DELETE whose If-Match
// names a stale version; MinIO accepts the header and deletes anyway.
// ConditionalDelete is therefore advertised only when the URL says
// conditional_delete=true, which an operator sets only for a store known to
// enforce it (`shardfence conformance` shows it). versitygw v1.8.0 answers a
// conditional DELETE of a missing key with success rather than 404/412: no
// object is removed, but the caller is not told the key was gone.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

// MaxSinglePut is the largest object S3 accepts in one PUT (5 GiB).
const MaxSinglePut = s3compat.MaxSinglePut

func init() {
	blobstore.Register("s3", func(ctx context.Context, u *url.URL) (*blobstore.Container, error) {
		cfg, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return New(ctx, cfg)
	})
}

// Config opens a container without a URL.
type Config struct {
	Bucket string
	// Prefix is prepended to every key; it must be a valid key or empty.
	Prefix string
	// Region defaults to the SDK's configured region, else us-east-1.
	Region string
	// Endpoint is the base URL of a non-AWS store, e.g. http://127.0.0.1:9000.
	Endpoint string
	// PathStyle addresses the bucket in the path instead of the host name.
	PathStyle bool
	// AccessKey and SecretKey override the SDK's credential chain; both or
	// neither.
	AccessKey, SecretKey string
	// ConditionalDelete advertises DeleteIfMatch; set it only for stores
	// that enforce If-Match on DELETE.
	ConditionalDelete bool
}

// ParseURL reads a Config from an s3:// URL.
func ParseURL(u *url.URL) (Config, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: %s", blobstore.ErrBadURL, blobstore.RedactURL(u), fmt.Sprintf(format, a...))
	}
	if u.Host == "" {
		return Config{}, bad("no bucket; want s3://bucket[/prefix]")
	}
	if u.User != nil {
		return Config{}, bad("credentials in the host part are not read; use access_key and secret_key options or the AWS credential chain")
	}
	cfg := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	pathStyleSet := false
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "region":
			cfg.Region = v
		case "endpoint":
			if err := checkEndpoint(v); err != nil {
				return Config{}, bad("%v", err)
			}
			cfg.Endpoint = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, bad("path_style=%q is not true or false", v)
			}
			cfg.PathStyle, pathStyleSet = b, true
		case "conditional_delete":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, bad("conditional_delete=%q is not true or false", v)
			}
			cfg.ConditionalDelete = b
		case "access_key":
			cfg.AccessKey = v
		case "secret_key":
			cfg.SecretKey = v
		default:
			return Config{}, bad("unknown option %q (known: region, endpoint, path_style, conditional_delete, access_key, secret_key)", k)
		}
	}
	if !pathStyleSet && cfg.Endpoint != "" {
		cfg.PathStyle = true
	}
	return cfg, nil
}

// checkEndpoint refuses an endpoint the SDK could not use, without showing
// it: the SDK would fail on the first request with the endpoint in its
// message, user info included.
func checkEndpoint(v string) error {
	ep, err := url.Parse(v)
	switch {
	case err != nil:
		return errors.New("endpoint is not a URL")
	case ep.Scheme != "http" && ep.Scheme != "https":
		return errors.New("endpoint must be an http:// or https:// URL")
	case ep.Host == "":
		return errors.New("endpoint has no host")
	case ep.User != nil:
		return errors.New("endpoint carries user info; give credentials with access_key and secret_key or the AWS credential chain")
	}
	return nil
}

// bucket is the driver: one bucket of an S3-compatible store.
type bucket struct {
	client *s3.Client
	bucket string
	caps   blobstore.Capabilities
	// broken, set only by the package's tests (export_test.go), drops a
	// precondition header from every conditional write while the
	// capabilities still claim it: the driver bug the fencing suite must
	// catch. Production code never sets it.
	broken brokenPreconditions
}

// brokenPreconditions says which precondition headers a broken driver
// forgets to send.
type brokenPreconditions struct {
	ifMatch, ifNoneMatch bool
}

var (
	_ driver.Bucket     = (*bucket)(nil)
	_ driver.KeyChecker = (*bucket)(nil)
	_ driver.Explainer  = (*bucket)(nil)
)

// New opens a container. It sends no request: a wrong bucket or wrong
// credentials show on the first operation (run `shardfence conformance` to
// check a store before use).
func New(ctx context.Context, cfg Config) (*blobstore.Container, error) {
	b, err := newBucket(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return blobstore.NewAt(b, cfg.Prefix)
}

func newBucket(ctx context.Context, cfg Config) (*bucket, error) {
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: s3 container needs a bucket", blobstore.ErrBadURL)
	}
	name := "s3://" + cfg.Bucket
	if cfg.Endpoint != "" {
		if err := checkEndpoint(cfg.Endpoint); err != nil {
			return nil, fmt.Errorf("%w %s: %v", blobstore.ErrBadURL, name, err)
		}
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, fmt.Errorf("%w %s: give both access_key and secret_key, or neither to use the AWS credential chain", blobstore.ErrBadURL, name)
	}
	var loadOpts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3 container %s: loading AWS configuration: %w", name, err)
	}
	if awsCfg.Region == "" {
		// Custom endpoints ignore the region but the signer needs one.
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Objects written without a checksum (by another client, or
		// stores that keep none) are normal here, not worth a log line.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	return &bucket{
		client: client,
		bucket: cfg.Bucket,
		caps: blobstore.Capabilities{
			ConditionalCreate:  true,
			ConditionalUpdate:  true,
			ConditionalDelete:  cfg.ConditionalDelete,
			MaxConditionalBody: MaxSinglePut,
			MaxBody:            MaxSinglePut,
		},
	}, nil
}

func (b *bucket) String() string                       { return "s3://" + b.bucket }
func (b *bucket) Capabilities() blobstore.Capabilities { return b.caps }

// Close releases nothing: the SDK's HTTP client holds only idle connections.
func (b *bucket) Close() error { return nil }

// CheckKey refuses a key longer than S3 allows once prefixed.
func (b *bucket) CheckKey(key string) error { return s3compat.CheckKey(key) }

// Unsupported says how to turn conditional delete on.
func (b *bucket) Unsupported(driver.Op) string {
	return "conditional delete is off for this store (set conditional_delete=true only for stores that enforce If-Match on DELETE)"
}

// Classify reads the store's answer out of an SDK error.
func (b *bucket) Classify(op driver.Op, err error) error {
	return s3compat.Map(op, b.bucket, credentialHint, answer(err), err)
}

// once sends a conditional request exactly once (see the package doc).
func once(o *s3.Options) { o.RetryMaxAttempts = 1 }

func token(etag *string) blobstore.Token { return s3compat.Token(aws.ToString(etag)) }

func (b *bucket) Get(ctx context.Context, key string) (driver.Object, error) {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return driver.Object{}, err
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 && *out.ContentLength < 1<<30 {
		buf.Grow(int(*out.ContentLength))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return driver.Object{}, err
	}
	return driver.Object{Body: buf.Bytes(), Token: token(out.ETag)}, nil
}

func (b *bucket) Stat(ctx context.Context, key string) (driver.Attrs, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return driver.Attrs{}, err
	}
	return driver.Attrs{Size: aws.ToInt64(out.ContentLength), Token: token(out.ETag)}, nil
}

// Write is one PUT: If-None-Match: * for a create, If-Match for a CAS.
func (b *bucket) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	in := &s3.PutObjectInput{
		Bucket:        &b.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	var optFns []func(*s3.Options)
	switch {
	case pre.IfAbsent:
		if !b.broken.ifNoneMatch {
			in.IfNoneMatch = aws.String("*")
		}
		optFns = append(optFns, once)
	case pre.IfMatch != "":
		if !b.broken.ifMatch {
			in.IfMatch = aws.String(string(pre.IfMatch))
		}
		optFns = append(optFns, once)
	}
	out, err := b.client.PutObject(ctx, in, optFns...)
	if err != nil {
		return "", err
	}
	t := token(out.ETag)
	if t == "" {
		// The write took effect but its version is unknown; only a read
		// can tell whether what is stored now is ours.
		return "", blobstore.Ambiguous(errors.New("store answered the PUT without an ETag"))
	}
	return t, nil
}

func (b *bucket) Delete(ctx context.Context, key string, pre driver.Precondition) error {
	in := &s3.DeleteObjectInput{Bucket: &b.bucket, Key: &key}
	var optFns []func(*s3.Options)
	if pre.IfMatch != "" {
		in.IfMatch = aws.String(string(pre.IfMatch))
		optFns = append(optFns, once)
	}
	_, err := b.client.DeleteObject(ctx, in, optFns...)
	return err
}

func (b *bucket) List(ctx context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	in := &s3.ListObjectsV2Input{
		Bucket:  &b.bucket,
		Prefix:  aws.String(prefix),
		MaxKeys: aws.Int32(int32(limit)),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(startAfter)
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return driver.ListPage{}, err
	}
	page := driver.ListPage{More: aws.ToBool(out.IsTruncated)}
	for _, o := range out.Contents {
		page.Items = append(page.Items, driver.Attrs{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), Token: token(o.ETag)})
	}
	return page, nil
}
