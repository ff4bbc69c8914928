package ha

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/master"
)

// Mount serves the node on mux: the master API and the fleet API (answered
// only while primary; a standby, opening, fenced or failed master refuses with a
// typed error saying so), the HA API (promote, status, snapshot), /healthz
// (the process is up) and /readyz (see Ready).
func (n *Node) Mount(mux *http.ServeMux, opts ...connect.HandlerOption) {
	path, h := master.NewHandlerFunc(n.Serving, opts...)
	mux.Handle(path, h)
	path, h = master.NewFleetHandlerFunc(n.Serving, opts...)
	mux.Handle(path, h)
	path, h = masterv1connect.NewMasterHAServiceHandler(&haService{n: n}, master.HandlerOptions(opts...)...)
	mux.Handle(path, h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := n.Ready(); err != nil {
			http.Error(w, fmt.Sprintf("%v; %v", err, n.Leader()), http.StatusServiceUnavailable)
			return
		}
		st := n.Status()
		_, _ = fmt.Fprintf(w, "ready %s; %v\n", st.Role, st.Leader)
	})
}

type haService struct {
	masterv1connect.UnimplementedMasterHAServiceHandler
	n *Node
}

func haError(err error) error {
	if ce := master.ConnectError(err); ce != nil {
		return ce
	}
	return nil
}

func (s *haService) Promote(ctx context.Context, _ *connect.Request[masterv1.PromoteRequest]) (*connect.Response[masterv1.PromoteResponse], error) {
	r, err := s.n.Promote(ctx)
	if err != nil {
		return nil, haError(err)
	}
	return connect.NewResponse(&masterv1.PromoteResponse{
		Term: r.Term, RestoreGen: r.RestoreGen, ReplayedGens: r.ReplayedGens, DurationMs: uint64(r.Duration.Milliseconds()),
		Objects: r.Objects, SegmentsAwaitingRemount: r.SegmentsAwaitingRemount,
	}), nil
}

func (s *haService) Status(context.Context, *connect.Request[masterv1.StatusRequest]) (*connect.Response[masterv1.StatusResponse], error) {
	st := s.n.Status()
	out := &masterv1.StatusResponse{
		Role: masterv1.MasterRole(st.Role), Cluster: st.Cluster, Shard: st.Shard, Term: st.Term,
		AppliedGen: st.Position.Gen, NextSeqNo: st.Position.NextSeqNo, LagEntries: st.LagEntries,
		LagMs: uint64(st.Lag.Milliseconds()), LastSnapshot: st.LastSnapshot, LastSnapshotGen: st.SnapshotGen,
	}
	if st.Err != nil {
		out.Error = st.Err.Error()
	}
	out.LeaderNode, out.LeaderAddr, out.LeaderTerm = st.Leader.Node, st.Leader.Addr, st.Leader.Term
	out.Node, out.Addr = st.Node, st.Addr
	out.ElectionTimeoutMs = uint64(st.ElectionTimeout.Milliseconds())
	if st.Role == RoleStandby && st.ElectionTimeout > 0 {
		out.ElectionInMs = uint64(max(st.ElectionIn, 0).Milliseconds())
	}
	return connect.NewResponse(out), nil
}

func (s *haService) Leader(context.Context, *connect.Request[masterv1.LeaderRequest]) (*connect.Response[masterv1.LeaderResponse], error) {
	st := s.n.Status()
	return connect.NewResponse(&masterv1.LeaderResponse{
		Role: masterv1.MasterRole(st.Role), Node: st.Node, Addr: st.Addr,
		LeaderNode: st.Leader.Node, LeaderAddr: st.Leader.Addr, LeaderTerm: st.Leader.Term,
	}), nil
}

func (s *haService) Snapshot(ctx context.Context, _ *connect.Request[masterv1.SnapshotRequest]) (*connect.Response[masterv1.SnapshotResponse], error) {
	r, err := s.n.Snapshot(ctx)
	if err != nil {
		return nil, haError(err)
	}
	return connect.NewResponse(&masterv1.SnapshotResponse{
		Key: r.Key, Gen: r.Gen, Objects: uint64(r.Objects), Bytes: uint64(r.Bytes),
		DurationMs: uint64(r.Duration.Milliseconds()), PauseUs: uint64(r.Pause.Microseconds()),
	}), nil
}
