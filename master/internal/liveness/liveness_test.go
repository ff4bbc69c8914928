package liveness

import (
	"errors"
	"testing"
	"time"

	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/master/internal/steadytime"
)

// The state machine alone, on a hand-moved steady clock: 10 s / 20 s TTLs,
// a 1 s monitor, passes run by the test as the monitor would.

type harness struct {
	t   *testing.T
	now steadytime.Time
	l   *Table
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, now: 1_000_000_000}
	cfg := Config{ActiveTTL: 10 * time.Second, SuspicionTTL: 20 * time.Second, MonitorInterval: time.Second}.WithDefaults()
	h.l = New(cfg, func() steadytime.Time { return h.now })
	return h
}

// tick advances d in monitor-interval steps with a pass after each, and
// returns every pass.
func (h *harness) tick(d time.Duration) []Pass {
	var out []Pass
	for ; d > 0; d -= time.Second {
		h.now = h.now.Add(time.Second)
		out = append(out, h.l.Pass(h.now))
	}
	return out
}

func (h *harness) mount(client string) *Record {
	h.t.Helper()
	r, _, err := h.l.Signal(client, true)
	if err != nil || r == nil {
		h.t.Fatalf("mount of %s: %v, %v", client, r, err)
	}
	return r
}

func (h *harness) want(client string, s State) {
	h.t.Helper()
	if got := h.l.Record(client).State(); got != s {
		h.t.Fatalf("%s: %v, want %v", client, got, s)
	}
}

func TestActiveSuspectedOfflineOnTheTTLs(t *testing.T) {
	h := newHarness(t)
	h.l.Pass(h.now)
	r := h.mount("c1")
	h.tick(9 * time.Second)
	h.want("c1", Active)
	ps := h.tick(time.Second)
	if p := ps[0]; len(p.Suspected) != 1 || p.Suspected[0] != r || p.SinceSignal(0) != 10*time.Second {
		t.Fatalf("pass at the active TTL: %+v", p)
	}
	ps = h.tick(20 * time.Second)
	for i, p := range ps[:19] {
		if len(p.Offline) != 0 {
			t.Fatalf("pass %d s into the suspicion window offered %v", i+1, p.Offline)
		}
	}
	if p := ps[19]; len(p.Offline) != 1 || p.Offline[0] != r {
		t.Fatalf("pass at the suspicion TTL: %+v", p)
	}
	// The pass only offers it; GoOffline commits, once.
	h.want("c1", Suspected)
	var since, suspected time.Duration
	ok := h.l.GoOffline(r, h.now, func(s, d time.Duration) func() string {
		since, suspected = s, d
		return func() string { return "queued" }
	})
	if !ok || since != 30*time.Second || suspected != 20*time.Second {
		t.Fatalf("GoOffline: %v, silent %v, suspected %v", ok, since, suspected)
	}
	h.want("c1", Offline)
	if h.l.GoOffline(r, h.now, func(time.Duration, time.Duration) func() string { t.Fatal("prepared twice"); return nil }) {
		t.Fatal("an Offline record went offline again")
	}
	if st := h.l.Snapshot(); len(st) != 1 || st[0].State != Offline || st[0].Offboarding != "queued" {
		t.Fatalf("snapshot %+v", st)
	}
	if _, _, err := h.l.Signal("c1", true); !errors.Is(err, ErrClientOffline) {
		t.Fatalf("mount of an offline client: %v", err)
	}
	h.l.Forget(r)
	if r2 := h.mount("c1"); r2 == r || r2.Incarnation() <= r.Incarnation() {
		t.Fatalf("mount after forget: incarnation %d (old %d)", r2.Incarnation(), r.Incarnation())
	}
}

func TestSignalRecoversSuspected(t *testing.T) {
	h := newHarness(t)
	h.l.Pass(h.now)
	r := h.mount("c1")
	h.tick(15 * time.Second)
	h.want("c1", Suspected)
	got, rc, err := h.l.Signal("c1", false)
	if err != nil || got != r || rc == nil || rc.Client != "c1" || rc.SinceSignal != 15*time.Second || rc.SuspectedFor != 5*time.Second {
		t.Fatalf("ping while suspected: %v %+v %v", got, rc, err)
	}
	h.want("c1", Active)
	// A recovered record is no longer offered for offboarding.
	if h.l.GoOffline(r, h.now, func(time.Duration, time.Duration) func() string { return nil }) {
		t.Fatal("an Active record went offline")
	}
	if st := h.l.Snapshot(); st[0].Recoveries != 1 {
		t.Fatalf("snapshot %+v", st)
	}
	// A ping never creates a record; only a mount does.
	if r, rc, err := h.l.Signal("stranger", false); r != nil || rc != nil || err != nil {
		t.Fatalf("ping from an unknown client: %v %v %v", r, rc, err)
	}
}

// A pass after a gap past StallAfter does not count the gap against
// anyone: the window left when the monitor last looked is kept.
func TestStallIsNotCounted(t *testing.T) {
	h := newHarness(t)
	h.l.Pass(h.now)
	h.mount("c1")
	h.tick(5 * time.Second)
	h.now = h.now.Add(time.Hour)
	if p := h.l.Pass(h.now); !p.Stalled || p.Unobserved != time.Hour-time.Second || len(p.Suspected) != 0 {
		t.Fatalf("pass after the stall: %+v", p)
	}
	h.tick(3 * time.Second)
	h.want("c1", Active)
	h.tick(time.Second)
	h.want("c1", Suspected)
	if _, stalls := h.l.Counts(); stalls != 1 {
		t.Fatalf("stalls %d", stalls)
	}
}

// Restored windows run only from the first signal the master hears.
func TestRestoredWindowsRunFromTheFirstSignal(t *testing.T) {
	h := newHarness(t)
	if n := h.l.Restore([]string{"c1", "c2"}); n != 2 {
		t.Fatalf("restored %d", n)
	}
	if n := h.l.Restore([]string{"c1"}); n != 0 {
		t.Fatalf("restored a known client again: %d", n)
	}
	h.l.Pass(h.now)
	h.tick(40 * time.Second)
	h.want("c1", Active)
	h.want("c2", Active)
	if !h.l.Record("c2").Restored() {
		t.Fatal("a restored record is not marked restored")
	}
	if _, _, err := h.l.Signal("c1", false); err != nil {
		t.Fatal(err)
	}
	h.tick(9 * time.Second)
	h.want("c2", Active)
	h.tick(time.Second)
	h.want("c2", Suspected)
	if states, _ := h.l.Counts(); states[Suspected] != 2 {
		t.Fatalf("counts %v", states)
	}
}

// A restarted process replaces its live incarnation without offboarding.
func TestReplace(t *testing.T) {
	h := newHarness(t)
	old := h.mount("node/a")
	r := h.l.Replace(old)
	if r == old || old.State() != Offline || r.State() != Active || h.l.Record("node/a") != r {
		t.Fatalf("replace: old %v new %v", old.State(), r.State())
	}
	if again := h.l.Replace(old); again != r {
		t.Fatal("replacing a replaced record started another incarnation")
	}
	if quiet, ok := h.l.Held(r, time.Second); !ok || quiet != 0 {
		t.Fatalf("held %v %v", quiet, ok)
	}
	if _, ok := h.l.Held(old, time.Hour); ok {
		t.Fatal("an Offline record holds its name")
	}
}

func TestResolveTTLs(t *testing.T) {
	d := func(s int) *time.Duration { v := time.Duration(s) * time.Second; return &v }
	for _, c := range []struct {
		name              string
		f                 TTLFlags
		active, suspicion int
		warnings          int
	}{
		{"defaults", TTLFlags{}, 10, 20, 0},
		{"active only: suspicion inherits", TTLFlags{Active: d(4)}, 4, 4, 0},
		{"legacy only: alias, suspicion inherits", TTLFlags{Legacy: d(7)}, 7, 7, 1},
		{"legacy and suspicion", TTLFlags{Legacy: d(7), Suspicion: d(30)}, 7, 30, 1},
		{"active wins over legacy", TTLFlags{Active: d(5), Legacy: d(9)}, 5, 5, 1},
		{"both explicit", TTLFlags{Active: d(3), Suspicion: d(6)}, 3, 6, 0},
		{"suspicion only", TTLFlags{Suspicion: d(40)}, 10, 40, 0},
	} {
		a, s, w := ResolveTTLs(c.f)
		if a != time.Duration(c.active)*time.Second || s != time.Duration(c.suspicion)*time.Second || len(w) != c.warnings {
			t.Errorf("%s: active %v suspicion %v warnings %q", c.name, a, s, w)
		}
	}
}

func TestConfigDefaultsAndRanges(t *testing.T) {
	for _, c := range []struct {
		in             Config
		monitor, stall time.Duration
	}{
		{Config{}, time.Second, 3 * time.Second},
		{Config{ActiveTTL: time.Second, SuspicionTTL: 5 * time.Second}, 100 * time.Millisecond, 300 * time.Millisecond},
		{Config{ActiveTTL: 20 * time.Millisecond}, 10 * time.Millisecond, 30 * time.Millisecond},
	} {
		got := c.in.WithDefaults()
		if got.MonitorInterval != c.monitor || got.StallAfter != c.stall || got.Validate() != nil {
			t.Errorf("%+v: defaults %+v (%v)", c.in, got, got.Validate())
		}
	}
	for _, c := range []Config{
		{ActiveTTL: time.Millisecond},
		{SuspicionTTL: 48 * time.Hour},
		{ActiveTTL: time.Second, MonitorInterval: 2 * time.Second},
		{MonitorInterval: time.Second, StallAfter: time.Second},
		{MonitorInterval: time.Nanosecond},
	} {
		if err := c.WithDefaults().Validate(); !errors.Is(err, ident.ErrInvalidArgument) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
