// Package client is the Go client of the master's API. It returns the
// master package's types, and its errors match the master's sentinel errors
// with errors.Is, as local calls would.
package client

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/master"
)

// Client calls one master.
type Client struct {
	rpc masterv1connect.MasterServiceClient
}

// New returns a client for the master at baseURL (for example
// "http://127.0.0.1:7500"). A nil httpClient means http.DefaultClient; pass
// connect.WithGRPC() in opts to speak gRPC (over an HTTP/2 client).
func New(httpClient connect.HTTPClient, baseURL string, opts ...connect.ClientOption) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{rpc: masterv1connect.NewMasterServiceClient(httpClient, baseURL, opts...)}
}

// RemoteError is a failure the master reported. errors.Is matches the
// master's sentinel error (master.ErrObjectNotFound, ...) and the underlying
// *connect.Error.
type RemoteError struct {
	Op      string
	Detail  *masterv1.ErrorDetail
	cause   error // a master.Err* sentinel, or nil if the reason is unknown
	connect *connect.Error
}

func (e *RemoteError) Error() string { return "master client " + e.Op + ": " + e.connect.Message() }

// Unwrap exposes both the sentinel and the transport error.
func (e *RemoteError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.connect}
	}
	return []error{e.cause, e.connect}
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	re := &RemoteError{Op: op, connect: ce}
	for _, d := range ce.Details() {
		msg, derr := d.Value()
		if derr != nil {
			continue
		}
		if ed, ok := msg.(*masterv1.ErrorDetail); ok {
			re.Detail = ed
			re.cause = master.ErrorForReason(ed.GetReason())
			if re.cause != nil && ed.GetLeaderTerm() > 0 {
				// master.LeaderOf finds where the primary is.
				re.cause = &master.RedirectError{Err: re.cause, Leader: master.Leader{Node: ed.GetLeaderNode(), Addr: ed.GetLeaderAddr(), Term: ed.GetLeaderTerm()}}
			}
		}
	}
	return re
}

func itemErr(op string, e *masterv1.ItemError) error {
	if e == nil || (e.GetReason() == "" && e.GetMessage() == "") {
		return nil
	}
	return &ItemError{Op: op, Reason: e.GetReason(), Message: e.GetMessage(), cause: master.ErrorForReason(e.GetReason())}
}

// ItemError is the failure of one item of a batch call.
type ItemError struct {
	Op      string
	Reason  string
	Message string
	cause   error
}

func (e *ItemError) Error() string { return e.Message }
func (e *ItemError) Unwrap() error { return e.cause }

func replicas(rs []*masterv1.Replica) []master.ReplicaInfo {
	out := make([]master.ReplicaInfo, len(rs))
	for i, r := range rs {
		out[i] = master.ReplicaInfo{
			ID: r.GetId(), Kind: master.ReplicaKind(r.GetKind()), Status: master.ReplicaStatus(r.GetStatus()),
			SegmentID: r.GetSegmentId(), SegmentName: r.GetSegmentName(), Endpoint: r.GetEndpoint(), Offset: r.GetOffset(), Size: r.GetSize(),
		}
	}
	return out
}

func putProto(r master.PutRequest) *masterv1.PutStartRequest {
	return &masterv1.PutStartRequest{
		ClientId: r.Client, Tenant: r.Tenant, Key: r.Key, Size: r.Size, ReplicaNum: uint32(r.Replicas),
		HardPin: r.HardPin, SoftPin: r.SoftPin, GroupId: r.Group, DataType: r.DataType,
	}
}

// PutStart allocates replicas for a new object.
func (c *Client) PutStart(ctx context.Context, req master.PutRequest) ([]master.ReplicaInfo, error) {
	res, err := c.rpc.PutStart(ctx, connect.NewRequest(putProto(req)))
	if err != nil {
		return nil, wrap("PutStart", err)
	}
	return replicas(res.Msg.GetReplicas()), nil
}

// PutEnd completes a put.
func (c *Client) PutEnd(ctx context.Context, clientID, tenant, key string) error {
	_, err := c.rpc.PutEnd(ctx, connect.NewRequest(&masterv1.PutEndRequest{ClientId: clientID, Tenant: tenant, Key: key}))
	return wrap("PutEnd", err)
}

// PutRevoke abandons a put.
func (c *Client) PutRevoke(ctx context.Context, clientID, tenant, key string) error {
	_, err := c.rpc.PutRevoke(ctx, connect.NewRequest(&masterv1.PutRevokeRequest{ClientId: clientID, Tenant: tenant, Key: key}))
	return wrap("PutRevoke", err)
}

// BatchPutStart starts several puts; items fail independently.
func (c *Client) BatchPutStart(ctx context.Context, reqs []master.PutRequest) ([]master.PutStartResult, error) {
	in := &masterv1.BatchPutStartRequest{Items: make([]*masterv1.PutStartRequest, len(reqs))}
	for i, r := range reqs {
		in.Items[i] = putProto(r)
	}
	res, err := c.rpc.BatchPutStart(ctx, connect.NewRequest(in))
	if err != nil {
		return nil, wrap("BatchPutStart", err)
	}
	out := make([]master.PutStartResult, len(res.Msg.GetResults()))
	for i, r := range res.Msg.GetResults() {
		out[i] = master.PutStartResult{Replicas: replicas(r.GetReplicas()), Err: itemErr("BatchPutStart", r.GetError())}
	}
	return out, nil
}

func endItems(refs []master.ObjectRef) []*masterv1.PutEndRequest {
	out := make([]*masterv1.PutEndRequest, len(refs))
	for i, r := range refs {
		out[i] = &masterv1.PutEndRequest{ClientId: r.Client, Tenant: r.Tenant, Key: r.Key}
	}
	return out
}

func itemErrs(op string, es []*masterv1.ItemError) []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = itemErr(op, e)
	}
	return out
}

// BatchPutEnd completes several puts; errs[i] is nil when item i succeeded.
func (c *Client) BatchPutEnd(ctx context.Context, refs []master.ObjectRef) ([]error, error) {
	res, err := c.rpc.BatchPutEnd(ctx, connect.NewRequest(&masterv1.BatchPutEndRequest{Items: endItems(refs)}))
	if err != nil {
		return nil, wrap("BatchPutEnd", err)
	}
	return itemErrs("BatchPutEnd", res.Msg.GetErrors()), nil
}

// BatchPutRevoke abandons several puts.
func (c *Client) BatchPutRevoke(ctx context.Context, refs []master.ObjectRef) ([]error, error) {
	items := make([]*masterv1.PutRevokeRequest, len(refs))
	for i, r := range refs {
		items[i] = &masterv1.PutRevokeRequest{ClientId: r.Client, Tenant: r.Tenant, Key: r.Key}
	}
	res, err := c.rpc.BatchPutRevoke(ctx, connect.NewRequest(&masterv1.BatchPutRevokeRequest{Items: items}))
	if err != nil {
		return nil, wrap("BatchPutRevoke", err)
	}
	return itemErrs("BatchPutRevoke", res.Msg.GetErrors()), nil
}

// GetReplicaList leases the object and returns its readable replicas and
// the lease TTL granted.
func (c *Client) GetReplicaList(ctx context.Context, tenant, key string) ([]master.ReplicaInfo, time.Duration, error) {
	res, err := c.rpc.GetReplicaList(ctx, connect.NewRequest(&masterv1.GetReplicaListRequest{Tenant: tenant, Key: key}))
	if err != nil {
		return nil, 0, wrap("GetReplicaList", err)
	}
	return replicas(res.Msg.GetReplicas()), time.Duration(res.Msg.GetLeaseTtlMs()) * time.Millisecond, nil
}

// Exist reports whether the object exists (and leases it if so).
func (c *Client) Exist(ctx context.Context, tenant, key string) (bool, error) {
	res, err := c.rpc.Exist(ctx, connect.NewRequest(&masterv1.ExistRequest{Tenant: tenant, Key: key}))
	if err != nil {
		return false, wrap("Exist", err)
	}
	return res.Msg.GetExists(), nil
}

// Remove deletes an object; force overrides a lease.
func (c *Client) Remove(ctx context.Context, tenant, key string, force bool) error {
	_, err := c.rpc.Remove(ctx, connect.NewRequest(&masterv1.RemoveRequest{Tenant: tenant, Key: key, Force: force}))
	return wrap("Remove", err)
}

func segProto(s master.SegmentSpec) *masterv1.Segment {
	return &masterv1.Segment{Id: s.ID, Name: s.Name, Base: s.Base, Size: s.Size, Endpoint: s.Endpoint}
}

// MountSegment adds a segment.
func (c *Client) MountSegment(ctx context.Context, clientID string, s master.SegmentSpec) error {
	_, err := c.rpc.MountSegment(ctx, connect.NewRequest(&masterv1.MountSegmentRequest{ClientId: clientID, Segment: segProto(s)}))
	return wrap("MountSegment", err)
}

// UnmountSegment removes a segment and its replicas.
func (c *Client) UnmountSegment(ctx context.Context, clientID string, segmentID uint64) (master.UnmountResult, error) {
	res, err := c.rpc.UnmountSegment(ctx, connect.NewRequest(&masterv1.UnmountSegmentRequest{ClientId: clientID, SegmentId: segmentID}))
	if err != nil {
		return master.UnmountResult{}, wrap("UnmountSegment", err)
	}
	return master.UnmountResult{Replicas: res.Msg.GetRemovedReplicas(), Objects: res.Msg.GetRemovedObjects()}, nil
}

// RemountResult is what ReMountSegment reports over the wire.
type RemountResult struct {
	MatchedObjects uint64
	RecoveryTTL    time.Duration
	VisibleTTL     time.Duration
}

// ReMountSegment revives segments known from before a failover.
func (c *Client) ReMountSegment(ctx context.Context, clientID string, specs []master.SegmentSpec) (RemountResult, error) {
	in := &masterv1.ReMountSegmentRequest{ClientId: clientID}
	for _, s := range specs {
		in.Segments = append(in.Segments, segProto(s))
	}
	res, err := c.rpc.ReMountSegment(ctx, connect.NewRequest(in))
	if err != nil {
		return RemountResult{}, wrap("ReMountSegment", err)
	}
	return RemountResult{
		MatchedObjects: res.Msg.GetMatchedObjects(),
		RecoveryTTL:    time.Duration(res.Msg.GetRecoveryTtlMs()) * time.Millisecond,
		VisibleTTL:     time.Duration(res.Msg.GetVisibleTtlMs()) * time.Millisecond,
	}, nil
}

// Ping sends a liveness signal.
func (c *Client) Ping(ctx context.Context, clientID string) (master.PingStatus, error) {
	res, err := c.rpc.Ping(ctx, connect.NewRequest(&masterv1.PingRequest{ClientId: clientID}))
	if err != nil {
		return 0, wrap("Ping", err)
	}
	if res.Msg.GetStatus() == masterv1.PingStatus_PING_STATUS_NEED_REMOUNT {
		return master.PingNeedRemount, nil
	}
	return master.PingOK, nil
}

// Stats returns the master's admin statistics.
func (c *Client) Stats(ctx context.Context) (*masterv1.StatsResponse, error) {
	res, err := c.rpc.Stats(ctx, connect.NewRequest(&masterv1.StatsRequest{}))
	if err != nil {
		return nil, wrap("Stats", err)
	}
	return res.Msg, nil
}
