package sidecar

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/grpcprobe"
	"github.com/shardfence/shardfence/internal/httpauth"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// HandlerOptions configure the HTTP side of a server.
type HandlerOptions struct {
	// AuthToken, when set, is the bearer token every API, reflection and
	// /metrics request must carry; /healthz, /readyz and the gRPC health
	// checks stay open for probes.
	AuthToken string
	// Metrics serves /metrics; nil serves none.
	Metrics http.Handler
	// Pprof serves Go's profiler at /debug/pprof/ (behind the token).
	Pprof bool
}

// Handler serves the API (ConnectRPC: gRPC, gRPC-Web, JSON), the gRPC
// health checking protocol and server reflection, /metrics, /healthz and
// /readyz.
func (s *Server) Handler(o HandlerOptions) http.Handler {
	mux := http.NewServeMux()
	opts := append([]connect.HandlerOption{
		connect.WithReadMaxBytes(s.opts.Limits.MaxRequestBytes),
		// Acks and statuses are a few dozen bytes: gzip would cost more
		// CPU than the bytes it saves on loopback. Large read batches
		// still compress for clients that ask.
		connect.WithCompressMinBytes(16 << 10),
		// A JSON body's decode error repeats a bounded part of it.
	}, echo.JSONCodecs()...)
	path, h := sidecarv1connect.NewSidecarServiceHandler(&service{s: s}, opts...)
	guard := s.requestGuard()
	mux.Handle(path, guard.Wrap(h))
	// The gRPC ecosystem's endpoints: health checking (open to probes, as
	// /healthz and /readyz are) and server reflection.
	grpcprobe.Mount(mux, healthChecker{s}, guard.Wrap, sidecarv1connect.SidecarServiceName)
	if o.Metrics != nil {
		mux.Handle("/metrics", o.Metrics)
	}
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", s.serveReadyz)
	if o.AuthToken == "" {
		return mux
	}
	return httpauth.RequireBearer(o.AuthToken,
		"missing or wrong bearer token: send the sidecar's token as Authorization: Bearer TOKEN (the shardfence client commands read it from --auth-token-file or SHARDFENCE_AUTH_TOKEN_FILE)",
		mux, "/healthz", "/readyz", grpcprobe.CheckPath, grpcprobe.WatchPath)
}

type service struct {
	sidecarv1connect.UnimplementedSidecarServiceHandler
	s *Server
}

func (sv *service) fail(method, shard string, err error) error {
	ce := connectError(shard, err)
	sv.s.metrics.errors.WithLabelValues(method, reasonLabel(err)).Inc()
	return ce
}

// appendResponse is an ack in the API.
func appendResponse(ack translog.Ack) *sidecarv1.AppendResponse {
	return &sidecarv1.AppendResponse{Term: ack.Term, Gen: ack.Gen, FirstSeqNo: ack.FirstSeqNo, Count: int64(ack.Count),
		FencingObserved: clipN(ack.FencingObserved, maxErrorMessage)}
}

func settingsProto(s Settings) *sidecarv1.ShardSettings {
	p := &sidecarv1.ShardSettings{
		FencingDisabled: s.FencingDisabled, Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC, AckOrder: sidecarv1.AckOrder_ACK_ORDER_CONCURRENT,
		InlineLimitBytes: int64(s.InlineLimit), MaxSyncBytes: s.MaxSyncBytes, MaxInFlightBytes: s.MaxInFlightBytes,
		MaxPipeline: int32(s.MaxPipeline), MaxGatherDelayUs: gatherUs(s.MaxGatherDelay),
		LeaseIntervalMs: s.LeaseInterval.Milliseconds(), FreshnessIntervalMs: s.FreshnessInterval.Milliseconds(), RetentionGens: s.RetentionGens,
	}
	switch s.Mode {
	case translog.Lease:
		p.Mode = sidecarv1.FencingMode_FENCING_MODE_LEASE
	case translog.CreateOnly:
		p.Mode = sidecarv1.FencingMode_FENCING_MODE_CREATE_ONLY
	case translog.Observe:
		p.Mode = sidecarv1.FencingMode_FENCING_MODE_OBSERVE
	}
	if s.AckOrder == translog.Sequenced {
		p.AckOrder = sidecarv1.AckOrder_ACK_ORDER_SEQUENCED
	}
	return p
}

// gatherUs is the gather delay in the API's unit; -1 when disabled.
func gatherUs(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Microseconds()
}

func statusProto(st ShardStatus) *sidecarv1.ShardStatus {
	age := int64(-1)
	if st.LastCASAge >= 0 {
		age = st.LastCASAge.Milliseconds()
	}
	ms := func(d time.Duration) int64 {
		if d < 0 {
			return -1
		}
		return d.Milliseconds()
	}
	return &sidecarv1.ShardStatus{
		Shard: st.Shard, Term: st.Term, AllocationId: st.Allocation, Owner: st.Owner, Gen: st.Gen, NextSeqNo: st.NextSeqNo,
		LastCasAgeMs: age, Fenced: st.Fenced, SuccessorTerm: st.SuccessorTerm, State: st.State.String(), Error: st.Err,
		Settings: settingsProto(st.Settings), Syncs: st.Stats.Syncs, Ops: st.Stats.Ops, Bytes: st.Stats.Bytes,
		StoreHealth: st.StoreHealth, LastStoreError: clipN(st.LastStoreError, maxErrorMessage), LastStoreErrorAgeMs: ms(st.LastStoreErrorAge),
		RetryingMs: st.RetryingFor.Milliseconds(), LastSyncAgeMs: ms(st.LastSyncAge), StoreRetries: st.StoreRetries,
		Locality: st.Warm.Locality.String(), Replaying: st.Replaying,
		CheckpointBytesLocal: st.Warm.BytesLocal, CheckpointBytesTotal: st.Warm.BytesTotal,
		CacheHits: st.Warm.Hits, CacheMisses: st.Warm.Misses, Fetches: st.Warm.Fetches,
		FetchP50Us: st.Warm.FetchP50.Microseconds(), FetchP99Us: st.Warm.FetchP99.Microseconds(),
		WarmError:            clipN(st.Warm.Err, maxErrorMessage),
		FencingObservedSyncs: st.Stats.FencingObserved, FencingObserved: clipN(st.FencingObserved, maxErrorMessage),
		FenceChecks:        st.Stats.FenceChecks,
		ReplayBacklogBytes: st.ReplayBacklogBytes, ReplayBacklogGens: st.ReplayBacklogGens,
		CheckpointGen: st.CheckpointGen, CheckpointAgeMs: ms(st.CheckpointAge), CheckpointRequestedGen: st.CheckpointRequestedGen,
	}
}

func batchProto(b translog.Batch) *sidecarv1.OpBatch {
	return &sidecarv1.OpBatch{Term: b.Term, Gen: b.Gen, FirstSeqNo: b.FirstSeqNo, Ops: b.Ops}
}

// Stock gRPC clients refuse a message over 4 MiB unless told otherwise, and
// a generation may hold up to max sync bytes (16 MiB by default): every
// message the sidecar sends carries at most maxMessageOps bytes of ops
// and maxMessageData bytes of a file, well under 4 MiB with its other
// fields. A generation goes out as consecutive batches of the same term
// and generation (FirstSeqNo moving on), a file as consecutive chunks.
const (
	maxMessageOps  = 3 << 20
	maxMessageData = 1 << 20
)

// splitBatch cuts b into batches of at most maxMessageOps bytes of ops;
// an op larger than that (--max-op-bytes raised past it) goes alone.
func splitBatch(b translog.Batch) []translog.Batch {
	var out []translog.Batch
	start, size := 0, 0
	for i, op := range b.Ops {
		n := len(op) + 8 // the op's field tag and length, generously
		if i > start && size+n > maxMessageOps {
			out = append(out, translog.Batch{Term: b.Term, Gen: b.Gen, FirstSeqNo: b.FirstSeqNo + int64(start), Ops: b.Ops[start:i]})
			start, size = i, 0
		}
		size += n
	}
	if start < len(b.Ops) || len(out) == 0 {
		out = append(out, translog.Batch{Term: b.Term, Gen: b.Gen, FirstSeqNo: b.FirstSeqNo + int64(start), Ops: b.Ops[start:]})
	}
	return out
}

// splitChunk cuts a file chunk into chunks of at most maxMessageData
// bytes; only the last of them keeps Last.
func splitChunk(f FileChunk) []FileChunk {
	if len(f.Data) <= maxMessageData {
		return []FileChunk{f}
	}
	var out []FileChunk
	for off := 0; off < len(f.Data); off += maxMessageData {
		end := min(off+maxMessageData, len(f.Data))
		out = append(out, FileChunk{Name: f.Name, Offset: f.Offset + int64(off), Data: f.Data[off:end], Last: f.Last && end == len(f.Data)})
	}
	return out
}

func (sv *service) Open(ctx context.Context, req *connect.Request[sidecarv1.OpenRequest], stream *connect.ServerStream[sidecarv1.OpenResponse]) error {
	m := req.Msg
	settings, err := settingsFromProto(m.GetSettings())
	if err != nil {
		return sv.fail("Open", m.GetShard(), opErr("Open", m.GetShard(), err, ""))
	}
	st, err := sv.s.OpenWith(ctx, m.GetShard(), m.GetTerm(), m.GetAllocationId(), settings, OpenOptions{Warm: m.GetWarm()}, func(ev openEvent) error {
		switch {
		case ev.Progress != nil:
			p := ev.Progress
			return stream.Send(&sidecarv1.OpenResponse{Event: &sidecarv1.OpenResponse_Progress{Progress: &sidecarv1.OpenProgress{Step: p.Step, Done: p.Done, Total: p.Total, Bytes: p.Bytes}}})
		case ev.File != nil:
			for _, f := range splitChunk(*ev.File) {
				if err := stream.Send(&sidecarv1.OpenResponse{Event: &sidecarv1.OpenResponse_CheckpointFile{CheckpointFile: &sidecarv1.CheckpointFile{Name: f.Name, Offset: f.Offset, Data: f.Data, Last: f.Last}}}); err != nil {
					return err
				}
			}
		case ev.Ops != nil:
			for _, b := range splitBatch(*ev.Ops) {
				if err := stream.Send(&sidecarv1.OpenResponse{Event: &sidecarv1.OpenResponse_Ops{Ops: batchProto(b)}}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return sv.fail("Open", m.GetShard(), err)
	}
	r := st.Restore
	return stream.Send(&sidecarv1.OpenResponse{Event: &sidecarv1.OpenResponse_Opened{Opened: &sidecarv1.Opened{
		RestorePoint: &sidecarv1.RestorePoint{Term: r.Term, Gen: r.Gen, NextSeqNo: r.NextSeqNo, CheckpointGen: r.CheckpointGen},
		Status:       statusProto(st),
		Checkpoint:   manifestProto(sv.s.ServedCheckpoint(m.GetShard())),
	}}})
}

// manifestProto is the API's view of a checkpoint manifest (nil: none).
func manifestProto(m *seal.Manifest) *sidecarv1.CheckpointManifest {
	if m == nil {
		return nil
	}
	out := &sidecarv1.CheckpointManifest{Term: m.Term, Gen: m.Gen, NextSeqNo: m.NextSeqNo, Files: make([]*sidecarv1.CheckpointFileInfo, len(m.Files))}
	for i, f := range m.Files {
		out.Files[i] = &sidecarv1.CheckpointFileInfo{Name: f.Name, Size: f.Size, Crc32C: f.CRC32C}
	}
	return out
}

func (sv *service) ReadCheckpointFile(ctx context.Context, req *connect.Request[sidecarv1.ReadCheckpointFileRequest], stream *connect.ServerStream[sidecarv1.ReadCheckpointFileResponse]) error {
	m := req.Msg
	err := sv.s.ReadCheckpointFile(ctx, m.GetShard(), m.GetFile(), m.GetOffset(), m.GetLength(), func(off int64, data []byte, size int64) error {
		for _, c := range splitChunk(FileChunk{Offset: off, Data: data}) {
			if err := stream.Send(&sidecarv1.ReadCheckpointFileResponse{Offset: c.Offset, Data: c.Data, FileSize: size}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return sv.fail("ReadCheckpointFile", m.GetShard(), err)
	}
	return nil
}

func (sv *service) Append(ctx context.Context, req *connect.Request[sidecarv1.AppendRequest]) (*connect.Response[sidecarv1.AppendResponse], error) {
	m := req.Msg
	ack, err := sv.s.Append(ctx, m.GetShard(), m.GetOps(), m.GetExpectedTerm())
	if err != nil {
		return nil, sv.fail("Append", m.GetShard(), err)
	}
	return connect.NewResponse(appendResponse(ack)), nil
}

func (sv *service) Read(ctx context.Context, req *connect.Request[sidecarv1.ReadRequest], stream *connect.ServerStream[sidecarv1.ReadResponse]) error {
	m := req.Msg
	err := sv.s.Read(ctx, m.GetShard(), m.GetFromSeq(), m.GetMaxOps(), func(b translog.Batch) error {
		for _, part := range splitBatch(b) {
			if err := stream.Send(&sidecarv1.ReadResponse{Batch: batchProto(part)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return sv.fail("Read", m.GetShard(), err)
	}
	return nil
}

func (sv *service) Status(_ context.Context, req *connect.Request[sidecarv1.StatusRequest]) (*connect.Response[sidecarv1.StatusResponse], error) {
	st, err := sv.s.Status(req.Msg.GetShard())
	if err != nil {
		return nil, sv.fail("Status", req.Msg.GetShard(), err)
	}
	return connect.NewResponse(&sidecarv1.StatusResponse{Status: statusProto(st)}), nil
}

func (sv *service) Barrier(ctx context.Context, req *connect.Request[sidecarv1.BarrierRequest]) (*connect.Response[sidecarv1.BarrierResponse], error) {
	m := req.Msg
	r, err := sv.s.Barrier(ctx, m.GetShard(), m.GetExpectedTerm())
	if err != nil {
		return nil, sv.fail("Barrier", m.GetShard(), err)
	}
	return connect.NewResponse(&sidecarv1.BarrierResponse{Term: r.Term, Gen: r.Gen, NextSeqNo: r.NextSeqNo, Local: r.Local}), nil
}

func (sv *service) Close(ctx context.Context, req *connect.Request[sidecarv1.CloseRequest]) (*connect.Response[sidecarv1.CloseResponse], error) {
	st, err := sv.s.Close(ctx, req.Msg.GetShard())
	if err != nil {
		return nil, sv.fail("Close", req.Msg.GetShard(), err)
	}
	return connect.NewResponse(&sidecarv1.CloseResponse{Status: statusProto(st)}), nil
}

func (sv *service) Inspect(ctx context.Context, req *connect.Request[sidecarv1.InspectRequest]) (*connect.Response[sidecarv1.InspectResponse], error) {
	name := req.Msg.GetShard()
	if err := ValidateShardID(name); err != nil {
		return nil, sv.fail("Inspect", name, opErr("Inspect", name, err, ""))
	}
	out, err := Inspect(ctx, sv.s.store, name)
	if err != nil {
		return nil, sv.fail("Inspect", name, err)
	}
	return connect.NewResponse(out), nil
}

func (sv *service) PublishCheckpoint(ctx context.Context, req *connect.Request[sidecarv1.PublishCheckpointRequest]) (*connect.Response[sidecarv1.PublishCheckpointResponse], error) {
	m := req.Msg
	files := make([]FileChunk, len(m.GetFiles()))
	for i, f := range m.GetFiles() {
		files[i] = FileChunk{Name: f.GetName(), Offset: f.GetOffset(), Data: f.GetData(), Last: f.GetLast()}
	}
	key, err := sv.s.PublishCheckpoint(ctx, m.GetShard(), m.GetGen(), files)
	if err != nil {
		return nil, sv.fail("PublishCheckpoint", m.GetShard(), err)
	}
	return connect.NewResponse(&sidecarv1.PublishCheckpointResponse{Key: key}), nil
}

func (sv *service) StartHandoff(ctx context.Context, req *connect.Request[sidecarv1.StartHandoffRequest]) (*connect.Response[sidecarv1.StartHandoffResponse], error) {
	m := req.Msg
	hc, err := sv.s.StartHandoff(ctx, m.GetShard(), m.GetTargetAllocationId(), m.GetTargetNode())
	if err != nil {
		return nil, sv.fail("StartHandoff", m.GetShard(), err)
	}
	return connect.NewResponse(&sidecarv1.StartHandoffResponse{HandoffContext: hc}), nil
}

func (sv *service) AdoptHandoff(ctx context.Context, req *connect.Request[sidecarv1.AdoptHandoffRequest]) (*connect.Response[sidecarv1.AdoptHandoffResponse], error) {
	settings, err := settingsFromProto(req.Msg.GetSettings())
	if err != nil {
		return nil, sv.fail("AdoptHandoff", "", opErr("AdoptHandoff", "", err, ""))
	}
	st, err := sv.s.AdoptHandoff(ctx, req.Msg.GetHandoffContext(), settings)
	if err != nil {
		return nil, sv.fail("AdoptHandoff", shardOf(err), err)
	}
	return connect.NewResponse(&sidecarv1.AdoptHandoffResponse{Status: statusProto(st)}), nil
}

func (sv *service) AbortHandoff(ctx context.Context, req *connect.Request[sidecarv1.AbortHandoffRequest]) (*connect.Response[sidecarv1.AbortHandoffResponse], error) {
	resumed, err := sv.s.AbortHandoff(ctx, req.Msg.GetHandoffContext())
	if err != nil {
		return nil, sv.fail("AbortHandoff", shardOf(err), err)
	}
	return connect.NewResponse(&sidecarv1.AbortHandoffResponse{Resumed: resumed}), nil
}

// shardOf is the shard an *Error names, for calls whose shard is inside
// an opaque context.
func shardOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Shard
	}
	return ""
}

func (sv *service) GC(ctx context.Context, req *connect.Request[sidecarv1.GCRequest]) (*connect.Response[sidecarv1.GCResponse], error) {
	res, err := sv.s.GC(ctx, req.Msg.GetShard(), req.Msg.GetDryRun())
	if err != nil {
		return nil, sv.fail("GC", req.Msg.GetShard(), err)
	}
	out := &sidecarv1.GCResponse{}
	if req.Msg.GetDryRun() {
		for _, o := range res.Planned {
			out.Deleted = append(out.Deleted, o.Key+" ("+o.Reason+")")
		}
	} else {
		out.Deleted = res.Deleted
		out.Kept = int64(len(res.Planned) - len(res.Deleted))
	}
	return connect.NewResponse(out), nil
}

// BearerToken is a client interceptor that sends token as the bearer
// token of every call.
func BearerToken(token string) connect.Interceptor { return httpauth.BearerToken(token) }

func (sv *service) AppendStream(ctx context.Context, stream *connect.BidiStream[sidecarv1.AppendStreamRequest, sidecarv1.AppendStreamResponse]) error {
	if err := sv.s.AppendStream(ctx, stream.Receive, stream.Send); err != nil {
		return sv.fail("AppendStream", shardOf(err), err)
	}
	return nil
}
