package demo

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// refusal is a sidecar's error as a client sees it, with a detail.
func refusal(t *testing.T, d *sidecarv1.ErrorDetail) error {
	t.Helper()
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New(d.GetReason()))
	det, err := connect.NewErrorDetail(d)
	if err != nil {
		t.Fatal(err)
	}
	ce.AddDetail(det)
	return ce
}

func TestWriterRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		fenced   int64
		moved    bool
		firstErr bool
	}{
		{name: "fenced with its successor", err: refusal(t, &sidecarv1.ErrorDetail{Reason: "fenced", SuccessorTerm: 3}), fenced: 3},
		{name: "fenced, successor unknown", err: refusal(t, &sidecarv1.ErrorDetail{Reason: "fenced"}), fenced: 1},
		{name: "handed off", err: refusal(t, &sidecarv1.ErrorDetail{Reason: "handed_off"}), moved: true},
		{name: "handing off", err: refusal(t, &sidecarv1.ErrorDetail{Reason: "handing_off"}), moved: true},
		{name: "another reason", err: refusal(t, &sidecarv1.ErrorDetail{Reason: "not_open"}), firstErr: true},
		{name: "no detail", err: connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), firstErr: true},
		{name: "not a connect error", err: errors.New("boom"), firstErr: true},
	} {
		w := &writer{}
		w.refused(tc.err)
		if w.fenced.Load() != tc.fenced || w.moved.Load() != tc.moved || (w.firstErr.Load() != nil) != tc.firstErr {
			t.Errorf("%s: fenced %d moved %v firstErr %v", tc.name, w.fenced.Load(), w.moved.Load(), w.firstErr.Load())
		}
	}
}

func TestMissing(t *testing.T) {
	a, b := &writer{}, &writer{}
	for _, op := range []string{"a-0-0", "a-0-1"} {
		a.acked.Store(op, true)
	}
	b.acked.Store("b-0-0", true)
	read := map[string]bool{"a-0-0": true, "b-0-0": true, "x": true}
	if n := missing(read, []*writer{a, b}); n != 1 {
		t.Errorf("missing %d, want 1 (a-0-1)", n)
	}
	read["a-0-1"] = true
	if n := missing(read, []*writer{a, b}); n != 0 {
		t.Errorf("missing %d, want 0", n)
	}
}
