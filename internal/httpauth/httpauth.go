// Package httpauth is the bearer-token check the sidecar and the master
// share: the server side (a constant-time comparison of digests, a
// Connect error a client can read) and the client side (an interceptor
// that sends the token on every call, streams included).
package httpauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// RequireBearer serves next only to requests that carry token as their
// bearer token; the paths in open (health probes) pass without it. A
// refused call gets Unauthenticated with msg, which should say where the
// token goes.
func RequireBearer(token, msg string, next http.Handler, open ...string) http.Handler {
	want := sha256.Sum256([]byte(token))
	errw := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range open {
			if r.URL.Path == p {
				next.ServeHTTP(w, r)
				return
			}
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		// Comparing digests keeps the comparison constant-time whatever
		// the lengths.
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardfence"`)
			if errw.IsSupported(r) {
				_ = errw.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(msg)))
				return
			}
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// BearerToken is a client interceptor that sends token as the bearer
// token of every call.
func BearerToken(token string) connect.Interceptor { return bearer(token) }

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
