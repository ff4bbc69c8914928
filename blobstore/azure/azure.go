// Package azure is the Azure Blob Storage driver:
// azblob://account/container/prefix.
//
// The version token is the blob's ETag as the response headers carry it
// (quoted; listings, which omit the quotes, get them added).
// Create-if-absent sends If-None-Match: * and compare-and-swap sends
// If-Match: <token>, each as one Put Blob request. Azure answers 409
// BlobAlreadyExists (or 412 ConditionNotMet) to a create over an existing
// blob and 412 ConditionNotMet to a stale If-Match; they become
// ErrAlreadyExists and ErrPreconditionFailed. Delete honours If-Match too, so
// the driver advertises ConditionalDelete.
//
// Uploads and conditional deletes are sent once, with the pipeline's retries
// turned off for that call. A retried conditional request whose first
// response was lost would meet its own effect and come back 409/412,
// reporting a definite failure for a write that took effect. With one
// attempt, a timeout, a 5xx or a broken connection after the request left is
// reported as blobstore.ErrAmbiguous, and the caller settles it by reading
// the key. Reads, listings and unconditional deletes keep the pipeline's
// retries (up to four attempts, backing off from 100ms).
//
// Streaming reads (GetRange, range.go) are one Get Blob with a range and,
// when pinned, If-Match on the token; a broken download resumes pinned to
// the ETag of its first answer. A zero length, a 416 and a pinned 412 cost
// one GetProperties more each, which the portable layer decides.
//
// Azure lists names in UTF-16 code-unit order, which differs from the
// contract's byte order where a character above U+FFFF meets one in
// U+E000..U+FFFF; List re-sorts those runs, so pages come back in byte order.
//
// Credentials, first match wins (never logged):
//
//	AZURE_STORAGE_KEY                  shared key of the URL's account (AZURE_STORAGE_ACCOUNT,
//	                                   if set, must name the same account)
//	AZURE_STORAGE_CONNECTION_STRING    a connection string (its endpoint and credential)
//	AZURE_STORAGE_SAS_TOKEN            a SAS token for the container
//
// URL options:
//
//	endpoint=URL                 blob service URL, e.g. http://127.0.0.1:10000/devstoreaccount1
//	                             for Azurite; an IP or localhost endpoint without a path gets
//	                             the account appended (path-style, as emulators expect)
//	max_conditional_body=BYTES   refuse conditional writes above this size (default: Azure's
//	                             single Put Blob limit, 5000 MiB)
package azure

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/wire"
)

// Scheme is the URL scheme this driver registers.
const Scheme = "azblob"

// MaxPutBlob is the largest body one Put Blob request takes (service
// versions 2019-12-12 and later). A conditional write must be one request,
// so it is also the default MaxConditionalBody.
const MaxPutBlob = 5000 << 20

// Azure's limits on a blob name, which the container prefix counts towards.
const (
	maxBlobNameChars = 1024
	maxBlobSegments  = 254
)

func init() {
	blobstore.Register(Scheme, open)
}

// Options tune a container beyond what the URL path says.
type Options struct {
	// MaxConditionalBody refuses larger conditional writes before sending
	// them; 0 means MaxPutBlob.
	MaxConditionalBody int64
}

// bucket is the driver: one container of Azure Blob Storage.
type bucket struct {
	client  *container.Client
	account string
	name    string // container name
	opts    Options
}

var (
	_ driver.Bucket     = (*bucket)(nil)
	_ driver.KeyChecker = (*bucket)(nil)
)

// New returns a container over an existing container client, for callers
// that build the client themselves. account only names the store in
// messages.
func New(client *container.Client, account, containerName, prefix string, opts Options) (*blobstore.Container, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: azure.New needs a container client", blobstore.ErrBadURL)
	}
	switch {
	case opts.MaxConditionalBody < 0 || opts.MaxConditionalBody > MaxPutBlob:
		return nil, fmt.Errorf("%w azblob://%s/%s/%s: max conditional body %d is outside 1..%d (one Put Blob)", blobstore.ErrBadURL, account, containerName, prefix, opts.MaxConditionalBody, int64(MaxPutBlob))
	case opts.MaxConditionalBody == 0:
		opts.MaxConditionalBody = MaxPutBlob
	}
	return blobstore.NewAt(&bucket{client: client, account: account, name: containerName, opts: opts}, prefix)
}

// open is the registered opener for azblob:// URLs.
func open(_ context.Context, u *url.URL) (*blobstore.Container, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", blobstore.ErrBadURL, blobstore.RedactURL(u), fmt.Sprintf(format, args...))
	}
	if u.User != nil {
		return nil, bad("credentials do not belong in an azblob:// URL; set AZURE_STORAGE_KEY, AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_SAS_TOKEN")
	}
	account := u.Host
	containerName, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if account == "" || containerName == "" {
		return nil, bad("want azblob://account/container[/prefix][?endpoint=URL]")
	}
	if err := checkContainerName(containerName); err != nil {
		return nil, bad("%v", err)
	}
	var opts Options
	endpoint := ""
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			ep, err := wire.Endpoint(v)
			if err != nil {
				return nil, bad("%v", err)
			}
			if strings.Trim(ep.Path, "/") == "" && isLocal(ep.Hostname()) {
				ep.Path = "/" + account
			}
			endpoint = strings.TrimRight(ep.String(), "/")
		case "max_conditional_body":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n > MaxPutBlob {
				return nil, bad("max_conditional_body=%q is not a byte count in 1..%d", v, int64(MaxPutBlob))
			}
			opts.MaxConditionalBody = n
		default:
			return nil, bad("unknown option %q (known: endpoint, max_conditional_body)", k)
		}
	}
	if endpoint == "" {
		endpoint = "https://" + account + ".blob.core.windows.net"
	}
	client, err := newClient(account, endpoint, containerName)
	if err != nil {
		return nil, bad("%v", err)
	}
	return New(client, account, containerName, prefix, opts)
}

// newClient builds the container client from the first credential the
// environment offers.
func newClient(account, endpoint, containerName string) (*container.Client, error) {
	containerURL := endpoint + "/" + containerName
	if key := os.Getenv("AZURE_STORAGE_KEY"); key != "" {
		if envAccount := os.Getenv("AZURE_STORAGE_ACCOUNT"); envAccount != "" && envAccount != account {
			return nil, fmt.Errorf("AZURE_STORAGE_KEY belongs to account %q (AZURE_STORAGE_ACCOUNT) but the URL names account %q", envAccount, account)
		}
		cred, err := container.NewSharedKeyCredential(account, key)
		if err != nil {
			// The SDK's message would not show the key, but say only what
			// is wrong to be sure.
			return nil, errors.New("AZURE_STORAGE_KEY is not a valid base64 account key")
		}
		return container.NewClientWithSharedKeyCredential(containerURL, cred, clientOptions())
	}
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		c, err := container.NewClientFromConnectionString(cs, containerName, clientOptions())
		if err != nil {
			return nil, errors.New("AZURE_STORAGE_CONNECTION_STRING cannot be parsed")
		}
		return c, nil
	}
	if sas := os.Getenv("AZURE_STORAGE_SAS_TOKEN"); sas != "" {
		return container.NewClientWithNoCredential(containerURL+"?"+strings.TrimPrefix(sas, "?"), clientOptions())
	}
	return nil, errors.New("no Azure credentials: set AZURE_STORAGE_KEY (with the account in the URL), AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_SAS_TOKEN")
}

// clientOptions keeps the pipeline's retries for reads short: a store that
// is down should be reported in about a second, well inside a failover
// budget, not after the SDK's default backoff of several seconds.
//
// The client also closes connections idle for more than idleConnTimeout
// itself: Azurite (like any Node.js server) drops idle keep-alive
// connections after 5 s, and a write sent once on a connection the server
// is closing ends in a reset that can only be reported as ambiguous.
func clientOptions() *container.ClientOptions {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.IdleConnTimeout = idleConnTimeout
	return &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry:     policy.RetryOptions{MaxRetries: 3, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
		Transport: &http.Client{Transport: tr},
	}}
}

const idleConnTimeout = 3 * time.Second

func isLocal(host string) bool {
	return host == "localhost" || net.ParseIP(host) != nil
}

// checkContainerName applies Azure's container naming rules up front, so a
// typo is reported as such rather than as an opaque 400 on first use.
func checkContainerName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("container name %q must be 3 to 63 characters", name)
	}
	for i, r := range name {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || (r == '-' && i > 0 && i < len(name)-1 && name[i-1] != '-')
		if !ok {
			return fmt.Errorf("container name %q may hold only lower-case letters, digits and single inner hyphens", name)
		}
	}
	return nil
}

func (b *bucket) String() string {
	return "azblob://" + b.account + "/" + b.name
}

// Capabilities: Azure enforces If-None-Match and If-Match on Put Blob and
// If-Match on Delete Blob.
func (b *bucket) Capabilities() blobstore.Capabilities {
	return blobstore.Capabilities{
		ConditionalCreate:  true,
		ConditionalUpdate:  true,
		ConditionalDelete:  true,
		MaxConditionalBody: b.opts.MaxConditionalBody,
		MaxBody:            MaxPutBlob,
	}
}

// Close has nothing to release: the pipeline holds no connections of its
// own beyond the shared HTTP transport.
func (b *bucket) Close() error { return nil }

// CheckKey refuses a blob name longer or deeper than Azure allows once
// prefixed.
func (b *bucket) CheckKey(key string) error {
	if n := utf8.RuneCountInString(key); n > maxBlobNameChars {
		return fmt.Errorf("%w: with the container prefix the blob name is %d characters, more than the %d Azure allows", blobstore.ErrInvalidKey, n, maxBlobNameChars)
	}
	if n := strings.Count(key, "/") + 1; n > maxBlobSegments {
		return fmt.Errorf("%w: with the container prefix the blob name has %d path segments, more than the %d Azure allows", blobstore.ErrInvalidKey, n, maxBlobSegments)
	}
	return nil
}

// Classify places an error of the Azure SDK (see errors.go).
func (b *bucket) Classify(op driver.Op, err error) error { return mapError(op, err) }

// once marks ctx so the pipeline sends the request a single time.
func once(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}

func token(etag *azcore.ETag) blobstore.Token {
	if etag == nil {
		return ""
	}
	return blobstore.Token(*etag)
}

// access is pre as Azure's access conditions.
func access(pre driver.Precondition) *blob.AccessConditions {
	switch {
	case pre.IfAbsent:
		return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}
	case pre.IfMatch != "":
		return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(azcore.ETag(pre.IfMatch))}}
	}
	return nil
}

func (b *bucket) Get(ctx context.Context, key string) (driver.Object, error) {
	resp, err := b.client.NewBlobClient(key).DownloadStream(ctx, nil)
	if err != nil {
		return driver.Object{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return driver.Object{}, err
	}
	if resp.ContentLength != nil && int64(len(body)) != *resp.ContentLength {
		return driver.Object{}, blobstore.Unavailable(fmt.Errorf("read %d of %d bytes", len(body), *resp.ContentLength))
	}
	return driver.Object{Body: body, Token: token(resp.ETag)}, nil
}

func (b *bucket) Stat(ctx context.Context, key string) (driver.Attrs, error) {
	resp, err := b.client.NewBlobClient(key).GetProperties(ctx, nil)
	if err != nil {
		return driver.Attrs{}, err
	}
	a := driver.Attrs{Token: token(resp.ETag)}
	if resp.ContentLength != nil {
		a.Size = *resp.ContentLength
	}
	return a, nil
}

// Write sends body as one Put Blob, once, with an MD5 the service checks,
// so a body damaged on the way is refused rather than stored.
func (b *bucket) Write(ctx context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	sum := md5.Sum(body)
	opts := &blockblob.UploadOptions{
		TransactionalValidation: blob.TransferValidationTypeMD5(sum[:]),
		HTTPHeaders:             &blob.HTTPHeaders{BlobContentType: to.Ptr("application/octet-stream")},
		AccessConditions:        access(pre),
	}
	resp, err := b.client.NewBlockBlobClient(key).Upload(once(ctx), streaming.NopCloser(bytes.NewReader(body)), opts)
	if err != nil {
		return "", err
	}
	return token(resp.ETag), nil
}

// Delete keeps the pipeline's retries for an unconditional delete (a later
// attempt that finds nothing is the success the first would have reported)
// and sends a conditional one once.
func (b *bucket) Delete(ctx context.Context, key string, pre driver.Precondition) error {
	var opts *blob.DeleteOptions
	if pre.IfMatch != "" {
		ctx, opts = once(ctx), &blob.DeleteOptions{AccessConditions: access(pre)}
	}
	_, err := b.client.NewBlobClient(key).Delete(ctx, opts)
	return err
}

// maxListPage is the most names one List Blobs request returns.
const maxListPage = 5000

func (b *bucket) List(ctx context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	// Two more than the page: startAfter itself (startFrom is inclusive)
	// and one beyond the page, so More is exact.
	opts := &container.ListBlobsFlatOptions{Prefix: to.Ptr(prefix), MaxResults: to.Ptr(int32(limit + 2))}
	// startFrom is a hint in the service's order: a service that ignores
	// it lists from the prefix, and take below skips what is not strictly
	// after startAfter either way.
	if from := lowerBoundUTF16(startAfter); from > prefix {
		opts.StartFrom = to.Ptr(from)
	}
	var page driver.ListPage
	// take adds items in byte order and reports whether the page is full.
	take := func(items []driver.Attrs) bool {
		for _, a := range items {
			if a.Key <= startAfter {
				continue
			}
			if len(page.Items) == limit {
				page.More = true
				return true
			}
			page.Items = append(page.Items, a)
		}
		return false
	}
	order := byteOrder[driver.Attrs]{name: func(a driver.Attrs) string { return a.Key }}
	for {
		resp, err := b.client.NewListBlobsFlatPager(opts).NextPage(ctx)
		if err != nil {
			return driver.ListPage{}, err
		}
		for _, it := range resp.Segment.BlobItems {
			if it.Name == nil {
				continue
			}
			a := driver.Attrs{Key: *it.Name}
			if it.Properties != nil {
				a.Token = listToken(it.Properties.ETag)
				if it.Properties.ContentLength != nil {
					a.Size = *it.Properties.ContentLength
				}
			}
			if take(order.push(a)) {
				return page, nil
			}
		}
		if resp.NextMarker == nil || *resp.NextMarker == "" {
			break
		}
		// A second page means the first was not enough: the service
		// ignored startFrom (Azurite does) or a run of names is being
		// re-sorted. Read on in the largest pages the service gives.
		opts.Marker = resp.NextMarker
		opts.MaxResults = to.Ptr(int32(maxListPage))
	}
	take(order.flush())
	return page, nil
}

// listToken gives a listed ETag the form Get and Put return: listings carry
// it without the quotes the response headers have.
func listToken(etag *azcore.ETag) blobstore.Token {
	t := token(etag)
	if t != "" && !strings.HasPrefix(string(t), `"`) && !strings.HasPrefix(string(t), "W/") {
		t = `"` + t + `"`
	}
	return t
}
