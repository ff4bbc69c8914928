// Package grpcprobe serves the gRPC ecosystem's endpoints the sidecar and
// the master share: the health checking protocol (grpc.health.v1.Health,
// for grpc-health-probe, grpcurl and Kubernetes gRPC probes) and server
// reflection, so stock tools can list and describe the API.
package grpcprobe

import (
	"context"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/shardfence/shardfence/internal/echo"
)

// The health checking calls: open without a token, like /healthz.
const (
	CheckPath = "/" + grpchealth.HealthV1ServiceName + "/Check"
	WatchPath = "/" + grpchealth.HealthV1ServiceName + "/Watch"
)

// WatchPoll is how often a health Watch looks at the status again.
const WatchPoll = time.Second

// Mount serves the health checking protocol, answered by checker, and
// server reflection of services (and of the health service) on mux, each
// handler wrapped by wrap (the server's request limits).
func Mount(mux *http.ServeMux, checker grpchealth.Checker, wrap func(http.Handler) http.Handler, services ...string) {
	hpath, hh := grpchealth.NewHandler(checker, echo.JSONCodecs()...)
	mux.Handle(hpath, wrap(hh))
	reflector := grpcreflect.NewStaticReflector(append(append([]string{}, services...), grpchealth.HealthV1ServiceName)...)
	rpath, rh := grpcreflect.NewHandlerV1(reflector, echo.JSONCodecs()...)
	mux.Handle(rpath, wrap(rh))
	rpath, rh = grpcreflect.NewHandlerV1Alpha(reflector, echo.JSONCodecs()...)
	mux.Handle(rpath, wrap(rh))
}

// Poll is a health Watch: it calls onChange every WatchPoll (the handler
// sends only changes) and once more when stopped closes, until the
// returned function is called.
func Poll(stopped <-chan struct{}, onChange func()) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(WatchPoll)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				onChange()
			case <-stopped:
				onChange()
				return
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// Checker answers Check with Status and Watch by polling it.
type Checker struct {
	// Status is the status of service; an error (a connect not_found for
	// a service it does not know) answers the call.
	Status func(ctx context.Context, service string) (grpchealth.Status, error)
	// Stopped closes when the server shuts down; nil never closes.
	Stopped <-chan struct{}
}

// Check implements grpchealth.Checker.
func (c Checker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	st, err := c.Status(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	return &grpchealth.CheckResponse{Status: st}, nil
}

// Watch implements grpchealth.Checker.
func (c Checker) Watch(_ context.Context, _ *grpchealth.CheckRequest, onChange func()) (func(), error) {
	return Poll(c.Stopped, onChange), nil
}
