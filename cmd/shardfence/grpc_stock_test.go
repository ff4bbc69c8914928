package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

const sidecarService = "/shardfence.sidecar.v1.SidecarService/"

// grpcServerStream runs one server-streaming call with grpc-go, calling
// each with every message received, until the stream ends.
func grpcServerStream[Res proto.Message](ctx context.Context, cc *grpc.ClientConn, method string, req proto.Message, newRes func() Res, each func(Res)) error {
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, sidecarService+method)
	if err != nil {
		return err
	}
	if err := st.SendMsg(req); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		res := newRes()
		if err := st.RecvMsg(res); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		each(res)
	}
}

// A stock gRPC client (grpc-go with its default options: a 4 MiB
// receive limit) works over every streaming call of the sidecar, also
// when a generation, a checkpoint file and a warm block are larger than
// that: Open's restore stream, Read, Watch (which carries a restore),
// ReadCheckpointFile, AppendStream and the health Watch. Read, Open and
// Watch used to send a generation as one message of up to 16 MiB, and
// ReadCheckpointFile a whole cache block, which such a client refuses
// ("received message larger than max").
func TestStockGRPCClientOverEveryStream(t *testing.T) {
	p := spawn(t, "sidecar", "sidecar listening on ", nil, "serve", "--store", "file://"+t.TempDir(), "--listen", "127.0.0.1:0",
		"--cache-block-bytes", "8388608", "--warm-hydrate-parallelism", "-1")
	cc, err := grpc.NewClient("passthrough:///"+p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// Watch everything from the start: it carries the restores below.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	type watched struct {
		ops, file int
		gained    []int64
		err       error
	}
	wch := make(chan watched, 1)
	gainedTerm3 := make(chan struct{})
	go func() {
		var w watched
		w.err = grpcServerStream(watchCtx, cc, "Watch", &sidecarv1.WatchRequest{}, func() *sidecarv1.WatchResponse { return &sidecarv1.WatchResponse{} },
			func(ev *sidecarv1.WatchResponse) {
				w.ops += len(ev.GetOps().GetOps())
				w.file += len(ev.GetCheckpointFile().GetData())
				if ev.GetKind() == sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED {
					w.gained = append(w.gained, ev.GetTerm())
					if ev.GetTerm() == 3 {
						close(gainedTerm3)
					}
				}
			})
		wch <- w
	}()

	type opened struct {
		ops, file int
		done      *sidecarv1.Opened
	}
	open := func(term int64, alloc string, warm bool) opened {
		t.Helper()
		var o opened
		err := grpcServerStream(ctx, cc, "Open", &sidecarv1.OpenRequest{Shard: "s1", Term: term, AllocationId: alloc, Warm: warm},
			func() *sidecarv1.OpenResponse { return &sidecarv1.OpenResponse{} },
			func(ev *sidecarv1.OpenResponse) {
				o.ops += len(ev.GetOps().GetOps())
				o.file += len(ev.GetCheckpointFile().GetData())
				if ev.GetOpened() != nil {
					o.done = ev.GetOpened()
				}
			})
		if err != nil || o.done == nil {
			t.Fatalf("Open at term %d: %v", term, err)
		}
		return o
	}
	mib := bytes.Repeat([]byte("x"), 1<<20)
	bigAppend := func() *sidecarv1.AppendResponse {
		t.Helper()
		req := &sidecarv1.AppendRequest{Shard: "s1"}
		for range 6 {
			req.Ops = append(req.Ops, mib)
		}
		res := &sidecarv1.AppendResponse{}
		if err := cc.Invoke(ctx, sidecarService+"Append", req, res); err != nil {
			t.Fatalf("append of 6 MiB: %v", err)
		}
		return res
	}

	open(1, "a1", false)
	first := bigAppend()
	var readOps, readMsgs int
	if err := grpcServerStream(ctx, cc, "Read", &sidecarv1.ReadRequest{Shard: "s1"}, func() *sidecarv1.ReadResponse { return &sidecarv1.ReadResponse{} },
		func(r *sidecarv1.ReadResponse) { readOps += len(r.GetBatch().GetOps()); readMsgs++ }); err != nil || readOps != 6 {
		t.Fatalf("Read of a 6 MiB generation: %d ops in %d messages, %v", readOps, readMsgs, err)
	}
	file := bytes.Repeat([]byte("f"), 6<<20)
	if err := cc.Invoke(ctx, sidecarService+"PublishCheckpoint", &sidecarv1.PublishCheckpointRequest{Shard: "s1", Gen: first.GetGen(),
		Files: []*sidecarv1.CheckpointFile{{Name: "data", Data: file, Last: true}}}, &sidecarv1.PublishCheckpointResponse{}); err != nil {
		t.Fatalf("publish a 6 MiB checkpoint: %v", err)
	}
	bigAppend()

	// A cold open at term 2 streams the checkpoint and the 6 MiB
	// generation after it.
	if o := open(2, "a2", false); o.ops != 6 || o.file != len(file) {
		t.Fatalf("Open at term 2 restored %d ops and %d file bytes, want 6 and %d", o.ops, o.file, len(file))
	}
	// A warm open at term 3 serves the file on demand, in 8 MiB blocks.
	o := open(3, "a3", true)
	if o.done.GetCheckpoint() == nil {
		t.Fatalf("warm open without a checkpoint: %v", o.done)
	}
	var got int
	if err := grpcServerStream(ctx, cc, "ReadCheckpointFile", &sidecarv1.ReadCheckpointFileRequest{Shard: "s1", File: "data"},
		func() *sidecarv1.ReadCheckpointFileResponse { return &sidecarv1.ReadCheckpointFileResponse{} },
		func(r *sidecarv1.ReadCheckpointFileResponse) { got += len(r.GetData()) }); err != nil || got != len(file) {
		t.Fatalf("ReadCheckpointFile of a 6 MiB file in an 8 MiB block: %d bytes, %v", got, err)
	}

	select {
	case <-gainedTerm3:
	case w := <-wch:
		t.Fatalf("the watch ended: %+v", w)
	case <-ctx.Done():
		t.Fatal("the watch did not see term 3 gained")
	}
	stopWatch()
	w := <-wch
	if w.err != nil && !strings.Contains(w.err.Error(), "context canceled") {
		t.Fatalf("watch: %v", w.err)
	}
	if w.ops < 6 || w.file < len(file) {
		t.Errorf("the watch carried %d ops and %d file bytes of the restores", w.ops, w.file)
	}

	// The append stream, both ways.
	as, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, sidecarService+"AppendStream")
	if err != nil {
		t.Fatal(err)
	}
	if err := as.SendMsg(&sidecarv1.AppendStreamRequest{Shard: "s1", RequestId: 1, Ops: [][]byte{[]byte("after")}}); err != nil {
		t.Fatal(err)
	}
	ack := &sidecarv1.AppendStreamResponse{}
	if err := as.RecvMsg(ack); err != nil || ack.GetRequestId() != 1 {
		t.Fatalf("append stream: %v, %v", ack, err)
	}
	_ = as.CloseSend()

	hw, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := hw.Recv(); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch: %v, %v", res, err)
	}
}
