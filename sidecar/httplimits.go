package sidecar

import (
	"net/http"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/reqlimit"
)

// requestGuard guards the API handlers against slow and large clients
// (reqlimit.Guard.Wrap); every handler it wraps shares one gate of
// MaxConcurrentRequestBytes. AppendStream, whose request body is a
// long-lived stream, holds each message in a window of its own
// (serveStream): no body read deadline for the stream, one per message.
func (s *Server) requestGuard() *reqlimit.Guard {
	lim := s.opts.Limits
	return reqlimit.New(reqlimit.Config{
		Limits: reqlimit.Limits{MaxRequestBytes: lim.MaxRequestBytes, MaxConcurrentRequestBytes: lim.MaxConcurrentRequestBytes,
			BodyReadTimeout: lim.BodyReadTimeout},
		Server: "sidecar", TooLarge: blobstore.ErrTooLarge, Busy: ErrBusy, TooLargeHint: "split the append",
		APIError: tooLarge,
		OnRefuse: func(err error) { s.metrics.errors.WithLabelValues("http", reasonLabel(err)).Inc() },
		Streams: map[string]func(http.ResponseWriter, *http.Request, http.Handler, *reqlimit.Gate){
			sidecarv1connect.SidecarServiceAppendStreamProcedure: s.serveStream,
		},
	})
}

// tooLarge is err as the API error a body reader returns: connect passes a
// *connect.Error from the reader on to the client as it is.
func tooLarge(err error) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, err)
	if d, derr := connect.NewErrorDetail(&sidecarv1.ErrorDetail{Reason: Reason(err)}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}
