package sidecar

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestHandoffMovesTheTermAndAbortResumesOrStandsDown(t *testing.T) {
	store := mem.New()
	src, dst := sidecarOn(t, store), sidecarOn(t, store)
	openShard(t, src, "h", 4, "src")
	var want []string
	for i := range 5 {
		op := fmt.Sprint("s", i)
		if _, err := appendOps(t.Context(), src, "h", op); err != nil {
			t.Fatal(err)
		}
		want = append(want, op)
	}

	// Start and abort before the target adopts: the source resumes.
	hc, err := src.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "h", TargetAllocationId: "dst"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = appendOps(t.Context(), src, "h", "during")
	if code, d := detailOf(t, err); code != connect.CodeFailedPrecondition || d.GetReason() != "handed_off" {
		t.Fatalf("append on a handed-off source: %v", err)
	}
	ab, err := src.AbortHandoff(t.Context(), connect.NewRequest(&sidecarv1.AbortHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()}))
	if err != nil || !ab.Msg.GetResumed() {
		t.Fatalf("abort before adopt: resumed %v, %v", ab.Msg.GetResumed(), err)
	}
	if _, err := appendOps(t.Context(), src, "h", "resumed"); err != nil {
		t.Fatalf("append after the abort: %v", err)
	}
	want = append(want, "resumed")
	// The aborted context no longer adopts: the source took the key back.
	_, err = dst.AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()}))
	if code, d := detailOf(t, err); code != connect.CodeFailedPrecondition || d.GetReason() != "fenced" {
		t.Fatalf("adopt of an aborted handoff: %v", err)
	}

	// Hand off again, adopt, write on the target: an abort now stands down.
	hc, err = src.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "h", TargetAllocationId: "dst", TargetNode: "n2"}))
	if err != nil {
		t.Fatal(err)
	}
	ad, err := dst.AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()}))
	if err != nil {
		t.Fatal(err)
	}
	if st := ad.Msg.GetStatus(); st.GetTerm() != 4 || st.GetAllocationId() != "dst" || st.GetOwner() != "dst" || st.GetNextSeqNo() != 6 {
		t.Fatalf("adopted status %v", st)
	}
	ack, err := appendOps(t.Context(), dst, "h", "t0")
	if err != nil {
		t.Fatal(err)
	}
	if ack.GetTerm() != 4 || ack.GetFirstSeqNo() != 6 {
		t.Errorf("target's first ack %v, want term 4 seq 6", ack)
	}
	want = append(want, "t0")
	ab, err = src.AbortHandoff(t.Context(), connect.NewRequest(&sidecarv1.AbortHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()}))
	if err != nil || ab.Msg.GetResumed() {
		t.Fatalf("abort after the target wrote: resumed %v, %v", ab.Msg.GetResumed(), err)
	}
	got, err := readAll(t, dst, "h", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("target reads %v, want %v", got, want)
	}
}
