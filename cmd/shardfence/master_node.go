package main

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/internal/grpcprobe"
	"github.com/shardfence/shardfence/internal/httpauth"
	"github.com/shardfence/shardfence/internal/reqlimit"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/ha"
	"github.com/shardfence/shardfence/seal"
)

// masterNode is what runMaster serves: the in-memory master, or an HA
// node whose state goes through the fenced store.
type masterNode struct {
	// serving is the master that serves now (an HA node's only while
	// primary).
	serving func() (*master.Master, error)
	// run is an HA node's loop (tail, elect, serve).
	run func(ctx context.Context) error
	// liveness is the in-memory master's monitor (an HA node runs its
	// own).
	liveness func(ctx context.Context)
	// ready is /readyz's verdict.
	ready func() error
	// services are the gRPC health checker's names.
	services []string
	close    func()
}

// mount puts the master's API on mux: the in-memory master without
// --store, an HA node over the store with it.
func (f *masterFlags) mount(ctx context.Context, mux *http.ServeMux, reg *prometheus.Registry, mopts master.Options, adv string, format master.SnapshotFormat) (*masterNode, error) {
	// Every handler bounds one request message, a decompressed gzip body
	// included.
	readMax := connect.WithReadMaxBytes(f.lim.MaxRequestBytes)
	if f.store == "" {
		return f.mountInMemory(mux, reg, mopts, readMax)
	}
	return f.mountHA(ctx, mux, reg, mopts, readMax, adv, format)
}

func (f *masterFlags) mountInMemory(mux *http.ServeMux, reg *prometheus.Registry, mopts master.Options, readMax connect.HandlerOption) (*masterNode, error) {
	m, err := master.New(f.cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	path, h := master.NewHandler(m, readMax)
	mux.Handle(path, h)
	// A table a restart loses would tell every sidecar it holds
	// nothing: automatic failover needs the durable master.
	path, h = master.NewFleetHandlerFunc(func() (*master.Master, error) {
		return nil, fmt.Errorf("%w: automatic failover needs a master with --store and --cluster: its shard assignment table must survive the master", master.ErrInvalidArgument)
	}, readMax)
	mux.Handle(path, h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready in-memory\n")) })
	reg.MustRegister(newMasterStateCollector(nil))
	mopts.Logger.Warn("master state is in memory only: a restart loses every object (run with --store and --cluster to keep it)")
	return &masterNode{
		serving:  func() (*master.Master, error) { return m, nil },
		ready:    func() error { return nil },
		liveness: m.RunLiveness,
		services: []string{masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName},
		close:    func() {},
	}, nil
}

func (f *masterFlags) mountHA(ctx context.Context, mux *http.ServeMux, reg *prometheus.Registry, mopts master.Options, readMax connect.HandlerOption, adv string, format master.SnapshotFormat) (_ *masterNode, err error) {
	if _, err := master.New(f.cfg, mopts); err != nil { // validate before touching the store
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	root, err := blobstore.Open(ctx, f.store)
	if err != nil {
		return nil, fmt.Errorf("master: open store %s: %w", blobstore.Redact(f.store), err)
	}
	defer func() {
		if err != nil {
			root.Close()
		}
	}()
	// What shardfence conformance recorded for this store, as serve
	// reads it: the log is fenced by the same protocol.
	certState, err := masterCertUser.checkCertificate(ctx, root, f.allowFencingFailures, mopts.Logger)
	if err != nil {
		return nil, err
	}
	registerCertificateStateAs(reg, MasterStoreCertificateMetric, "master", certState)
	if err := blobstore.ProbePreconditions(ctx, root); err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	// The log's store requests and bytes, by operation, on /metrics
	// (shardfence_blobstore_*{store="master"}): what the log costs.
	metStore := metered.New(root, "master")
	reg.MustRegister(metStore)
	n, err := ha.New(ha.Options{
		Store: metStore.Container, Cluster: f.cluster, Standby: f.standby, Node: f.node, Advertise: adv, ElectionTimeout: f.election,
		Config: f.cfg, MasterOptions: mopts,
		Dir: f.dataDir, SnapshotFormat: format, SnapshotInterval: f.snapEvery,
		Retain: seal.GCPolicy{RetainCheckpoints: f.retainSnaps, RetainGens: f.retainGens}, MaxLag: f.maxLag,
		FenceCheckInterval: f.fenceCheck, Metrics: ha.NewMetrics(reg), Log: mopts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	n.Mount(mux, readMax)
	reg.MustRegister(newMasterStateCollector(n))
	return &masterNode{
		serving:  n.Serving,
		run:      n.Run,
		ready:    n.Ready,
		services: []string{masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName, masterv1connect.MasterHAServiceName},
		close:    func() { root.Close() },
	}, nil
}

// handler is what the master's server serves: the gRPC health service
// next to the API, behind the request guard and the bearer token.
// stopped closes when the master shuts down (health says so).
func (mn *masterNode) handler(mux *http.ServeMux, lim reqlimit.Limits, token string, stopped <-chan struct{}) http.Handler {
	grpcprobe.Mount(mux, master.HealthChecker(func() error { _, err := mn.serving(); return err }, mn.ready, stopped),
		func(h http.Handler) http.Handler { return h }, mn.services...)
	// The guard holds every call's body bytes in one gate and cuts slow
	// bodies; the token check before it keeps a caller without the token
	// from taking any of them.
	var handler http.Handler = master.RequestGuard(lim).Wrap(mux)
	if token != "" {
		handler = httpauth.RequireBearer(token, "missing or wrong bearer token: send the master's token as Authorization: Bearer TOKEN (the shardfence master commands read it from --auth-token-file or SHARDFENCE_MASTER_TOKEN_FILE, a sidecar from --master-token-file)",
			handler, "/healthz", "/readyz", grpcprobe.CheckPath, grpcprobe.WatchPath)
	}
	return handler
}
