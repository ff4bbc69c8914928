package master

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/tick"
)

// NewFleetHandlerFunc serves the fleet API (sidecar nodes and the shard
// assignment table) of whichever master serving returns for each request;
// an error refuses the request with it, as for the master API.
func NewFleetHandlerFunc(serving func() (*Master, error), opts ...connect.HandlerOption) (string, http.Handler) {
	return masterv1connect.NewMasterFleetServiceHandler(&fleetService{serving: serving}, HandlerOptions(opts...)...)
}

type fleetService struct {
	masterv1connect.UnimplementedMasterFleetServiceHandler
	serving func() (*Master, error)
}

func (s *fleetService) RegisterNode(ctx context.Context, req *connect.Request[masterv1.RegisterNodeRequest]) (*connect.Response[masterv1.RegisterNodeResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	r := req.Msg
	res, err := m.RegisterNode(ctx, NodeRegistration{Name: r.GetNode(), Addr: r.GetAddr(), AppAddr: r.GetAppAddr(), Store: r.GetStore(), Fencing: r.GetFencing(), Session: r.GetSession()})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.RegisterNodeResponse{ClientId: res.ClientID, Incarnation: res.Incarnation,
		ActiveTtlMs: durationMS(res.ActiveTTL), SuspicionTtlMs: durationMS(res.SuspicionTTL), PingIntervalMs: durationMS(res.PingInterval)}), nil
}

func (s *fleetService) WatchAssignments(ctx context.Context, req *connect.Request[masterv1.WatchAssignmentsRequest], st *connect.ServerStream[masterv1.WatchAssignmentsResponse]) error {
	m, err := s.serving()
	if err != nil {
		return connectError(err)
	}
	err = m.WatchAssignments(ctx, req.Msg.GetNode(), req.Msg.GetSession(), func(list []*NodeAssignment, ver uint64) error {
		// A master that stopped serving (fenced, failed) tells nothing
		// more: the node finds the current master by its pings.
		if _, err := s.serving(); err != nil {
			return err
		}
		return st.Send(&masterv1.WatchAssignmentsResponse{Assignments: list, Version: ver})
	})
	return connectError(err)
}

func (s *fleetService) WatchShards(ctx context.Context, req *connect.Request[masterv1.WatchShardsRequest], st *connect.ServerStream[masterv1.WatchShardsResponse]) error {
	m, err := s.serving()
	if err != nil {
		return connectError(err)
	}
	if len(req.Msg.GetShards()) > maxWatchShards {
		return connectError(&Error{Op: "WatchShards", Err: fmt.Errorf("%w: %d shards named, at most %d (name none to follow them all)", ErrInvalidArgument, len(req.Msg.GetShards()), maxWatchShards)})
	}
	// The feed ends once this master stops serving (it stepped down, or
	// its leadership lapsed): its table is no longer the truth, and the
	// client finds the primary again.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		tick.Every(ctx, 250*time.Millisecond, nil, func() {
			if _, err := s.serving(); err != nil {
				cancel(err) // ends the loop too
			}
		})
	}()
	err = m.WatchShards(ctx, req.Msg.GetShards(), func(routes []*Route, snapshot bool) error {
		return sendRoutes(routes, snapshot, maxFeedMessage, st.Send)
	})
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return connectError(cause)
	}
	return connectError(err)
}

// maxWatchShards bounds the shards one routing feed names.
const maxWatchShards = 100000

// maxFeedMessage bounds one message of the routing feed: a table of
// 100,000 shards is about 20 MiB, and gRPC clients refuse messages over
// 4 MiB unless told otherwise.
const maxFeedMessage = 1 << 20

// sendRoutes sends routes in messages of at most limit bytes of routes
// each (a route larger than limit alone goes in a message of its own):
// the first carries snapshot, every one but the last more.
func sendRoutes(routes []*Route, snapshot bool, limit int, send func(*masterv1.WatchShardsResponse) error) error {
	msg := &masterv1.WatchShardsResponse{Snapshot: snapshot}
	size := 0
	for _, r := range routes {
		n := proto.Size(r) + 8 // the field's tag and length
		if len(msg.Routes) > 0 && size+n > limit {
			msg.More = true
			if err := send(msg); err != nil {
				return err
			}
			msg, size = &masterv1.WatchShardsResponse{}, 0
		}
		msg.Routes = append(msg.Routes, r)
		size += n
	}
	return send(msg)
}

func (s *fleetService) ReportShard(ctx context.Context, req *connect.Request[masterv1.ReportShardRequest]) (*connect.Response[masterv1.ReportShardResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	r := req.Msg
	err = m.ReportShard(ctx, ShardReport{Node: r.GetNode(), Session: r.GetSession(), Shard: r.GetShard(), Allocation: r.GetAllocation(),
		Term: r.GetTerm(), Kind: r.GetReport(), Reason: r.GetReason(), Err: r.GetError(), SuccessorTerm: r.GetSuccessorTerm(), HandoffContext: r.GetHandoffContext()})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.ReportShardResponse{}), nil
}

func (s *fleetService) AssignShard(ctx context.Context, req *connect.Request[masterv1.AssignShardRequest]) (*connect.Response[masterv1.AssignShardResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	r := req.Msg
	info, err := m.AssignShard(ctx, AssignRequest{Shard: r.GetShard(), Node: r.GetNode(), Term: r.GetTerm(), Settings: r.GetSettings(),
		AutoRestore: r.GetAutoRestore(), TakeoverAtSuspected: r.GetTakeover() == masterv1.TakeoverPoint_TAKEOVER_POINT_SUSPECTED, Warm: r.GetWarm()})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.AssignShardResponse{Shard: shardInfoProto(info)}), nil
}

func (s *fleetService) UnassignShard(ctx context.Context, req *connect.Request[masterv1.UnassignShardRequest]) (*connect.Response[masterv1.UnassignShardResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	if err := m.UnassignShard(ctx, req.Msg.GetShard()); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.UnassignShardResponse{}), nil
}

func (s *fleetService) DrainNode(ctx context.Context, req *connect.Request[masterv1.DrainNodeRequest]) (*connect.Response[masterv1.DrainNodeResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	moving, waiting, err := m.DrainNode(ctx, req.Msg.GetNode(), req.Msg.GetUndo())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.DrainNodeResponse{Moving: uint32(moving), Waiting: uint32(waiting)}), nil
}

func (s *fleetService) MoveShard(ctx context.Context, req *connect.Request[masterv1.MoveShardRequest]) (*connect.Response[masterv1.MoveShardResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	info, err := m.MoveShard(ctx, req.Msg.GetShard(), req.Msg.GetNode())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&masterv1.MoveShardResponse{Shard: shardInfoProto(info)}), nil
}

func (s *fleetService) PlanRebalance(context.Context, *connect.Request[masterv1.PlanRebalanceRequest]) (*connect.Response[masterv1.PlanRebalanceResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	plan := m.PlanRebalance()
	out := &masterv1.PlanRebalanceResponse{}
	for _, mv := range plan.Moves {
		out.Moves = append(out.Moves, &masterv1.ShardMove{Shard: mv.Shard, From: mv.From, To: mv.To})
	}
	for name, before := range plan.Before {
		out.Nodes = append(out.Nodes, &masterv1.NodeLoad{Node: name, Before: uint32(before), After: uint32(plan.After[name])})
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].GetNode() < out.Nodes[j].GetNode() })
	return connect.NewResponse(out), nil
}

func (s *fleetService) ListNodes(context.Context, *connect.Request[masterv1.ListNodesRequest]) (*connect.Response[masterv1.ListNodesResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	out := &masterv1.ListNodesResponse{}
	for _, n := range m.Nodes() {
		age := int64(-1)
		if n.SinceSignal >= 0 {
			age = n.SinceSignal.Milliseconds()
		}
		state, note := n.State.String(), n.Offboarding
		if n.State == 0 {
			// Known from the table, with no live incarnation: offboarded
			// (or not registered since this master started).
			state, note = "offline", "no live incarnation: offboarded, or not registered since this master started"
		}
		out.Nodes = append(out.Nodes, &masterv1.NodeInfo{Name: n.Name, Addr: n.Addr, State: state, LastPingAgeMs: age,
			Incarnation: n.Incarnation, Draining: n.Draining, Shards: uint32(n.Shards), Store: n.Store, Fencing: n.Fencing, Offboarding: note})
	}
	return connect.NewResponse(out), nil
}

func (s *fleetService) ListShards(context.Context, *connect.Request[masterv1.ListShardsRequest]) (*connect.Response[masterv1.ListShardsResponse], error) {
	m, err := s.serving()
	if err != nil {
		return nil, connectError(err)
	}
	out := &masterv1.ListShardsResponse{}
	for _, si := range m.Shards() {
		out.Shards = append(out.Shards, shardInfoProto(si))
	}
	return connect.NewResponse(out), nil
}

func shardInfoProto(si ShardInfo) *masterv1.ShardInfo {
	return &masterv1.ShardInfo{Assignment: si.Assignment, Addr: si.Addr, State: si.State, Reason: si.Reason,
		OwnerState: si.OwnerState.String(), Durable: si.Durable}
}
