package sidecar

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/grpcprobe"
)

// The gRPC health checking protocol (grpc.health.v1.Health), so
// grpc-health-probe, grpcurl and Kubernetes gRPC probes work. Service names:
//
//	""                                              the process: SERVING until it shuts down (a liveness probe)
//	"shardfence.sidecar.v1.SidecarService"          /readyz: SERVING unless shutting down or a shard's store is stalled
//	"shardfence.sidecar.v1.SidecarService/SHARD"    /readyz?shard=SHARD: SERVING while the shard is open here and not stalled;
//	                                                NOT_SERVING while it opens, closes, is fenced, failed, handed off or stalled;
//	                                                NOT_FOUND when it is not on this sidecar
const (
	// HealthServiceSidecar is the health service name of the sidecar's
	// readiness.
	HealthServiceSidecar = sidecarv1connect.SidecarServiceName
	// HealthShardPrefix starts the health service name of one shard:
	// HealthShardPrefix + shard id.
	HealthShardPrefix = sidecarv1connect.SidecarServiceName + "/"
)

// healthChecker answers grpc.health.v1 from the sidecar's readiness.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	serving := func(ok bool) (*grpchealth.CheckResponse, error) {
		if ok {
			return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
		}
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	switch svc := req.Service; {
	case svc == "":
		return serving(h.s.Ready() == nil)
	case svc == HealthServiceSidecar:
		rd, _ := h.s.Readiness("")
		return serving(rd.Ready)
	case strings.HasPrefix(svc, HealthShardPrefix):
		shard := strings.TrimPrefix(svc, HealthShardPrefix)
		if err := ValidateShardID(shard); err != nil {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("health service %q: %w", clip(svc), err))
		}
		rd, found := h.s.Readiness(shard)
		if !found {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("health service %q: shard %q is not on this sidecar", clip(svc), shard))
		}
		return serving(rd.Ready)
	default:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown health service %q: ask for \"\" (the process), %q (readiness) or %q", clip(svc), HealthServiceSidecar, HealthShardPrefix+"SHARD"))
	}
}

// Watch looks at the status again every grpcprobe.WatchPoll (the handler
// sends only changes) until stopped or the sidecar shuts down.
func (h healthChecker) Watch(_ context.Context, _ *grpchealth.CheckRequest, onChange func()) (func(), error) {
	return grpcprobe.Poll(h.s.stopped, onChange), nil
}
