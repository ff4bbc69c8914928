package fleetplan

import (
	"errors"
	"strings"
	"testing"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/ident"
)

func TestCheckRegistration(t *testing.T) {
	ok := Registration{Name: "n1", Addr: "http://10.0.0.1:7400", Session: "s", Store: "s3://b"}
	with := func(f func(*Registration)) Registration { r := ok; f(&r); return r }
	for _, tc := range []struct {
		name     string
		r        Registration
		errPart  string
		hintPart string
	}{
		{name: "ok", r: ok},
		{name: "with an application address", r: with(func(r *Registration) { r.AppAddr = "https://app.example" })},
		{name: "bad name", r: with(func(r *Registration) { r.Name = "-x" }), errPart: "node name", hintPart: "--node"},
		{name: "bad address", r: with(func(r *Registration) { r.Addr = "http://u:p@h" }), errPart: "credentials", hintPart: "--advertise"},
		{name: "bad application address", r: with(func(r *Registration) { r.AppAddr = "ftp://h" }), errPart: "http(s)", hintPart: "--app-advertise"},
		{name: "no session", r: with(func(r *Registration) { r.Session = "" }), errPart: "session"},
		{name: "long session", r: with(func(r *Registration) { r.Session = strings.Repeat("s", 129) }), errPart: "session"},
		{name: "long store", r: with(func(r *Registration) { r.Store = strings.Repeat("s", 1025) }), errPart: "store URL of 1025 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hint, err := CheckRegistration(tc.r)
			check(t, err, hint, tc.errPart, tc.hintPart)
		})
	}
}

func TestCheckAssign(t *testing.T) {
	observe := &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_OBSERVE}
	unfenced := &sidecarv1.ShardSettings{FencingDisabled: true}
	for _, tc := range []struct {
		name     string
		a        Assign
		errPart  string
		hintPart string
	}{
		{name: "ok", a: Assign{Shard: "s", AutoRestore: true, TakeoverAtSuspected: true}},
		{name: "a named node", a: Assign{Shard: "s", Node: "n1", Term: 7}},
		{name: "bad shard", a: Assign{Shard: ""}, errPart: "shard id"},
		{name: "bad node", a: Assign{Shard: "s", Node: "a/b"}, errPart: "node name"},
		{name: "negative term", a: Assign{Shard: "s", Term: -1}, errPart: "term -1"},
		{name: "term past 2^53", a: Assign{Shard: "s", Term: 1 << 53}, errPart: "outside"},
		{name: "settings the owner refuses", a: Assign{Shard: "s", Settings: &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode(99)}}, errPart: "settings: "},
		{name: "unfenced without auto-restore", a: Assign{Shard: "s", Settings: unfenced}},
		{name: "unfenced auto-restore", a: Assign{Shard: "s", Settings: unfenced, AutoRestore: true}, errPart: "unfenced shard is never auto-restored", hintPart: "without auto_restore"},
		{name: "observe auto-restore", a: Assign{Shard: "s", Settings: observe, AutoRestore: true}, errPart: "observe mode", hintPart: "enforce fencing"},
		{name: "takeover at suspected alone", a: Assign{Shard: "s", TakeoverAtSuspected: true}, errPart: "needs auto_restore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hint, err := CheckAssign(tc.a)
			check(t, err, hint, tc.errPart, tc.hintPart)
		})
	}
}

func TestCheckReportFields(t *testing.T) {
	if err := CheckReportFields(64<<10, 4096, 128, 512); err != nil {
		t.Fatalf("fields at their bounds: %v", err)
	}
	for _, l := range [][4]int{{64<<10 + 1, 0, 0, 0}, {0, 4097, 0, 0}, {0, 0, 129, 0}, {0, 0, 0, 513}} {
		if err := CheckReportFields(l[0], l[1], l[2], l[3]); !errors.Is(err, ident.ErrInvalidArgument) {
			t.Errorf("%v: %v", l, err)
		}
	}
}

func check(t *testing.T, err error, hint, errPart, hintPart string) {
	t.Helper()
	if errPart == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if !errors.Is(err, ident.ErrInvalidArgument) || !strings.Contains(err.Error(), errPart) {
		t.Fatalf("err %v, want ErrInvalidArgument with %q", err, errPart)
	}
	if !strings.Contains(hint, hintPart) {
		t.Fatalf("hint %q lacks %q", hint, hintPart)
	}
}
