// Package h2serve is the HTTP server set-up the sidecar (shardfence serve)
// and the master share: HTTP/1.1 and HTTP/2 on one listener (h2c without
// TLS, so gRPC clients reach a plain listener too), TLS when configured,
// buffered connection reads, a header deadline and an idle timeout, and
// the server's own errors on the process's log.
//
// What runs behind the handler (authentication, request limits, the API)
// is the caller's: this package only serves it.
package h2serve

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/shardfence/shardfence/internal/bufconn"
)

// ReadHeaderTimeout bounds how long a connection may take to send a
// request's headers. Bodies have their own per-call deadline (the
// servers' --body-read-timeout, lifted once read), so long acks and
// streams are not cut.
const ReadHeaderTimeout = 10 * time.Second

// Options configure a Server.
type Options struct {
	Handler http.Handler
	// TLS serves HTTPS (HTTP/2 negotiated by ALPN); nil serves plain
	// HTTP/1.1 and h2c.
	TLS *tls.Config
	// IdleTimeout closes a client connection idle this long.
	IdleTimeout time.Duration
	// Log receives the server's own errors (TLS handshakes, bad
	// requests) at warn level; nil discards them.
	Log *slog.Logger
	// BufferReads gives every connection a read buffer (bufconn, 32 KiB
	// for its life): the HTTP/2 server otherwise reads each frame with
	// two system calls. Worth it for a few busy connections (the
	// sidecar's clients: CPU per op through the API); not for thousands
	// of mostly idle ones (the master's nodes: the buffers cost 80 MiB at
	// 1,000 nodes, docs/BENCHMARKS.md).
	BufferReads bool
}

// Server serves one handler on one listener.
type Server struct {
	hs       *http.Server
	tls      bool
	buffered bool
}

// New returns a server for o; Serve starts it.
func New(o Options) *Server {
	hs := &http.Server{
		Handler:           o.Handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		TLSConfig:         o.TLS,
	}
	if o.Log != nil {
		hs.ErrorLog = slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn)
	}
	// gRPC clients speak HTTP/2: without TLS that is h2c. Connect and
	// JSON clients use HTTP/1.1 or HTTP/2.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetHTTP2(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	return &Server{hs: hs, tls: o.TLS != nil, buffered: o.BufferReads}
}

// Serve accepts connections on ln until Shutdown (then it returns
// http.ErrServerClosed) or ln fails, its connections' reads buffered if
// Options.BufferReads.
func (s *Server) Serve(ln net.Listener) error {
	if s.buffered {
		ln = bufconn.Listen(ln)
	}
	if s.tls {
		return s.hs.ServeTLS(ln, "", "")
	}
	return s.hs.Serve(ln)
}

// Start runs Serve in a goroutine; the channel gets what it returned.
func (s *Server) Start(ln net.Listener) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	return errc
}

// Shutdown stops accepting, lets the calls in flight finish until ctx
// ends, and closes the connections. A server already closed is no error.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.hs.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
