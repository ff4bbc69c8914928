package s3

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

// sdkError builds an error the way the SDK returns it: an OperationError
// around a ResponseError around the decoded API error.
func sdkError(op string, status int, apiErr error) error {
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: op,
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      apiErr,
			},
			RequestID: "req-1",
		},
	}
}

func TestMapErrorFromSDKErrors(t *testing.T) {
	cases := []struct {
		name string
		op   driver.Op
		err  error
		want error
	}{
		{"412 on If-None-Match", driver.OpCreateIfAbsent, sdkError("PutObject", 412, &smithy.GenericAPIError{Code: "PreconditionFailed", Message: "At least one of the pre-conditions you specified did not hold"}), blobstore.ErrAlreadyExists},
		{"412 on If-Match", driver.OpCompareAndSwap, sdkError("PutObject", 412, &smithy.GenericAPIError{Code: "PreconditionFailed"}), blobstore.ErrPreconditionFailed},
		{"404 NoSuchKey on If-Match", driver.OpCompareAndSwap, sdkError("PutObject", 404, &types.NoSuchKey{Message: awssdk.String("The specified key does not exist.")}), blobstore.ErrPreconditionFailed},
		{"409 ConditionalRequestConflict", driver.OpCompareAndSwap, sdkError("PutObject", 409, &smithy.GenericAPIError{Code: "ConditionalRequestConflict"}), blobstore.ErrConflict},
		{"HEAD 404 has only a status", driver.OpGet, sdkError("HeadObject", 404, &types.NotFound{}), blobstore.ErrNotFound},
		{"GET NoSuchKey", driver.OpGet, sdkError("GetObject", 404, &types.NoSuchKey{}), blobstore.ErrNotFound},
		{"NoSuchBucket", driver.OpGet, sdkError("ListObjectsV2", 404, &types.NoSuchBucket{}), s3compat.ErrNoBucket},
		{"503 on CAS", driver.OpCompareAndSwap, sdkError("PutObject", 503, &smithy.GenericAPIError{Code: "ServiceUnavailable"}), blobstore.ErrAmbiguous},
		{"403", driver.OpGet, sdkError("GetObject", 403, &smithy.GenericAPIError{Code: "InvalidAccessKeyId"}), s3compat.ErrAccessDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := (&bucket{bucket: "bkt"}).Classify(tc.op, tc.err)
			if !errors.Is(got, tc.want) {
				t.Fatalf("Classify = %v; want errors.Is %v", got, tc.want)
			}
		})
	}
}

// A delete of a missing key succeeds (the portable container turns
// ErrNotFound into success), so only a missing key may classify as one.
func TestDeleteNotFound(t *testing.T) {
	b := &bucket{bucket: "bkt"}
	if err := b.Classify(driver.OpDelete, sdkError("DeleteObject", 404, &types.NoSuchKey{})); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("404 NoSuchKey is not found: %v", err)
	}
	if err := b.Classify(driver.OpDelete, sdkError("DeleteObject", 404, &types.NoSuchBucket{})); errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("404 NoSuchBucket counted as a missing key: a delete would succeed on a wrong bucket: %v", err)
	}
}

func TestParseURL(t *testing.T) {
	parse := func(raw string) (Config, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return ParseURL(u)
	}
	cfg, err := parse("s3://bkt/shards/a?region=eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bucket != "bkt" || cfg.Prefix != "shards/a" || cfg.Region != "eu-west-1" || cfg.PathStyle || cfg.ConditionalDelete {
		t.Errorf("plain AWS URL parsed as %+v", cfg)
	}
	cfg, err = parse("s3://bkt?endpoint=http://127.0.0.1:9000&access_key=AK&secret_key=SK&conditional_delete=true")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.PathStyle || cfg.Endpoint != "http://127.0.0.1:9000" || cfg.AccessKey != "AK" || cfg.SecretKey != "SK" || !cfg.ConditionalDelete || cfg.Prefix != "" {
		t.Errorf("emulator URL parsed as %+v; want path style by default with an endpoint", cfg)
	}
	cfg, err = parse("s3://bkt?endpoint=http://store&path_style=false")
	if err != nil || cfg.PathStyle {
		t.Errorf("path_style=false not honoured: %+v, %v", cfg, err)
	}
	for _, bad := range []string{
		"s3:///prefix",
		"s3://bkt/p?regoin=x",
		"s3://bkt/p?path_style=maybe",
		"s3://AK:SK@bkt/p",
	} {
		_, err := parse(bad)
		if !errors.Is(err, blobstore.ErrBadURL) {
			t.Errorf("ParseURL(%q) = %v; want ErrBadURL", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "SK") {
			t.Errorf("ParseURL(%q) error shows the secret: %v", bad, err)
		}
	}
}

func TestOpenKeepsSecretsOut(t *testing.T) {
	ctx := context.Background()
	c, err := blobstore.Open(ctx, "s3://bkt/p?endpoint=http://127.0.0.1:1&access_key=AKIDSECRETISH&secret_key=topsecretvalue")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.String(); strings.Contains(s, "topsecretvalue") || strings.Contains(s, "AKIDSECRETISH") {
		t.Errorf("String() shows credentials: %s", s)
	}
	// Nothing listens on port 1: the error must still name store and key
	// without the secret, and say the store is unavailable.
	_, err = c.Get(ctx, "k")
	if !errors.Is(err, blobstore.ErrUnavailable) {
		t.Errorf("Get from a closed port: %v; want ErrUnavailable", err)
	}
	if err != nil && strings.Contains(err.Error(), "topsecretvalue") {
		t.Errorf("error shows the secret: %v", err)
	}
	_, err = c.CreateIfAbsent(ctx, "k", []byte("x"))
	if !errors.Is(err, blobstore.ErrUnavailable) || blobstore.IsAmbiguous(err) {
		t.Errorf("create against a closed port: %v; want ErrUnavailable (never sent), not ambiguous", err)
	}
	if _, err := blobstore.Open(ctx, "s3://bkt/p?access_key=only"); !errors.Is(err, blobstore.ErrBadURL) {
		t.Errorf("access_key without secret_key: %v; want ErrBadURL", err)
	}
}

func TestRefusedBeforeSending(t *testing.T) {
	ctx := context.Background()
	c, err := New(ctx, Config{Bucket: "bkt", Prefix: "p", Endpoint: "http://127.0.0.1:1", PathStyle: true, AccessKey: "a", SecretKey: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompareAndSwap(ctx, "k", "", []byte("x")); !errors.Is(err, blobstore.ErrPreconditionFailed) {
		t.Errorf("CAS with an empty token: %v; want ErrPreconditionFailed without sending an unconditional PUT", err)
	}
	if err := c.DeleteIfMatch(ctx, "k", `"x"`); !errors.Is(err, blobstore.ErrUnsupported) {
		t.Errorf("DeleteIfMatch without conditional_delete: %v; want ErrUnsupported", err)
	}
	if _, err := c.Put(ctx, "../k", nil); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Errorf("escaping key: %v; want ErrInvalidKey", err)
	}
	if _, err := c.Put(ctx, strings.Repeat("k", blobstore.MaxKeyLen-1), nil); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Errorf("key over S3's limit once prefixed: %v; want ErrInvalidKey", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.CreateIfAbsent(cctx, "k", []byte("x")); !errors.Is(err, context.Canceled) || blobstore.IsAmbiguous(err) {
		t.Errorf("create with a cancelled context: %v; want context.Canceled, not ambiguous (nothing was sent)", err)
	}
}
