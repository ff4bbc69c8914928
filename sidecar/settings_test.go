package sidecar

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/translog"
)

// Settings given at Open hold for the shard's life: lease mode skips CASes
// inside the lease, and a second Open of the same term cannot switch them.
// (Open waits out a lease-mode predecessor's lease plus a margin, so the
// lease is short.)
func TestSettingsAreFixedAtOpen(t *testing.T) {
	srv, c := serveOn(t, mem.New(), Options{})
	lease := &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, LeaseIntervalMs: 2000, AckOrder: sidecarv1.AckOrder_ACK_ORDER_SEQUENCED}
	st, err := c.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "l", Term: 1, AllocationId: "a", Settings: lease}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := appendOps(t.Context(), c, "l", "x"); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "l"}))
	if err != nil {
		t.Fatal(err)
	}
	s := res.Msg.GetStatus()
	if s.GetSettings().GetMode() != sidecarv1.FencingMode_FENCING_MODE_LEASE || s.GetSettings().GetAckOrder() != sidecarv1.AckOrder_ACK_ORDER_SEQUENCED ||
		time.Duration(s.GetSettings().GetLeaseIntervalMs())*time.Millisecond != 2*time.Second {
		t.Fatalf("settings after open: %v", s.GetSettings())
	}
	if s.GetSyncs() != 5 {
		t.Fatalf("syncs %d, want 5", s.GetSyncs())
	}
	local, err := srv.Status("l")
	if err != nil {
		t.Fatal(err)
	}
	if local.Stats.LeaseSkips == 0 || local.Settings.Mode != translog.Lease {
		t.Errorf("lease mode skipped no CAS in 5 syncs inside a two-second lease: %+v", local.Stats)
	}
	st, err = c.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "l", Term: 1, AllocationId: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if code, _ := detailOf(t, st.Err()); code != connect.CodeInvalidArgument {
		t.Fatalf("reopen with other settings: %v", st.Err())
	}
}
