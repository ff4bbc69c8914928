// Package gcs is the Google Cloud Storage driver: gs://bucket/prefix.
//
// The version token is the object generation as a decimal string. Create-if-
// absent sends ifGenerationMatch=0 (Conditions{DoesNotExist}); compare-and-swap
// sends ifGenerationMatch=<token>. GCS answers 412 when the condition does not
// hold, which becomes ErrAlreadyExists or ErrPreconditionFailed.
//
// Uploads and conditional deletes go out as one request with the client's
// retries turned off. A retried conditional write whose first response was
// lost would meet its own object and come back 412, and the driver would
// report a definite failure for a write that took effect. With one attempt, a
// timeout, a 5xx or a broken connection after the request left is reported as
// blobstore.ErrAmbiguous instead, and the caller settles it by reading the key.
// Reads, listings and unconditional deletes keep the client's retries (up to
// four attempts, backing off from 100ms), since repeating them cannot change
// what they report.
//
// Ranged reads (GetRange, range.go) stream one GET with a Range header,
// pinned with ifGenerationMatch. The ranges HTTP cannot say (a zero length,
// an offset at or past the end: a 416) are the portable layer's to settle,
// and so is the check of the generation served against the pin, which
// fake-gcs-server's answers need: it ignores read preconditions.
//
// Conditional delete (DeleteIfMatch) is off unless the URL says
// conditional_delete=true. Real GCS enforces ifGenerationMatch on delete;
// fake-gcs-server v1.56.1 deletes anyway, so a driver that advertised the
// capability unconditionally would lie on that emulator.
//
// URL options:
//
//	endpoint=URL                 JSON API host of an emulator, e.g. http://127.0.0.1:4443;
//	                             requests then go without credentials
//	conditional_delete=true      advertise and use DeleteIfMatch (only for stores that enforce it)
//	max_conditional_body=BYTES   refuse conditional writes above this size (default 5 GiB)
//
// Without endpoint, the client finds credentials the standard way
// (GOOGLE_APPLICATION_CREDENTIALS, gcloud application-default credentials,
// workload identity) and honours STORAGE_EMULATOR_HOST.
package gcs

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/wire"
)

// Scheme is the URL scheme this driver registers.
const Scheme = "gs"

// DefaultMaxConditionalBody bounds a conditional write. GCS itself takes far
// larger single-request uploads; the bound keeps a fenced write from holding
// gigabytes in one request that cannot be resumed.
const DefaultMaxConditionalBody = 5 << 30

// readAttempts bounds how often a read, a listing or an unconditional delete
// is sent before its error is returned.
const readAttempts = 4

// maxObjectName is GCS's limit on an object name, in UTF-8 bytes, which the
// container prefix counts towards.
const maxObjectName = 1024

func init() {
	blobstore.Register(Scheme, open)
}

// Options tune a container beyond what the bucket and prefix say.
type Options struct {
	// ConditionalDelete makes DeleteIfMatch send ifGenerationMatch and
	// advertises the capability. Turn it on only for a store that enforces
	// preconditions on delete (real GCS does; fake-gcs-server does not).
	ConditionalDelete bool
	// MaxConditionalBody refuses larger conditional writes before sending
	// them; 0 means DefaultMaxConditionalBody.
	MaxConditionalBody int64
}

// bucket is the driver: one bucket of Google Cloud Storage.
type bucket struct {
	client    *storage.Client
	ownClient bool
	bucket    *storage.BucketHandle
	name      string // bucket name
	opts      Options
}

var (
	_ driver.Bucket     = (*bucket)(nil)
	_ driver.KeyChecker = (*bucket)(nil)
	_ driver.Explainer  = (*bucket)(nil)
)

// New returns a container over an existing client, for callers that build
// the client themselves (tests against an in-process server, custom
// transports). The client stays the caller's: Close does not close it.
func New(client *storage.Client, bucket, prefix string, opts Options) (*blobstore.Container, error) {
	b, err := newBucket(client, bucket, prefix, opts)
	if err != nil {
		return nil, err
	}
	return blobstore.NewAt(b, prefix)
}

func newBucket(client *storage.Client, name, prefix string, opts Options) (*bucket, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: gcs.New needs a storage client", blobstore.ErrBadURL)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: gcs.New needs a bucket name", blobstore.ErrBadURL)
	}
	if opts.MaxConditionalBody < 0 {
		return nil, fmt.Errorf("%w gs://%s/%s: negative max conditional body %d", blobstore.ErrBadURL, name, prefix, opts.MaxConditionalBody)
	}
	if opts.MaxConditionalBody == 0 {
		opts.MaxConditionalBody = DefaultMaxConditionalBody
	}
	// The client's own retry loop runs until the context ends; a bound
	// lets a caller without a deadline hear ErrUnavailable in about a
	// second instead of hanging on a store that is down.
	bh := client.Bucket(name).Retryer(
		storage.WithMaxAttempts(readAttempts),
		storage.WithBackoff(gax.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}))
	return &bucket{client: client, bucket: bh, name: name, opts: opts}, nil
}

// open is the registered opener for gs:// URLs.
func open(ctx context.Context, u *url.URL) (*blobstore.Container, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", blobstore.ErrBadURL, blobstore.RedactURL(u), fmt.Sprintf(format, args...))
	}
	if u.Host == "" {
		return nil, bad("no bucket (want gs://bucket[/prefix][?endpoint=URL])")
	}
	if u.User != nil {
		return nil, bad("credentials do not belong in a gs:// URL; use GOOGLE_APPLICATION_CREDENTIALS or application-default credentials")
	}
	var opts Options
	var clientOpts []option.ClientOption
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			if _, err := wire.Endpoint(v); err != nil {
				return nil, bad("%v", err)
			}
			clientOpts = append(clientOpts,
				option.WithEndpoint(strings.TrimRight(v, "/")+"/storage/v1/"),
				option.WithoutAuthentication(),
				storage.WithJSONReads())
		case "conditional_delete":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad("conditional_delete=%q is not true or false", v)
			}
			opts.ConditionalDelete = b
		case "max_conditional_body":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return nil, bad("max_conditional_body=%q is not a positive byte count", v)
			}
			opts.MaxConditionalBody = n
		default:
			return nil, bad("unknown option %q (known: endpoint, conditional_delete, max_conditional_body)", k)
		}
	}
	client, err := storage.NewClient(ctx, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("open %s: GCS client: %w (set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`; for an emulator add ?endpoint=URL)", blobstore.RedactURL(u), err)
	}
	b, err := newBucket(client, u.Host, u.Path, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	b.ownClient = true
	c, err := blobstore.NewAt(b, u.Path)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return c, nil
}

func (b *bucket) String() string { return "gs://" + b.name }

// Capabilities: GCS enforces generation preconditions on writes;
// ConditionalDelete only as configured.
func (b *bucket) Capabilities() blobstore.Capabilities {
	return blobstore.Capabilities{
		ConditionalCreate:  true,
		ConditionalUpdate:  true,
		ConditionalDelete:  b.opts.ConditionalDelete,
		MaxConditionalBody: b.opts.MaxConditionalBody,
	}
}

// Close closes the client if the container opened it from a URL.
func (b *bucket) Close() error {
	if b.ownClient {
		return b.client.Close()
	}
	return nil
}

// CheckKey refuses an object name longer than GCS allows once prefixed.
func (b *bucket) CheckKey(key string) error {
	if len(key) > maxObjectName {
		return fmt.Errorf("%w: with the container prefix the object name is %d bytes, more than the %d GCS allows", blobstore.ErrInvalidKey, len(key), maxObjectName)
	}
	return nil
}

// Unsupported says how to turn conditional delete on.
func (b *bucket) Unsupported(driver.Op) string {
	return "conditional delete is off for this GCS container; add ?conditional_delete=true to the store URL only if the store enforces ifGenerationMatch on delete (real GCS does, fake-gcs-server does not)"
}

// Classify places an error of the GCS client (see errors.go).
func (b *bucket) Classify(op driver.Op, err error) error { return mapError(op, err) }

// generation parses a token back into the generation it names. A token that
// is not a positive decimal number cannot match any object here.
func generation(t blobstore.Token) (int64, error) {
	g, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil || g <= 0 {
		return 0, fmt.Errorf("%w: token %q is not a GCS generation (it was not read from this store)", blobstore.ErrPreconditionFailed, string(t))
	}
	return g, nil
}

// conditions are pre in GCS's terms.
func conditions(pre driver.Precondition) (storage.Conditions, error) {
	switch {
	case pre.IfAbsent:
		return storage.Conditions{DoesNotExist: true}, nil
	case pre.IfMatch != "":
		gen, err := generation(pre.IfMatch)
		return storage.Conditions{GenerationMatch: gen}, err
	}
	return storage.Conditions{}, nil
}

func token(gen int64) blobstore.Token { return blobstore.Token(strconv.FormatInt(gen, 10)) }

func (b *bucket) Get(ctx context.Context, key string) (driver.Object, error) {
	r, err := b.bucket.Object(key).NewReader(ctx)
	if err != nil {
		return driver.Object{}, err
	}
	defer r.Close()
	body, err := io.ReadAll(r)
	if err != nil {
		return driver.Object{}, err
	}
	return driver.Object{Body: body, Token: token(r.Attrs.Generation)}, nil
}

func (b *bucket) Stat(ctx context.Context, key string) (driver.Attrs, error) {
	a, err := b.bucket.Object(key).Attrs(ctx)
	if err != nil {
		return driver.Attrs{}, err
	}
	return driver.Attrs{Size: a.Size, Token: token(a.Generation)}, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Write sends body in a single request with retries off (see the package
// doc) and a CRC32C the store checks, so a corrupted upload is refused
// rather than stored.
func (b *bucket) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	cond, err := conditions(pre)
	if err != nil {
		return "", err
	}
	obj := b.bucket.Object(key)
	if cond != (storage.Conditions{}) {
		obj = obj.If(cond)
	}
	w := obj.Retryer(storage.WithPolicy(storage.RetryNever)).NewWriter(ctx)
	w.ChunkSize = 0 // one request, no resumable session
	w.ContentType = "application/octet-stream"
	w.CRC32C = crc32.Checksum(body, castagnoli)
	w.SendCRC32C = true
	if _, err := w.Write(body); err != nil {
		_ = w.Close()
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return token(w.Attrs().Generation), nil
}

// Delete repeats an unconditional delete (a second attempt that finds
// nothing is the success it would have reported) and sends a conditional
// one once.
func (b *bucket) Delete(ctx context.Context, key string, pre driver.Precondition) error {
	obj := b.bucket.Object(key).Retryer(storage.WithPolicy(storage.RetryAlways))
	if pre.IfMatch != "" {
		cond, err := conditions(pre)
		if err != nil {
			return err
		}
		obj = b.bucket.Object(key).If(cond).Retryer(storage.WithPolicy(storage.RetryNever))
	}
	return obj.Delete(ctx)
}

func (b *bucket) List(ctx context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	// StartOffset is inclusive; the key equal to it is skipped below.
	q := &storage.Query{Prefix: prefix, StartOffset: startAfter}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Generation"}); err != nil {
		return driver.ListPage{}, err
	}
	it := b.bucket.Objects(ctx, q)
	// Two more than the page: startAfter itself (StartOffset is inclusive)
	// and one beyond the page, so More is exact and one request does.
	it.PageInfo().MaxSize = limit + 2
	var page driver.ListPage
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return page, nil
		}
		if err != nil {
			return driver.ListPage{}, err
		}
		if a.Name <= startAfter {
			continue
		}
		if len(page.Items) == limit {
			page.More = true
			return page, nil
		}
		page.Items = append(page.Items, driver.Attrs{Key: a.Name, Size: a.Size, Token: token(a.Generation)})
	}
}
