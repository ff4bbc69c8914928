package rpcerr

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

func TestDetail(t *testing.T) {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("fenced"))
	for _, m := range []*sidecarv1.ErrorDetail{{Reason: "fenced", SuccessorTerm: 4}} {
		d, err := connect.NewErrorDetail(m)
		if err != nil {
			t.Fatal(err)
		}
		ce.AddDetail(d)
	}
	md, err := connect.NewErrorDetail(&masterv1.ErrorDetail{Reason: "NOT_PRIMARY"})
	if err != nil {
		t.Fatal(err)
	}
	ce.AddDetail(md)
	for _, tc := range []struct {
		name       string
		err        error
		side, mast string
	}{
		{"both details", ce, "fenced", "NOT_PRIMARY"},
		{"wrapped", fmt.Errorf("append: %w", ce), "fenced", "NOT_PRIMARY"},
		{"no detail", connect.NewError(connect.CodeUnavailable, errors.New("down")), "", ""},
		{"not a connect error", errors.New("boom"), "", ""},
		{"nil", nil, "", ""},
	} {
		s, sok := Detail[*sidecarv1.ErrorDetail](tc.err)
		m, mok := Detail[*masterv1.ErrorDetail](tc.err)
		if s.GetReason() != tc.side || m.GetReason() != tc.mast || sok != (tc.side != "") || mok != (tc.mast != "") {
			t.Errorf("%s: sidecar %q (%v), master %q (%v); want %q, %q", tc.name, s.GetReason(), sok, m.GetReason(), mok, tc.side, tc.mast)
		}
	}
	if s, _ := Detail[*sidecarv1.ErrorDetail](ce); s.GetSuccessorTerm() != 4 {
		t.Errorf("successor term %d, want 4", s.GetSuccessorTerm())
	}
}
