package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/sidecar"
)

// Shorthands for the plan tables.
const (
	rOpen      = masterv1.ShardReport_SHARD_REPORT_OPEN
	rFenced    = masterv1.ShardReport_SHARD_REPORT_FENCED
	rHandedOff = masterv1.ShardReport_SHARD_REPORT_HANDED_OFF
)

func assign(term int64, alloc string) *masterv1.NodeAssignment {
	return &masterv1.NodeAssignment{Shard: "s", Term: term, Allocation: alloc}
}

func held(term int64, alloc string, state sidecar.ShardState) sidecar.ShardStatus {
	return sidecar.ShardStatus{Shard: "s", Term: term, Allocation: alloc, State: state, Fenced: state == sidecar.ShardFenced}
}

func TestPlanShard(t *testing.T) {
	badSettings := &sidecarv1.ShardSettings{MaxPipeline: sidecar.MaxPipelineLimit + 1}
	handingTo := func(d *masterv1.NodeAssignment) *masterv1.NodeAssignment {
		d.HandoffAllocation, d.HandoffNode = "t-alloc", "b"
		return d
	}
	adopting := func(d *masterv1.NodeAssignment, ctx string) *masterv1.NodeAssignment {
		d.AdoptAllocation, d.AdoptContext = d.GetAllocation(), []byte(ctx)
		return d
	}
	warm := assign(2, "x")
	warm.Warm = true
	badOpen := assign(2, "x")
	badOpen.Settings = badSettings
	badAdopt := adopting(assign(2, "x"), "ctx")
	badAdopt.Settings = badSettings
	for _, c := range []struct {
		name string
		v    shardView
		want string // action.String(), "" for none
	}{
		// Not assigned here.
		{"neither assigned nor held", shardView{}, `forget s term 0 alloc ""`},
		{"held open, not assigned", shardView{Here: true, Local: held(3, "a", sidecar.ShardOpen)}, `close s term 3 alloc "a" from open`},
		{"held fenced, not assigned", shardView{Here: true, Local: held(3, "a", sidecar.ShardFenced)}, `close s term 3 alloc "a" from fenced`},
		{"held handed off, not assigned", shardView{Here: true, Local: held(3, "a", sidecar.ShardHandedOff), Handoff: []byte("h")}, `close s term 3 alloc "a" from handed_off`},

		// Assigned, not held at the assigned term and allocation: open.
		{"gained", shardView{Desired: assign(2, "x")}, `open s term 2 alloc "x"`},
		{"gained warm", shardView{Desired: warm}, `open s term 2 alloc "x" warm`},
		{"held below the assigned term", shardView{Desired: assign(2, "x"), Here: true, Local: held(1, "x", sidecar.ShardOpen)}, `open s term 2 alloc "x"`},
		{"held at the term, another allocation", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "y", sidecar.ShardOpen)}, `open s term 2 alloc "x"`},
		{"failed at the assigned term", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardFailed)}, `open s term 2 alloc "x"`},
		{"invalid settings", shardView{Desired: badOpen}, `fail s term 2 alloc "x": ` + settingsErr(badSettings)},

		// Held above the assigned term (an operator's open): say so, once.
		{"held above the assigned term", shardView{Desired: assign(2, "x"), Here: true, Local: held(5, "z", sidecar.ShardOpen)}, `report s term 2 alloc "x" SHARD_REPORT_FENCED`},
		{"held above, reported", shardView{Desired: assign(2, "x"), Here: true, Local: held(5, "z", sidecar.ShardOpen), Reported: reportKey(2, "x", rFenced)}, ""},

		// Held at the assigned term and allocation.
		{"open", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardOpen)}, `report s term 2 alloc "x" SHARD_REPORT_OPEN`},
		{"open, reported", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardOpen), Reported: reportKey(2, "x", rOpen)}, ""},
		{"open, reported at an older term", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardOpen), Reported: reportKey(1, "x", rOpen)}, `report s term 2 alloc "x" SHARD_REPORT_OPEN`},
		{"fenced", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardFenced)}, `report s term 2 alloc "x" SHARD_REPORT_FENCED`},
		{"fenced, reported", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardFenced), Reported: reportKey(2, "x", rFenced)}, ""},
		{"opening", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardOpening)}, ""},
		{"closing", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardClosing)}, ""},
		{"handing off, nothing to take back", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardHandingOff)}, ""},

		// A drain or a move takes the shard off this node.
		{"hand off", shardView{Desired: handingTo(assign(2, "x")), Here: true, Local: held(2, "x", sidecar.ShardOpen)}, `hand off s term 2 alloc "x" to "t-alloc" on "b"`},
		{"handed off: report it", shardView{Desired: handingTo(assign(2, "x")), Here: true, Local: held(2, "x", sidecar.ShardHandedOff), Handoff: []byte("h")}, `report s term 2 alloc "x" SHARD_REPORT_HANDED_OFF context "h"`},
		{"handed off, reported", shardView{Desired: handingTo(assign(2, "x")), Here: true, Local: held(2, "x", sidecar.ShardHandedOff), Handoff: []byte("h"), Reported: reportKey(2, "x", rHandedOff)}, ""},
		{"handed off, context forgotten: hand off again", shardView{Desired: handingTo(assign(2, "x")), Here: true, Local: held(2, "x", sidecar.ShardHandedOff)}, `hand off s term 2 alloc "x" to "t-alloc" on "b"`},
		{"handing off in progress", shardView{Desired: handingTo(assign(2, "x")), Here: true, Local: held(2, "x", sidecar.ShardHandingOff), Handoff: []byte("h")}, ""},
		{"hand off, not held at the term", shardView{Desired: handingTo(assign(2, "x")), Here: true, Local: held(1, "x", sidecar.ShardOpen)}, `open s term 2 alloc "x"`},

		// The master cancelled the hand-off: take the shard back.
		{"cancelled after the hand-off", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardHandedOff), Handoff: []byte("h")}, `abort hand-off s term 2 alloc "x" context "h"`},
		{"cancelled during the hand-off", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardHandingOff), Handoff: []byte("h")}, `abort hand-off s term 2 alloc "x" context "h"`},
		{"cancelled, no context to take back", shardView{Desired: assign(2, "x"), Here: true, Local: held(2, "x", sidecar.ShardHandedOff)}, `open s term 2 alloc "x"`},

		// The target of a drain or a move.
		{"adopt: the source has not handed off", shardView{Desired: adopting(assign(2, "x"), "")}, ""},
		{"adopt", shardView{Desired: adopting(assign(2, "x"), "ctx")}, `adopt s term 2 alloc "x" context "ctx"`},
		{"adopt over an old term held here", shardView{Desired: adopting(assign(2, "x"), "ctx"), Here: true, Local: held(1, "w", sidecar.ShardHandedOff)}, `adopt s term 2 alloc "x" context "ctx"`},
		{"adopted and open", shardView{Desired: adopting(assign(2, "x"), "ctx"), Here: true, Local: held(2, "x", sidecar.ShardOpen)}, `report s term 2 alloc "x" SHARD_REPORT_OPEN`},
		{"adopted and open, reported", shardView{Desired: adopting(assign(2, "x"), "ctx"), Here: true, Local: held(2, "x", sidecar.ShardOpen), Reported: reportKey(2, "x", rOpen)}, ""},
		{"adopted and open before the context came", shardView{Desired: adopting(assign(2, "x"), ""), Here: true, Local: held(2, "x", sidecar.ShardOpen)}, `report s term 2 alloc "x" SHARD_REPORT_OPEN`},
		{"adopt with invalid settings", shardView{Desired: badAdopt}, `fail s term 2 alloc "x": ` + settingsErr(badSettings)},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, ok := planShard("s", c.v)
			got := ""
			if ok {
				got = x.String()
				if x.Why == "" {
					t.Errorf("%s: no reason given", got)
				}
			}
			if got != c.want {
				t.Errorf("planShard = %q, want %q", got, c.want)
			}
		})
	}
}

func settingsErr(p *sidecarv1.ShardSettings) string {
	_, err := sidecar.SettingsFromProto(p)
	if err == nil {
		panic("settings expected to be invalid")
	}
	return err.Error()
}

// TestPlanCarriesTheSettings: an open and an adoption run the
// assignment's settings, and a failure carries the cause.
func TestPlanCarriesTheSettings(t *testing.T) {
	p := &sidecarv1.ShardSettings{MaxPipeline: 7, LeaseIntervalMs: 250}
	d := assign(2, "x")
	d.Settings = p
	want, err := sidecar.SettingsFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := planShard("s", shardView{Desired: d})
	if x.Kind != actOpen || x.Settings != want {
		t.Fatalf("open: %v with %+v, want settings %+v", x, x.Settings, want)
	}
	d.AdoptAllocation, d.AdoptContext = "x", []byte("ctx")
	x, _ = planShard("s", shardView{Desired: d})
	if x.Kind != actAdopt || x.Settings != want {
		t.Fatalf("adopt: %v with %+v, want settings %+v", x, x.Settings, want)
	}
	d.Settings = &sidecarv1.ShardSettings{MaxPipeline: -1}
	x, _ = planShard("s", shardView{Desired: d})
	if x.Kind != actFail || !errors.Is(x.Err, sidecar.ErrInvalidArgument) {
		t.Fatalf("invalid settings: %v (%v), want a failure on ErrInvalidArgument", x, x.Err)
	}
}

// TestPlan: one action per shard in name order; none for a shard whose
// last action runs or waits out its back-off.
func TestPlan(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	open := func(term int64) shardView {
		return shardView{Desired: assign(term, "x"), Here: true, Local: held(term, "x", sidecar.ShardOpen)}
	}
	for _, c := range []struct {
		name   string
		shards map[string]shardView
		want   []string
	}{
		{"nothing", nil, nil},
		{"in name order", map[string]shardView{
			"c": {Desired: assign(1, "x")},
			"a": {Here: true, Local: held(4, "y", sidecar.ShardOpen)},
			"b": open(2),
			"d": {},
		}, []string{
			`close a term 4 alloc "y" from open`,
			`report b term 2 alloc "x" SHARD_REPORT_OPEN`,
			`open c term 1 alloc "x"`,
			`forget d term 0 alloc ""`,
		}},
		{"busy", map[string]shardView{
			"a": {Desired: assign(1, "x"), Busy: true},
			"b": {Busy: true},
			"c": {Desired: assign(1, "x")},
		}, []string{`open c term 1 alloc "x"`}},
		{"backing off", map[string]shardView{
			"a": {Desired: assign(1, "x"), NotBefore: now.Add(time.Millisecond)},
			"b": {Desired: assign(1, "x"), NotBefore: now},
			"c": {Desired: assign(1, "x"), NotBefore: now.Add(-time.Second)},
		}, []string{`open b term 1 alloc "x"`, `open c term 1 alloc "x"`}},
		{"nothing to do", map[string]shardView{
			"a": {Desired: assign(1, "x"), Here: true, Local: held(1, "x", sidecar.ShardOpening)},
			"b": func() shardView { v := open(3); v.Reported = reportKey(3, "x", rOpen); return v }(),
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, x := range plan(now, c.shards) {
				if !strings.HasPrefix(x.String(), fmt.Sprint(x.Kind, " ", x.Shard, " ")) {
					t.Errorf("action %v is not about its shard %s", x, x.Shard)
				}
				got = append(got, x.String())
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func masterErr(code connect.Code, reason string) error {
	err := connect.NewError(code, errors.New(strings.ToLower(reason)))
	if reason != "" {
		d, derr := connect.NewErrorDetail(&masterv1.ErrorDetail{Reason: reason})
		if derr != nil {
			panic(derr)
		}
		err.AddDetail(d)
	}
	return err
}

func TestAfterSession(t *testing.T) {
	reregister := fmt.Errorf("%w: ping answered NEED_REMOUNT", errReregister)
	for _, c := range []struct {
		name       string
		err        error
		registered bool
		wait       sessionWait
		avoid      bool
		level      slog.Level // with a message
		quiet      bool       // no message
		throttle   bool
	}{
		{"credentials refused", masterErr(connect.CodeUnauthenticated, ""), false, waitBackoff, false, slog.LevelError, false, false},
		{"permission denied", masterErr(connect.CodePermissionDenied, ""), false, waitBackoff, false, slog.LevelError, false, false},
		{"credentials refused mid-session", masterErr(connect.CodeUnauthenticated, ""), true, waitBackoff, false, slog.LevelError, false, false},
		{"TLS handshake", errors.New("register with m: remote error: tls: bad certificate"), false, waitBackoff, false, slog.LevelError, false, false},
		{"unknown authority", errors.New("register with m: x509: certificate signed by unknown authority"), false, waitBackoff, false, slog.LevelError, false, false},
		{"node name held", masterErr(connect.CodeAlreadyExists, "NODE_HELD"), false, waitPace, false, slog.LevelError, false, true},
		{"registered, then asked to register again", reregister, true, waitNone, false, slog.LevelInfo, false, false},
		{"registered, then lost the master", masterErr(connect.CodeUnavailable, ""), true, waitNone, false, slog.LevelWarn, false, false},
		{"registered, then a standby answered", masterErr(connect.CodeUnavailable, "NOT_PRIMARY"), true, waitNone, false, slog.LevelWarn, false, false},
		{"still being offboarded", fmt.Errorf("%w: offboarding", errReregister), false, waitRetryBase, false, 0, true, false},
		{"a standby", masterErr(connect.CodeUnavailable, "NOT_PRIMARY"), false, waitPace, true, slog.LevelInfo, false, false},
		{"a fenced master", masterErr(connect.CodeUnavailable, "FENCED"), false, waitPace, true, slog.LevelInfo, false, false},
		{"a master opening its log", masterErr(connect.CodeUnavailable, "LOG_FAILED"), false, waitPace, true, slog.LevelInfo, false, false},
		{"NOT_PRIMARY under another code", masterErr(connect.CodeInternal, "NOT_PRIMARY"), false, waitPace, false, slog.LevelWarn, false, false},
		{"timed out", masterErr(connect.CodeDeadlineExceeded, ""), false, waitPace, true, slog.LevelWarn, false, false},
		{"connection refused", masterErr(connect.CodeUnavailable, ""), false, waitPace, false, slog.LevelWarn, false, false},
		{"the stream ended", errors.New("the master ended the assignment stream"), false, waitPace, false, slog.LevelWarn, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := afterSession(c.err, c.registered)
			if e.Wait != c.wait || e.Avoid != c.avoid || e.Throttle != c.throttle {
				t.Errorf("afterSession = wait %d avoid %v throttle %v, want wait %d avoid %v throttle %v", e.Wait, e.Avoid, e.Throttle, c.wait, c.avoid, c.throttle)
			}
			if c.quiet {
				if e.Msg != "" {
					t.Errorf("logs %q, want nothing", e.Msg)
				}
			} else if e.Msg == "" || e.Level != c.level {
				t.Errorf("logs %q at %v, want a message at %v", e.Msg, e.Level, c.level)
			}
		})
	}
}
