package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/translog"
)

// The CLI clients against a serve command: open, append from stdin and
// --op, read back, status, inspect through the sidecar and straight from
// the store, hand off to a second sidecar, close.
func TestClientCommands(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + dir
	addr, _ := startServe(t, "--store", store, "--listen", "127.0.0.1:0")
	addr2, _ := startServe(t, "--store", store, "--listen", "127.0.0.1:0")
	run := func(f func(*syncBuffer, *syncBuffer) error) string {
		t.Helper()
		var out, errOut syncBuffer
		if err := f(&out, &errOut); err != nil {
			t.Fatalf("%v\nstderr: %s", err, errOut.String())
		}
		return out.String()
	}
	out := run(func(o, e *syncBuffer) error {
		return runOpen(t.Context(), []string{"--addr", addr, "--shard", "cli", "--term", "1", "--allocation", "a1"}, o, e)
	})
	if !strings.Contains(out, "opened shard cli at term 1") {
		t.Errorf("open printed %q", out)
	}
	out = run(func(o, e *syncBuffer) error {
		return appendFrom(t.Context(), []string{"--addr", addr, "--shard", "cli", "--batch", "2"}, strings.NewReader("one\ntwo\nthree\n"), o, e)
	})
	if strings.Count(out, "acked") != 2 || !strings.Contains(out, "seq 2..2") {
		t.Errorf("append from stdin printed %q", out)
	}
	run(func(o, e *syncBuffer) error {
		return appendFrom(t.Context(), []string{"--addr", addr, "--shard", "cli", "--op", "four", "--json"}, strings.NewReader(""), o, e)
	})
	out = run(func(o, e *syncBuffer) error {
		return runRead(t.Context(), []string{"--addr", addr, "--shard", "cli", "--from", "1"}, o, e)
	})
	if out != "two\nthree\nfour\n" {
		t.Errorf("read from 1 printed %q", out)
	}
	out = run(func(o, e *syncBuffer) error {
		return runStatus(t.Context(), []string{"--addr", addr, "--shard", "cli"}, o, e)
	})
	for _, want := range []string{`term\s+1\n`, `next seq\s+4\n`, `fenced\s+no\n`, `mode\s+per_sync\n`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out = run(func(o, e *syncBuffer) error {
		return runInspect(t.Context(), []string{"--store", store, "--shard", "cli"}, o, e)
	})
	if !strings.Contains(out, "seal marker of term 1") || !strings.Contains(out, "a1") {
		t.Errorf("inspect --store printed:\n%s", out)
	}

	ctxFile := filepath.Join(t.TempDir(), "handoff.ctx")
	out = run(func(o, e *syncBuffer) error {
		return runHandoff(t.Context(), []string{"start", "--addr", addr, "--shard", "cli", "--target-allocation", "a2"}, o, e)
	})
	if err := os.WriteFile(ctxFile, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	out = run(func(o, e *syncBuffer) error {
		return runHandoff(t.Context(), []string{"adopt", "--addr", addr2, "--context-file", ctxFile}, o, e)
	})
	if !regexp.MustCompile(`allocation\s+a2\n`).MatchString(out) {
		t.Errorf("adopt printed:\n%s", out)
	}
	var o, e syncBuffer
	err := appendFrom(t.Context(), []string{"--addr", addr, "--shard", "cli", "--op", "x"}, strings.NewReader(""), &o, &e)
	if err == nil || !strings.Contains(err.Error(), "[handed_off]") {
		t.Errorf("append on the old source: %v", err)
	}
	run(func(o, e *syncBuffer) error {
		return appendFrom(t.Context(), []string{"--addr", addr2, "--shard", "cli", "--op", "five"}, strings.NewReader(""), o, e)
	})
	out = run(func(o, e *syncBuffer) error {
		return runRead(t.Context(), []string{"--addr", addr2, "--shard", "cli"}, o, e)
	})
	if out != "one\ntwo\nthree\nfour\nfive\n" {
		t.Errorf("read on the target printed %q", out)
	}
	out = run(func(o, e *syncBuffer) error {
		return runClose(t.Context(), []string{"--addr", addr2, "--shard", "cli"}, o, e)
	})
	if !strings.Contains(out, "closed") {
		t.Errorf("close printed:\n%s", out)
	}
	if err := runStatus(t.Context(), []string{"--addr", addr2, "--shard", "cli"}, &o, &e); err == nil || !strings.Contains(err.Error(), "not_open") {
		t.Errorf("status after close: %v", err)
	}
	if err := runOpen(t.Context(), []string{"--addr", addr2, "--shard", "cli"}, &o, &e); err == nil || !strings.Contains(err.Error(), "--term") {
		t.Errorf("open without a term: %v", err)
	}
}

// open sends --fencing-mode and --ack-order as the API's enums by number:
// the API and translog number them alike (0 unspecified).
func TestModeNumbersMatchTheAPI(t *testing.T) {
	for _, m := range []translog.FencingMode{translog.PerSync, translog.Lease, translog.CreateOnly, translog.Observe} {
		if got, want := sidecarv1.FencingMode(m).String(), "FENCING_MODE_"+strings.ToUpper(m.String()); got != want {
			t.Errorf("fencing mode %v is %s in the API, want %s", m, got, want)
		}
		// open and master assign send what --fencing-mode names.
		if got, err := parseModeProto(m.String()); err != nil || got.String() != "FENCING_MODE_"+strings.ToUpper(m.String()) {
			t.Errorf("--fencing-mode %s is sent as %v (%v)", m, got, err)
		}
	}
	for _, o := range []translog.AckOrder{translog.Concurrent, translog.Sequenced} {
		if got, want := sidecarv1.AckOrder(o).String(), "ACK_ORDER_"+strings.ToUpper(o.String()); got != want {
			t.Errorf("ack order %v is %s in the API, want %s", o, got, want)
		}
		// open and master assign send what --ack-order names.
		if got, err := parseAckOrderProto(o.String()); err != nil || got.String() != "ACK_ORDER_"+strings.ToUpper(o.String()) {
			t.Errorf("--ack-order %s is sent as %v (%v)", o, got, err)
		}
	}
}

// open --warm lists the checkpoint's files, read-file reads them on
// demand, status shows the locality.
func TestWarmCommands(t *testing.T) {
	store := "file://" + t.TempDir()
	addr, _ := startServe(t, "--store", store, "--listen", "127.0.0.1:0")
	addr2, _ := startServe(t, "--store", store, "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--cache-block-bytes", "4096")
	var o, e syncBuffer
	if err := runOpen(t.Context(), []string{"--addr", addr, "--shard", "w", "--term", "1", "--allocation", "a1"}, &o, &e); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ack, err := c.Shard("w").Append(t.Context(), []byte("op"))
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("0123456789", 1000)
	if _, err := c.API().PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "w", Gen: ack.Gen,
		Files: []*sidecarv1.CheckpointFile{{Name: "seg", Data: []byte(data), Last: true}}})); err != nil {
		t.Fatal(err)
	}
	o = syncBuffer{}
	if err := runOpen(t.Context(), []string{"--addr", addr2, "--shard", "w", "--term", "2", "--allocation", "a2", "--warm"}, &o, &e); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`1 files served on demand[^\n]*\n  seg\s+10000 bytes`).MatchString(o.String()) {
		t.Errorf("open --warm printed:\n%s", o.String())
	}
	o = syncBuffer{}
	if err := runReadFile(t.Context(), []string{"--addr", addr2, "--shard", "w", "--file", "seg", "--offset", "4094", "--length", "5"}, &o, &e); err != nil || o.String() != "45678" {
		t.Fatalf("read-file printed %q: %v", o.String(), err)
	}
	if err := runReadFile(t.Context(), []string{"--addr", addr2, "--shard", "w", "--file", "seg", "--offset", "9999", "--length", "2"}, &o, &e); err == nil || !strings.Contains(err.Error(), "out_of_range") {
		t.Errorf("read-file past the end: %v", err)
	}
	o = syncBuffer{}
	if err := runStatus(t.Context(), []string{"--addr", addr2, "--shard", "w"}, &o, &e); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`locality\s+(partial|full)\n`).MatchString(o.String()) || !strings.Contains(o.String(), "block cache") {
		t.Errorf("status printed:\n%s", o.String())
	}
}
