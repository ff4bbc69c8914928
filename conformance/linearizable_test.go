package conformance

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
)

func TestLinKind(t *testing.T) {
	for _, tc := range []struct {
		draw              int
		conditionalDelete bool
		want              linOpKind
	}{
		{0, false, linGet},
		{34, true, linGet},
		{35, false, linCreate},
		{54, false, linCreate},
		{55, false, linCAS},
		{91, true, linCAS},
		{92, true, linDeleteIfMatch},
		{95, true, linDeleteIfMatch},
		{92, false, linDelete}, // no conditional delete: a plain one
		{96, true, linDelete},
		{99, false, linDelete},
	} {
		if got := linKind(tc.draw, tc.conditionalDelete); got != tc.want {
			t.Errorf("linKind(%d, %v) = %s, want %s", tc.draw, tc.conditionalDelete, got, tc.want)
		}
	}
}

func TestLinExpected(t *testing.T) {
	known := []blobstore.Token{"t1", "t2", "t3"}
	for _, tc := range []struct {
		known []blobstore.Token
		stale int
		want  blobstore.Token
	}{
		{nil, -1, "no-token-yet"},
		{known, -1, "t3"},
		{known, 0, "t1"},
		{known, 2, "t3"},
	} {
		if got := linExpected(tc.known, tc.stale); got != tc.want {
			t.Errorf("linExpected(%v, %d) = %q, want %q", tc.known, tc.stale, got, tc.want)
		}
	}
}

// TestRegisterStep checks the model on the answers that decide a
// history's fate: which states a call can lead to from one state, and the
// answers no register gives.
func TestRegisterStep(t *testing.T) {
	absent := linState{}
	v1 := linState{exists: true, value: "a", token: "t1"}
	unbound := linState{exists: true, value: "a"} // written by an ambiguous call
	out := func(r linResult, value string, tok blobstore.Token) linOutput {
		return linOutput{result: r, value: value, token: tok}
	}
	for _, tc := range []struct {
		name string
		s    linState
		in   linInput
		out  linOutput
		want []linState
	}{
		{"a Get finds the value", v1, linInput{kind: linGet}, out(linOK, "a", "t1"), []linState{v1}},
		{"a Get binds an unbound token", unbound, linInput{kind: linGet}, out(linOK, "a", "t9"), []linState{{exists: true, value: "a", token: "t9"}}},
		{"a Get of another value", v1, linInput{kind: linGet}, out(linOK, "b", "t1"), nil},
		{"a Get that finds nothing where a value is", v1, linInput{kind: linGet}, out(linRefused, "", ""), nil},
		{"a create of an absent key", absent, linInput{kind: linCreate, value: "b"}, out(linOK, "", "t2"), []linState{{exists: true, value: "b", token: "t2"}}},
		{"a create over a value succeeds", v1, linInput{kind: linCreate, value: "b"}, out(linOK, "", "t2"), nil},
		{"a create refused over a value", v1, linInput{kind: linCreate, value: "b"}, out(linRefused, "", ""), []linState{v1}},
		{"an ambiguous create may apply", absent, linInput{kind: linCreate, value: "b"}, out(linUnknown, "", ""), []linState{absent, {exists: true, value: "b"}}},
		{"a CAS on the current token", v1, linInput{kind: linCAS, value: "b", expected: "t1"}, out(linOK, "", "t2"), []linState{{exists: true, value: "b", token: "t2"}}},
		{"a CAS on a stale token succeeds", v1, linInput{kind: linCAS, value: "b", expected: "t0"}, out(linOK, "", "t2"), nil},
		{"a CAS on a stale token refused", v1, linInput{kind: linCAS, value: "b", expected: "t0"}, out(linRefused, "", ""), []linState{v1}},
		{"a CAS on the current token refused", v1, linInput{kind: linCAS, value: "b", expected: "t1"}, out(linRefused, "", ""), nil},
		{"a DeleteIfMatch on the current token", v1, linInput{kind: linDeleteIfMatch, expected: "t1"}, out(linOK, "", ""), []linState{absent}},
		{"an ambiguous Delete", v1, linInput{kind: linDelete}, out(linUnknown, "", ""), []linState{v1, absent}},
		{"no effect changes nothing", v1, linInput{kind: linCAS, value: "b", expected: "t1"}, out(linNoEffect, "", ""), []linState{v1}},
	} {
		got := registerStep(tc.s, tc.in, tc.out)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLinOperation(t *testing.T) {
	for _, tc := range []struct {
		kind    linOpKind
		err     error
		result  linResult
		allowed bool
		ret     int64
	}{
		{linGet, nil, linOK, true, 7},
		{linGet, blobstore.ErrNotFound, linRefused, true, 7},
		{linCreate, blobstore.ErrAlreadyExists, linRefused, true, 7},
		{linCAS, blobstore.ErrPreconditionFailed, linRefused, true, 7},
		{linCAS, blobstore.ErrAlreadyExists, linUnknown, false, math.MaxInt64},
		{linDelete, blobstore.ErrNotFound, linUnknown, false, math.MaxInt64},
		{linCAS, blobstore.Ambiguous(errors.New("timeout")), linUnknown, true, math.MaxInt64},
		{linCreate, blobstore.ErrConflict, linNoEffect, true, 7},
		{linGet, blobstore.Unavailable(errors.New("refused")), linNoEffect, true, 7},
	} {
		op, allowed := linOperation(2, linInput{kind: tc.kind}, linOutput{}, tc.err, 3, 7)
		if o := op.Output.(linOutput); o.result != tc.result || allowed != tc.allowed || op.Return != tc.ret || op.Call != 3 || op.ClientId != 2 {
			t.Errorf("%s answering %v: result %d allowed %v return %d, want %d %v %d", tc.kind, tc.err, o.result, allowed, op.Return, tc.result, tc.allowed, tc.ret)
		}
	}
}
