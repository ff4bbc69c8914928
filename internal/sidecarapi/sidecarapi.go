// Package sidecarapi is the calls to a sidecar's API that the programs
// and multi-process tests share (the demo, the benches, the scenarios of
// sidecarproc): an Open read to its end, and the reason of a refusal. It
// needs only the API's generated code, so a test module that imports it
// does not pull in the sidecar itself.
package sidecarapi

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/rpcerr"
)

// Open runs the Open req asks for (with settings, warm, ...) and reads
// the stream to its end: the opened event and how many ops were replayed.
// A stream that ends without the opened event is an error.
func Open(ctx context.Context, c sidecarv1connect.SidecarServiceClient, req *sidecarv1.OpenRequest) (*sidecarv1.Opened, int, error) {
	st, err := c.Open(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	var opened *sidecarv1.Opened
	replayed := 0
	for st.Receive() {
		if o := st.Msg().GetOpened(); o != nil {
			opened = o
		}
		replayed += len(st.Msg().GetOps().GetOps())
	}
	if err := st.Err(); err != nil {
		return nil, 0, err
	}
	if opened == nil {
		return nil, 0, errors.New("open stream ended without the opened event")
	}
	return opened, replayed, nil
}

// OpenShard opens shard at term for alloc: Open with nothing else asked.
func OpenShard(ctx context.Context, c sidecarv1connect.SidecarServiceClient, shard string, term int64, alloc string) (*sidecarv1.Opened, int, error) {
	return Open(ctx, c, &sidecarv1.OpenRequest{Shard: shard, Term: term, AllocationId: alloc})
}

// ErrorDetail is the detail a sidecar attached to err (its reason, term,
// successor term), nil if there is none.
func ErrorDetail(err error) *sidecarv1.ErrorDetail {
	d, _ := rpcerr.Detail[*sidecarv1.ErrorDetail](err)
	return d
}

// Reason is the machine-readable reason a sidecar attached to err
// ("fenced", "handed_off", ...), or "" if there is none.
func Reason(err error) string { return ErrorDetail(err).GetReason() }
