package sidecar

import (
	"context"
	"testing"
	"time"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/translog"
)

// A sidecar started with lease mode and sequenced acks as its defaults
// (serve --fencing-mode lease --ack-order sequenced) applies them to an Open
// that leaves the fields unspecified, and still honours an Open that names
// per_sync and concurrent, the zero values, on purpose.
func TestServerDefaultsApplyOnlyToUnspecifiedModeAndAckOrder(t *testing.T) {
	s, err := New(t.Context(), mem.New(), Options{Defaults: Settings{Mode: translog.Lease, LeaseInterval: 50 * time.Millisecond, AckOrder: translog.Sequenced}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	unspecified, err := settingsFromProto(&sidecarv1.ShardSettings{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Open(t.Context(), "defaults", 1, "a1", unspecified, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Mode != translog.Lease || st.Settings.AckOrder != translog.Sequenced {
		t.Errorf("unspecified fields opened as %v/%v, want the sidecar's defaults lease/sequenced", st.Settings.Mode, st.Settings.AckOrder)
	}

	explicit, err := settingsFromProto(&sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC, AckOrder: sidecarv1.AckOrder_ACK_ORDER_CONCURRENT})
	if err != nil {
		t.Fatal(err)
	}
	st, err = s.Open(t.Context(), "explicit", 1, "a1", explicit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Mode != translog.PerSync || st.Settings.AckOrder != translog.Concurrent {
		t.Errorf("explicit per_sync/concurrent opened as %v/%v", st.Settings.Mode, st.Settings.AckOrder)
	}
}
