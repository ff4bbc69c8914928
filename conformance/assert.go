package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// expectErr reports whether err matches target and is an *blobstore.OpError
// naming op and key; it records a failure otherwise. what says which call.
func expectErr(t T, err, target error, op, key, what string) bool {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want an error matching %q", what, target)
		return false
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: error %q does not match %q", what, err, target)
		return false
	}
	return expectOpError(t, err, op, key, what)
}

// expectOpError checks that err is an *blobstore.OpError for op and key,
// the key as the caller gave it (relative to the container).
func expectOpError(t T, err error, op, key, what string) bool {
	t.Helper()
	var oe *blobstore.OpError
	if !errors.As(err, &oe) {
		t.Errorf("%s: error %q (%T) is not a *blobstore.OpError", what, err, err)
		return false
	}
	ok := true
	if oe.Op.String() != op {
		t.Errorf("%s: OpError.Op is %q, want %q", what, oe.Op, op)
		ok = false
	}
	if oe.Key != key {
		t.Errorf("%s: OpError.Key is %q, want it to name %q", what, oe.Key, key)
		ok = false
	}
	if oe.Store == "" {
		t.Errorf("%s: OpError.Store is empty; a message must name the store", what)
		ok = false
	}
	return ok
}

// mustOK stops the check on an unexpected error: later steps build on this
// one.
func mustOK(t T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// expectObject reads key with Get and Stat and checks body and token.
func expectObject(t T, c *blobstore.Container, key string, body []byte, tok blobstore.Token, what string) {
	t.Helper()
	ctx := t.Context()
	obj, err := c.Get(ctx, key)
	if err != nil {
		t.Errorf("%s: Get %q: %v", what, key, err)
		return
	}
	if !bytes.Equal(obj.Body, body) {
		t.Errorf("%s: Get %q returned %s, want %s", what, key, describeBody(obj.Body), describeBody(body))
	}
	if tok != "" && obj.Token != tok {
		t.Errorf("%s: Get %q returned token %q, want %q (the token of the last write)", what, key, obj.Token, tok)
	}
	if obj.Token == "" {
		t.Errorf("%s: Get %q returned an empty token", what, key)
	}
	a, err := c.Stat(ctx, key)
	if err != nil {
		t.Errorf("%s: Stat %q: %v", what, key, err)
		return
	}
	if a.Size != int64(len(body)) {
		t.Errorf("%s: Stat %q size %d, want %d", what, key, a.Size, len(body))
	}
	if a.Token != obj.Token {
		t.Errorf("%s: Stat %q token %q differs from Get's %q", what, key, a.Token, obj.Token)
	}
}

// expectMissing checks that Get and Stat report ErrNotFound for key.
func expectMissing(t T, c *blobstore.Container, key, what string) {
	t.Helper()
	ctx := t.Context()
	_, err := c.Get(ctx, key)
	expectErr(t, err, blobstore.ErrNotFound, "Get", key, what+": Get")
	_, err = c.Stat(ctx, key)
	expectErr(t, err, blobstore.ErrNotFound, "Stat", key, what+": Stat")
}

func describeBody(b []byte) string {
	if len(b) <= 48 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:48])
}

// withConflictRetry repeats op while the store answers ErrConflict (S3's 409
// for concurrent conditional writes): the request had no effect, and a
// caller retries it.
func withConflictRetry(ctx context.Context, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if !errors.Is(err, blobstore.ErrConflict) || attempt == 20 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		}
	}
}
