package master

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/reqlimit"
)

// NewHandler serves m's API over ConnectRPC (gRPC, gRPC-Web and JSON over
// HTTP); mount the handler at the returned path.
func NewHandler(m *Master, opts ...connect.HandlerOption) (string, http.Handler) {
	return NewHandlerFunc(func() (*Master, error) { return m, nil }, opts...)
}

// NewHandlerFunc serves the API of whichever master serving returns for
// each request. An error (ErrNotPrimary, ErrFenced, ErrLogFailed) refuses
// the request with it: a standby or a fenced master answers nothing but
// Stats, which it answers from the master it has, if any.
func NewHandlerFunc(serving func() (*Master, error), opts ...connect.HandlerOption) (string, http.Handler) {
	return masterv1connect.NewMasterServiceHandler(&service{serving: serving}, HandlerOptions(opts...)...)
}

// DefaultMaxRequestBytes bounds one request message of the master's APIs,
// decompressed, unless the handler's options set another bound.
const DefaultMaxRequestBytes = 4 << 20

// DefaultMaxStreams bounds the open calls of each streaming procedure
// (WatchShards, WatchAssignments): each holds a goroutine or two and, for
// a routing feed, a copy of the table it diffs against.
const DefaultMaxStreams = 4096

// HandlerOptions are opts after the master's defaults: a request message
// (a gzip body decompressed, too) of at most DefaultMaxRequestBytes,
// which connect.WithReadMaxBytes in opts overrides; answers compressed
// only from CompressMinBytes; and JSON decode errors that repeat a bounded
// part of the body (echo.JSONCodecs).
func HandlerOptions(opts ...connect.HandlerOption) []connect.HandlerOption {
	return append(append([]connect.HandlerOption{
		connect.WithReadMaxBytes(DefaultMaxRequestBytes),
		connect.WithCompressMinBytes(CompressMinBytes),
	}, echo.JSONCodecs()...), opts...)
}

// CompressMinBytes is the smallest answer the master compresses for a
// client that accepts gzip, as the sidecar does: pings, reports and
// assignments are a few dozen bytes, and gzipping each one was a quarter
// of a master's CPU under a thousand pinging nodes; listings and routing
// feed parts still compress.
const CompressMinBytes = 16 << 10

// RequestGuard bounds what the clients of a master's HTTP server can make
// it hold (reqlimit.Guard.Wrap): a body over lim.MaxRequestBytes is
// refused, the request bytes all calls hold at once are capped, and a
// body must arrive within lim.BodyReadTimeout. Refusals are
// resource_exhausted with the reason REQUEST_TOO_LARGE or MASTER_BUSY.
func RequestGuard(lim reqlimit.Limits) *reqlimit.Guard {
	return reqlimit.New(reqlimit.Config{
		Limits: lim, Server: "master", TooLarge: ErrRequestTooLarge, Busy: ErrBusy,
		TooLargeHint: "split the batch",
		Capped:       []string{masterv1connect.MasterFleetServiceWatchShardsProcedure, masterv1connect.MasterFleetServiceWatchAssignmentsProcedure},
		APIError: func(err error) *connect.Error {
			var ce *connect.Error
			errors.As(connectError(err), &ce)
			return ce
		},
	})
}

type service struct {
	masterv1connect.UnimplementedMasterServiceHandler
	serving func() (*Master, error)
}

// ConnectError maps a master error to a Connect error with a typed
// ErrorDetail (nil for nil).
func ConnectError(err error) error { return connectError(err) }

// connectError maps a master error to a Connect code and attaches an
// ErrorDetail so a client can rebuild the typed error.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, ErrNotPrimary), errors.Is(err, ErrFenced), errors.Is(err, ErrLogFailed):
		// Go to another master: the request may succeed there.
		code = connect.CodeUnavailable
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrObjectTooLarge), errors.Is(err, ErrDuplicateBatchObject):
		code = connect.CodeInvalidArgument
	case errors.Is(err, ErrObjectNotFound), errors.Is(err, ErrSegmentNotFound), errors.Is(err, ErrShardNotAssigned):
		code = connect.CodeNotFound
	case errors.Is(err, ErrObjectExists), errors.Is(err, ErrSegmentExists), errors.Is(err, ErrShardAssigned), errors.Is(err, ErrNodeHeld):
		code = connect.CodeAlreadyExists
	case errors.Is(err, ErrWrongClient):
		code = connect.CodePermissionDenied
	case errors.Is(err, ErrNoSpace), errors.Is(err, ErrQuotaExceeded), errors.Is(err, ErrRequestTooLarge), errors.Is(err, ErrBusy):
		code = connect.CodeResourceExhausted
	case errors.Is(err, ErrObjectLeased), errors.Is(err, ErrObjectNotComplete),
		errors.Is(err, ErrNoReadableReplica), errors.Is(err, ErrSegmentMismatch), errors.Is(err, ErrNotEnoughSegments),
		errors.Is(err, ErrClientOffline), errors.Is(err, ErrNodeNotEligible),
		errors.Is(err, ErrShardNotOpen), errors.Is(err, ErrShardMoving):
		code = connect.CodeFailedPrecondition
	}
	ce := connect.NewError(code, clippedError{err})
	d := &masterv1.ErrorDetail{Reason: Reason(err)}
	var me *Error
	if errors.As(err, &me) {
		d.Tenant, d.Key, d.SegmentId, d.ClientId = echo.Clip(me.Tenant), echo.Clip(me.Key), me.Segment, echo.Clip(me.Client)
		if d.Key == "" {
			d.Key = echo.Clip(me.Shard) // the detail has no shard field; fleet calls always sent it as the key
		}
	}
	if l, ok := LeaderOf(err); ok {
		d.LeaderNode, d.LeaderAddr, d.LeaderTerm = l.Node, l.Addr, l.Term
	}
	if detail, derr := connect.NewErrorDetail(d); derr == nil {
		ce.AddDetail(detail)
	}
	return ce
}

func itemError(err error) *masterv1.ItemError {
	if err == nil {
		return nil
	}
	return &masterv1.ItemError{Reason: Reason(err), Message: echo.ClipN(err.Error(), maxItemMessage)}
}

func replicasProto(reps []ReplicaInfo) []*masterv1.Replica {
	out := make([]*masterv1.Replica, len(reps))
	for i, r := range reps {
		out[i] = &masterv1.Replica{
			Id: r.ID, Kind: masterv1.ReplicaKind(r.Kind), Status: masterv1.ReplicaStatus(r.Status),
			SegmentId: r.SegmentID, SegmentName: r.SegmentName, Endpoint: r.Endpoint, Offset: r.Offset, Size: r.Size,
		}
	}
	return out
}

func putRequest(r *masterv1.PutStartRequest) PutRequest {
	return PutRequest{Client: r.GetClientId(), Tenant: r.GetTenant(), Key: r.GetKey(), Size: r.GetSize(), PutOptions: PutOptions{
		Replicas: int(r.GetReplicaNum()), HardPin: r.GetHardPin(), SoftPin: r.GetSoftPin(), Group: r.GetGroupId(), DataType: r.GetDataType(),
	}}
}

func segmentSpec(s *masterv1.Segment) SegmentSpec {
	return SegmentSpec{ID: s.GetId(), Name: s.GetName(), Base: s.GetBase(), Size: s.GetSize(), Endpoint: s.GetEndpoint()}
}

func (s *service) PutStart(ctx context.Context, req *connect.Request[masterv1.PutStartRequest]) (*connect.Response[masterv1.PutStartResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	reps, err := m.PutStart(ctx, putRequest(req.Msg))
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.PutStartResponse{Replicas: replicasProto(reps)}), nil
}

func (s *service) PutEnd(ctx context.Context, req *connect.Request[masterv1.PutEndRequest]) (*connect.Response[masterv1.PutEndResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := m.PutEnd(ctx, req.Msg.GetClientId(), req.Msg.GetTenant(), req.Msg.GetKey()); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.PutEndResponse{}), nil
}

func (s *service) PutRevoke(ctx context.Context, req *connect.Request[masterv1.PutRevokeRequest]) (*connect.Response[masterv1.PutRevokeResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := m.PutRevoke(ctx, req.Msg.GetClientId(), req.Msg.GetTenant(), req.Msg.GetKey()); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.PutRevokeResponse{}), nil
}

func (s *service) BatchPutStart(ctx context.Context, req *connect.Request[masterv1.BatchPutStartRequest]) (*connect.Response[masterv1.BatchPutStartResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := batchSize("BatchPutStart", len(req.Msg.GetItems())); err != nil {
		return nil, connectError(err)
	}
	reqs := make([]PutRequest, len(req.Msg.GetItems()))
	for i, it := range req.Msg.GetItems() {
		reqs[i] = putRequest(it)
	}
	res := m.BatchPutStart(ctx, reqs)
	out := &masterv1.BatchPutStartResponse{Results: make([]*masterv1.PutStartResult, len(res))}
	for i, r := range res {
		out.Results[i] = &masterv1.PutStartResult{Replicas: replicasProto(r.Replicas), Error: itemError(r.Err)}
	}
	return connect.NewResponse(out), nil
}

// MaxBatchItems bounds the items of one BatchPutStart, BatchPutEnd or
// BatchPutRevoke, so one call cannot make an answer of any size (400,000
// items made a 76 MB one) or hold the master's locks for long.
const MaxBatchItems = 10000

// batchSize refuses a batch over MaxBatchItems before
// any item is done.
func batchSize(op string, n int) error {
	if n > MaxBatchItems {
		return &Error{Op: op, Err: fmt.Errorf("%w: %d items in one batch, at most %d", ErrInvalidArgument, n, MaxBatchItems), Hint: "split the batch; nothing was done"}
	}
	return nil
}

func refs(items []*masterv1.PutEndRequest) []ObjectRef {
	out := make([]ObjectRef, len(items))
	for i, it := range items {
		out[i] = ObjectRef{Client: it.GetClientId(), Tenant: it.GetTenant(), Key: it.GetKey()}
	}
	return out
}

func itemErrors(errs []error) []*masterv1.ItemError {
	out := make([]*masterv1.ItemError, len(errs))
	for i, err := range errs {
		if out[i] = itemError(err); out[i] == nil {
			out[i] = &masterv1.ItemError{}
		}
	}
	return out
}

func (s *service) BatchPutEnd(ctx context.Context, req *connect.Request[masterv1.BatchPutEndRequest]) (*connect.Response[masterv1.BatchPutEndResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := batchSize("BatchPutEnd", len(req.Msg.GetItems())); err != nil {
		return nil, connectError(err)
	}
	errs := m.BatchPutEnd(ctx, refs(req.Msg.GetItems()))
	return connect.NewResponse(&masterv1.BatchPutEndResponse{Errors: itemErrors(errs)}), nil
}

func (s *service) BatchPutRevoke(ctx context.Context, req *connect.Request[masterv1.BatchPutRevokeRequest]) (*connect.Response[masterv1.BatchPutRevokeResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := batchSize("BatchPutRevoke", len(req.Msg.GetItems())); err != nil {
		return nil, connectError(err)
	}
	items := make([]*masterv1.PutEndRequest, len(req.Msg.GetItems()))
	for i, it := range req.Msg.GetItems() {
		items[i] = &masterv1.PutEndRequest{ClientId: it.GetClientId(), Tenant: it.GetTenant(), Key: it.GetKey()}
	}
	errs := m.BatchPutRevoke(ctx, refs(items))
	return connect.NewResponse(&masterv1.BatchPutRevokeResponse{Errors: itemErrors(errs)}), nil
}

func (s *service) GetReplicaList(ctx context.Context, req *connect.Request[masterv1.GetReplicaListRequest]) (*connect.Response[masterv1.GetReplicaListResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	reps, err := m.GetReplicaList(ctx, req.Msg.GetTenant(), req.Msg.GetKey())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.GetReplicaListResponse{Replicas: replicasProto(reps), LeaseTtlMs: durationMS(m.cfg.DefaultLeaseTTL)}), nil
}

func (s *service) Exist(ctx context.Context, req *connect.Request[masterv1.ExistRequest]) (*connect.Response[masterv1.ExistResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	ok, err := m.Exist(ctx, req.Msg.GetTenant(), req.Msg.GetKey())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.ExistResponse{Exists: ok}), nil
}

func (s *service) Remove(ctx context.Context, req *connect.Request[masterv1.RemoveRequest]) (*connect.Response[masterv1.RemoveResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := m.Remove(ctx, req.Msg.GetTenant(), req.Msg.GetKey(), req.Msg.GetForce()); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.RemoveResponse{}), nil
}

func (s *service) MountSegment(ctx context.Context, req *connect.Request[masterv1.MountSegmentRequest]) (*connect.Response[masterv1.MountSegmentResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := m.MountSegment(ctx, req.Msg.GetClientId(), segmentSpec(req.Msg.GetSegment())); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.MountSegmentResponse{}), nil
}

func (s *service) UnmountSegment(ctx context.Context, req *connect.Request[masterv1.UnmountSegmentRequest]) (*connect.Response[masterv1.UnmountSegmentResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	res, err := m.UnmountSegment(ctx, req.Msg.GetClientId(), req.Msg.GetSegmentId())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.UnmountSegmentResponse{RemovedReplicas: res.Replicas, RemovedObjects: res.Objects}), nil
}

func (s *service) ReMountSegment(ctx context.Context, req *connect.Request[masterv1.ReMountSegmentRequest]) (*connect.Response[masterv1.ReMountSegmentResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	specs := make([]SegmentSpec, len(req.Msg.GetSegments()))
	for i, sg := range req.Msg.GetSegments() {
		specs[i] = segmentSpec(sg)
	}
	res, err := m.ReMountSegment(ctx, req.Msg.GetClientId(), specs)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.ReMountSegmentResponse{
		MatchedObjects: uint64(res.MatchedObjects), RecoveryTtlMs: durationMS(res.RecoveryTTL), VisibleTtlMs: durationMS(res.VisibleTTL),
	}), nil
}

func (s *service) Ping(ctx context.Context, req *connect.Request[masterv1.PingRequest]) (*connect.Response[masterv1.PingResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	st, err := m.Ping(ctx, req.Msg.GetClientId())
	if err != nil {
		return nil, connectError(err)
	}
	out := masterv1.PingStatus_PING_STATUS_OK
	if st == PingNeedRemount {
		out = masterv1.PingStatus_PING_STATUS_NEED_REMOUNT
	}
	return connect.NewResponse(&masterv1.PingResponse{Status: out}), nil
}

func (s *service) Stats(context.Context, *connect.Request[masterv1.StatsRequest]) (*connect.Response[masterv1.StatsResponse], error) {
	m, err := s.serving()
	if m == nil {
		if err == nil {
			err = ErrNotPrimary
		}
		return nil, connectError(err)
	}
	st := m.Stats()
	out := &masterv1.StatsResponse{
		Objects: st.Objects, Segments: st.Segments, SegmentsAwaitingRemount: st.SegmentsAwaitingRemount,
		CapacityBytes: st.Capacity, UsedBytes: st.Used, EvictedObjects: st.EvictedObjects,
		SkippedUnreadableReplicas: st.SkippedUnreadableReplicas, Remounts: st.Remounts,
		LastRemountMatchedObjects: uint64(st.LastRemount.MatchedObjects),
		LastRemountAssignNs:       uint64(st.LastRemount.AssignDuration),
		LastRemountTotalNs:        uint64(st.LastRemount.TotalDuration),
		LastRemountVisibleTtlMs:   durationMS(st.LastRemount.VisibleTTL),
	}
	for _, t := range st.Tenants {
		out.Tenants = append(out.Tenants, &masterv1.TenantStats{Tenant: t.Tenant, Objects: t.Objects, UsedBytes: t.Used, QuotaBytes: t.Quota})
	}
	return connect.NewResponse(out), nil
}
