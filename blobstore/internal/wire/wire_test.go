package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

// kind names the blobstore kind an error has, for the table.
func kind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case blobstore.IsAmbiguous(err):
		return "ambiguous"
	case errors.Is(err, blobstore.ErrUnavailable):
		return "unavailable"
	}
	return "as is"
}

func TestNoAnswer(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	odd := errors.New("something the driver does not recognise")
	for _, tc := range []struct {
		op   driver.Op
		err  error
		want string
	}{
		{driver.OpGet, context.Canceled, "as is"},
		{driver.OpPut, context.DeadlineExceeded, "ambiguous"},
		{driver.OpCompareAndSwap, dial, "unavailable"},
		{driver.OpGet, dial, "unavailable"},
		{driver.OpCreateIfAbsent, reset, "ambiguous"},
		{driver.OpGet, reset, "unavailable"},
		{driver.OpGetRange, io.ErrUnexpectedEOF, "unavailable"},
		{driver.OpDelete, odd, "ambiguous"},
		{driver.OpStat, odd, "as is"},
	} {
		if got := kind(NoAnswer(tc.op, tc.err)); got != tc.want {
			t.Errorf("NoAnswer(%s, %v) is %s, want %s", tc.op, tc.err, got, tc.want)
		}
	}
}

func TestOverloaded(t *testing.T) {
	for _, tc := range []struct {
		op     driver.Op
		status int
		want   string
	}{
		{driver.OpPut, 429, "unavailable"},
		{driver.OpGet, 503, "unavailable"},
		{driver.OpCompareAndSwap, 503, "ambiguous"},
		{driver.OpDelete, 408, "ambiguous"},
		{driver.OpGet, 408, "unavailable"},
		{driver.OpPut, 412, "nil"},
		{driver.OpGet, 404, "nil"},
	} {
		if got := kind(Overloaded(tc.op, tc.status, errors.New("answer"))); got != tc.want {
			t.Errorf("Overloaded(%s, %d) is %s, want %s", tc.op, tc.status, got, tc.want)
		}
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"http://127.0.0.1:4443", true},
		{"https://storage.example/path", true},
		{"ftp://127.0.0.1", false},
		{"http://", false},
		{"http://user:secret@127.0.0.1", false},
		{"127.0.0.1:4443", false},
		{"http://[::1", false},
	} {
		ep, err := Endpoint(tc.v)
		if (err == nil) != tc.ok || (err != nil && strings.Contains(err.Error(), "secret")) {
			t.Errorf("Endpoint(%q) = %v, %v; want ok %v and no value in the error", tc.v, ep, err, tc.ok)
		}
	}
}
