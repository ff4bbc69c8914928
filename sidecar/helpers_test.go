package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// freshOpener opens shards that have never been written: it claims the
// term and opens the writer at generation 1, and refuses any shard with a
// predecessor or a translog, because sealing those is the recovery path's
// job. It lets the service be tested against the real fence and translog
// without the recovery path.
type freshOpener struct{}

func (freshOpener) Open(ctx context.Context, store *blobstore.Container, p openParams, events func(openEvent) error) (*opened, error) {
	if err := events(openEvent{Progress: &Progress{Step: "claim"}}); err != nil {
		return nil, err
	}
	existing, err := blobstore.ListAll(ctx, store, layout.TranslogDir)
	if err != nil {
		return nil, err
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("%w: test opener: shard %q has a translog", ErrNotAvailable, p.Shard)
	}
	var chain *fence.Chain
	if !p.Settings.FencingDisabled {
		chain, err = fence.Claim(ctx, store, p.Shard, p.Term, p.Allocation)
		if err != nil {
			return nil, err
		}
		if len(chain.Predecessors()) > 0 {
			return nil, fmt.Errorf("%w: test opener: shard %q has predecessors", ErrNotAvailable, p.Shard)
		}
	}
	w, err := translog.Open(ctx, store, chain, p.Settings.writerOptions(p, 1, 0))
	if err != nil {
		return nil, err
	}
	if err := events(openEvent{Progress: &Progress{Step: "open", Done: 1, Total: 1}}); err != nil {
		_ = w.Close(ctx)
		return nil, err
	}
	return &opened{Writer: w, Chain: chain, StartGen: 1, Fencing: seal.FencingOf(p.Settings.writerOptions(p, 1, 0))}, nil
}

// Adopt is the relocation path's; a handoff is tested on the production
// opener.
func (freshOpener) Adopt(context.Context, *blobstore.Container, relocation.HandoffContext, openParams) (*opened, error) {
	return nil, fmt.Errorf("%w: test opener: adopting is the relocation path's job", ErrNotAvailable)
}

type env struct {
	store  *blobstore.Container
	srv    *Server
	http   *httptest.Server
	client sidecarv1connect.SidecarServiceClient
	reg    *prometheus.Registry
}

func newEnv(t *testing.T, opts Options, ho HandlerOptions) *env {
	t.Helper()
	store := mem.New()
	return newEnvOn(t, store, opts, ho)
}

func newEnvOn(t *testing.T, store *blobstore.Container, opts Options, ho HandlerOptions) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	srv, err := newServer(t.Context(), store, opts, freshOpener{})
	if err != nil {
		t.Fatal(err)
	}
	if ho.Metrics == nil {
		ho.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	hs := httptest.NewServer(srv.Handler(ho))
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		hs.Close()
	})
	return &env{store: store, srv: srv, http: hs, reg: reg,
		client: sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, hs.URL)}
}
