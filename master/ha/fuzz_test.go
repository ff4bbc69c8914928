package ha

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/grpcprobe"
	"github.com/shardfence/shardfence/internal/harness/rpcfuzz"
	"github.com/shardfence/shardfence/internal/reqlimit"
	"github.com/shardfence/shardfence/master"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// masterServices are the services a master with a store serves.
var masterServices = []protoreflect.ServiceDescriptor{
	masterv1.File_master_v1_master_proto.Services().ByName("MasterService"),
	masterv1.File_master_v1_fleet_proto.Services().ByName("MasterFleetService"),
	masterv1.File_master_v1_ha_proto.Services().ByName("MasterHAService"),
}

// masterValid are valid requests of every procedure, in JSON.
var masterValid = map[string][]string{
	masterv1connect.MasterServicePutStartProcedure:       {`{"clientId":"c1","tenant":"t","key":"k","size":"4096","replicaNum":1}`},
	masterv1connect.MasterServicePutEndProcedure:         {`{"clientId":"c1","tenant":"t","key":"k"}`},
	masterv1connect.MasterServicePutRevokeProcedure:      {`{"clientId":"c1","tenant":"t","key":"k"}`},
	masterv1connect.MasterServiceBatchPutStartProcedure:  {`{"items":[{"clientId":"c1","key":"a","size":"1"},{"clientId":"c1","key":"a","size":"1"}]}`},
	masterv1connect.MasterServiceBatchPutEndProcedure:    {`{"items":[{"clientId":"c1","key":"a"}]}`},
	masterv1connect.MasterServiceBatchPutRevokeProcedure: {`{"items":[{"clientId":"c1","key":"a"}]}`},
	masterv1connect.MasterServiceGetReplicaListProcedure: {`{"tenant":"t","key":"k"}`},
	masterv1connect.MasterServiceExistProcedure:          {`{"key":"k"}`},
	masterv1connect.MasterServiceRemoveProcedure:         {`{"key":"k","force":true}`},
	masterv1connect.MasterServiceMountSegmentProcedure: {
		`{"clientId":"c1","segment":{"id":"7","name":"seg-7","base":"0","size":"1048576","endpoint":"10.0.0.1:9000"}}`,
	},
	masterv1connect.MasterServiceUnmountSegmentProcedure: {`{"clientId":"c1","segmentId":"7"}`},
	masterv1connect.MasterServiceReMountSegmentProcedure: {`{"clientId":"c1","segments":[{"id":"7","name":"seg-7","size":"1048576"}]}`},
	masterv1connect.MasterServicePingProcedure:           {`{"clientId":"c1"}`},
	masterv1connect.MasterServiceStatsProcedure:          {`{}`},
	masterv1connect.MasterFleetServiceRegisterNodeProcedure: {
		`{"node":"n1","addr":"http://10.0.0.1:7400","store":"s3://b/p","fencing":true,"session":"s1"}`,
	},
	masterv1connect.MasterFleetServiceWatchAssignmentsProcedure: {`{"node":"n1","session":"s1"}`},
	masterv1connect.MasterFleetServiceReportShardProcedure: {
		`{"node":"n1","session":"s1","shard":"orders-1","term":"1","allocation":"a1","reason":"open"}`,
	},
	masterv1connect.MasterFleetServiceAssignShardProcedure:   {`{"shard":"orders-1","node":"n1","term":"1"}`},
	masterv1connect.MasterFleetServiceUnassignShardProcedure: {`{"shard":"orders-1"}`},
	masterv1connect.MasterFleetServiceDrainNodeProcedure:     {`{"node":"n1"}`, `{"node":"n1","undo":true}`},
	masterv1connect.MasterFleetServiceListNodesProcedure:     {`{}`},
	masterv1connect.MasterFleetServiceListShardsProcedure:    {`{}`},
	masterv1connect.MasterFleetServiceWatchShardsProcedure:   {`{"shards":["orders-1"]}`},
	masterv1connect.MasterHAServicePromoteProcedure:          {`{}`},
	masterv1connect.MasterHAServiceStatusProcedure:           {`{}`},
	masterv1connect.MasterHAServiceSnapshotProcedure:         {`{}`},
	masterv1connect.MasterHAServiceLeaderProcedure:           {`{}`},
}

// FuzzMasterAPI sends arbitrary bodies to every procedure of the object,
// fleet and HA services of a primary master over an in-memory store,
// served as `shardfence master --store` serves them: the node's mux with
// the same read limit, the gRPC health service and the request guard in
// front (rpcfuzz states the properties). After each input the master
// must still answer Stats and be the primary.
func FuzzMasterAPI(f *testing.F) {
	procs := rpcfuzz.Procs(masterServices...)
	for _, s := range rpcfuzz.Seeds(procs, rpcfuzz.Valid(f, masterServices, masterValid)) {
		f.Add(s.Proc, s.Mode, s.Body)
	}
	n, err := New(Options{
		Store: mem.New(), Cluster: "c1", Node: "fuzz", Advertise: "http://fuzz", Dir: f.TempDir(),
		Config: master.Config{Shards: 16}, Backoff: fastRetry,
	})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx)
	}()
	f.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := n.Serving(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.Fatalf("the node did not become primary: %v", n.Status().Err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	lim := reqlimit.Limits{MaxRequestBytes: master.DefaultMaxRequestBytes, MaxConcurrentRequestBytes: 64 << 20, BodyReadTimeout: 30 * time.Second}
	mux := http.NewServeMux()
	n.Mount(mux, connect.WithReadMaxBytes(lim.MaxRequestBytes))
	stopped := make(chan struct{})
	f.Cleanup(func() { close(stopped) })
	grpcprobe.Mount(mux, master.HealthChecker(func() error { _, err := n.Serving(); return err }, n.Ready, stopped),
		func(h http.Handler) http.Handler { return h },
		masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName, masterv1connect.MasterHAServiceName)

	tg := rpcfuzz.NewTarget(f, master.RequestGuard(lim).Wrap(mux), procs, rpcfuzz.Options{
		MaxMessage: echo.MaxMessage,
		Alive: func(ctx context.Context, tg *rpcfuzz.Target) error {
			c := masterv1connect.NewMasterServiceClient(tg.Client, tg.URL)
			if _, err := c.Stats(ctx, connect.NewRequest(&masterv1.StatsRequest{})); err != nil {
				return err
			}
			if _, err := n.Serving(); err != nil {
				return err
			}
			return nil
		},
	})
	f.Fuzz(func(t *testing.T, proc, mode uint8, body []byte) {
		tg.Call(t, proc, mode, body)
	})
}
