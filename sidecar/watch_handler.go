package sidecar

import (
	"context"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

func (sv *service) Watch(ctx context.Context, req *connect.Request[sidecarv1.WatchRequest], stream *connect.ServerStream[sidecarv1.WatchResponse]) error {
	err := sv.s.Watch(ctx, req.Msg.GetShards(), func(ev WatchEvent) error {
		// A large generation or file chunk goes out as several events of
		// its kind, each message under the 4 MiB stock clients take.
		switch {
		case ev.Ops != nil:
			for _, b := range splitBatch(*ev.Ops) {
				part := ev
				part.Ops = &b
				if err := stream.Send(watchProto(part)); err != nil {
					return err
				}
			}
			return nil
		case ev.File != nil:
			for _, c := range splitChunk(*ev.File) {
				part := ev
				part.File = &c
				if err := stream.Send(watchProto(part)); err != nil {
					return err
				}
			}
			return nil
		}
		return stream.Send(watchProto(ev))
	})
	if err != nil {
		return sv.fail("Watch", "", err)
	}
	return nil
}

func watchProto(ev WatchEvent) *sidecarv1.WatchResponse {
	out := &sidecarv1.WatchResponse{Kind: sidecarv1.WatchEventKind(ev.Kind), Shard: ev.Shard, Term: ev.Term, Allocation: ev.Allocation,
		Current: ev.Current, Reason: ev.Reason, Error: ev.Err, SuccessorTerm: ev.SuccessorTerm,
		CheckpointGen: ev.CheckpointGen, BacklogBytes: ev.BacklogBytes, BacklogGens: ev.BacklogGens}
	if p := ev.Progress; p != nil {
		out.Progress = &sidecarv1.OpenProgress{Step: p.Step, Done: p.Done, Total: p.Total, Bytes: p.Bytes}
	}
	if f := ev.File; f != nil {
		out.CheckpointFile = &sidecarv1.CheckpointFile{Name: f.Name, Offset: f.Offset, Data: f.Data, Last: f.Last}
	}
	if ev.Ops != nil {
		out.Ops = batchProto(*ev.Ops)
	}
	if st := ev.Status; st != nil {
		out.Status = statusProto(*st)
		r := st.Restore
		out.RestorePoint = &sidecarv1.RestorePoint{Term: r.Term, Gen: r.Gen, NextSeqNo: r.NextSeqNo, CheckpointGen: r.CheckpointGen}
	}
	return out
}
