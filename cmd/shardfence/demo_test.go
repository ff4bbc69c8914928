package main

import (
	"strings"
	"testing"
	"time"
)

func TestDemoLosesNoAcknowledgedOp(t *testing.T) {
	var out, errOut syncBuffer
	if err := runDemo(t.Context(), []string{"--phase", "400ms", "--clients", "4", "--store", "file://" + t.TempDir()}, &out, &errOut); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"opened shard \"demo\" at term 1", "B opened term 2", "A fenced", "successor term 2", "C adopted term 2", "lost 0", "ok: every acknowledged op is readable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDemoAutoFailsOverByItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master and three sidecar processes")
	}
	var out syncBuffer
	c := thisBinary()
	if err := runDemoAuto(t.Context(), c, "file://"+t.TempDir(), 500*time.Millisecond, &out); err != nil {
		t.Fatalf("demo --auto: %v\n%s", err, out.String())
	}
	for _, want := range []string{"SIGKILL sidecar A", "taken over: term 2", "with no command", "lost 0", "holds nothing", "ok: the shard failed over by itself"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo --auto output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDemoMasterFailsOverByItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three masters and three sidecar processes")
	}
	var out syncBuffer
	c := thisBinary()
	if err := runDemoMasterFailover(t.Context(), c, "file://"+t.TempDir(), 500*time.Millisecond, &out); err != nil {
		t.Fatalf("demo --master-failover: %v\n%s", err, out.String())
	}
	for _, want := range []string{"SIGKILL master M1", "claimed the log at term 2", "with no command", "every shard still open on its node at term 1", "lost 0", "standby of", "ok: the master failed over by itself"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo --master-failover output lacks %q:\n%s", want, out.String())
		}
	}
}
