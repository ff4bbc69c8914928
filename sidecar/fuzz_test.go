package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/harness/rpcfuzz"
)

var sidecarServices = []protoreflect.ServiceDescriptor{
	sidecarv1.File_sidecar_v1_sidecar_proto.Services().ByName("SidecarService"),
}

// sidecarValid are valid requests of every procedure, in JSON; "fz" is
// the shard the target opens before fuzzing.
var sidecarValid = map[string][]string{
	sidecarv1connect.SidecarServiceOpenProcedure: {
		`{"shard":"fz-2","term":"1","allocationId":"a1"}`,
		`{"shard":"fz","term":"2","allocationId":"a2","settings":{"mode":"FENCING_MODE_LEASE"}}`,
	},
	sidecarv1connect.SidecarServiceAppendProcedure:            {`{"shard":"fz","ops":["aGVsbG8=","d29ybGQ="],"expectedTerm":"1"}`},
	sidecarv1connect.SidecarServiceAppendStreamProcedure:      {`{"shard":"fz","expectedTerm":"1","requestId":"1","ops":["aGk="]}`},
	sidecarv1connect.SidecarServiceReadProcedure:              {`{"shard":"fz","fromSeq":"0","maxOps":"10"}`},
	sidecarv1connect.SidecarServicePublishCheckpointProcedure: {`{"shard":"fz","gen":"1","files":[{"name":"seg_1","data":"AAEC"}]}`},
	sidecarv1connect.SidecarServiceStartHandoffProcedure:      {`{"shard":"fz","targetAllocationId":"a9","targetNode":"n9"}`},
	sidecarv1connect.SidecarServiceAdoptHandoffProcedure:      {`{"handoffContext":"eyJzaGFyZCI6ImZ6In0="}`},
	sidecarv1connect.SidecarServiceAbortHandoffProcedure:      {`{"handoffContext":"eyJzaGFyZCI6ImZ6In0="}`},
	sidecarv1connect.SidecarServiceStatusProcedure:            {`{"shard":"fz"}`},
	sidecarv1connect.SidecarServiceBarrierProcedure:           {`{"shard":"fz","expectedTerm":"1"}`},
	sidecarv1connect.SidecarServiceCloseProcedure:             {`{"shard":"fz-2"}`},
	sidecarv1connect.SidecarServiceInspectProcedure:           {`{"shard":"fz"}`},
	sidecarv1connect.SidecarServiceGCProcedure:                {`{"shard":"fz"}`},
	sidecarv1connect.SidecarServiceWatchProcedure:             {`{"shards":["fz"]}`},
	sidecarv1connect.SidecarServiceReadCheckpointFileProcedure: {
		`{"shard":"fz","file":"seg_1","offset":"0","length":"3"}`,
	},
}

// FuzzSidecarAPI sends arbitrary bodies to every procedure of the sidecar
// service of a sidecar over an in-memory store (the production opener,
// the handler `shardfence serve` serves, its request limits), with one
// shard open (rpcfuzz states the properties). After each input the
// sidecar must still answer Status with an RPC outcome.
func FuzzSidecarAPI(f *testing.F) {
	procs := rpcfuzz.Procs(sidecarServices...)
	for _, s := range rpcfuzz.Seeds(procs, rpcfuzz.Valid(f, sidecarServices, sidecarValid)) {
		f.Add(s.Proc, s.Mode, s.Body)
	}
	srv, err := New(context.Background(), mem.New(), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	if _, err := srv.Open(context.Background(), "fz", 1, "a1", Settings{}, func(openEvent) error { return nil }); err != nil {
		f.Fatal(err)
	}
	tg := rpcfuzz.NewTarget(f, srv.Handler(HandlerOptions{}), procs, rpcfuzz.Options{
		MaxMessage: echo.MaxMessage,
		Alive: func(ctx context.Context, tg *rpcfuzz.Target) error {
			c := sidecarv1connect.NewSidecarServiceClient(tg.Client, tg.URL)
			_, err := c.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: "fz"}))
			var ce *connect.Error
			switch {
			case err == nil:
				return nil
			case !errors.As(err, &ce) || !connect.IsWireError(ce):
				return err
			case ce.Code() == connect.CodeInternal || ce.Code() == connect.CodeUnknown:
				return fmt.Errorf("status of an open or closed shard: %w", err)
			}
			return nil
		},
	})
	f.Fuzz(func(t *testing.T, proc, mode uint8, body []byte) {
		tg.Call(t, proc, mode, body)
	})
}
