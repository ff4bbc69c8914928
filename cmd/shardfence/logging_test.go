package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Master and sidecar log one format: JSON lines by default, each with time,
// level, msg, component and node, the same keys for shard and term, and
// "error" (never "err") for an error; --log-format text gives key=value
// lines with the same keys.
func TestOneLogFormatForMasterAndSidecar(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mOut, mErr syncBuffer
	mDone := make(chan error, 1)
	go func() {
		mDone <- runMaster(ctx, []string{"--listen", "127.0.0.1:0", "--store", "file://" + t.TempDir(), "--cluster", "logs", "--node", "m1", "--snapshot-interval", "0"}, &mOut, &mErr)
	}()
	addr, _, sErr := startServeLogs(t, "--store", "file://"+t.TempDir(), "--listen", "127.0.0.1:0", "--node", "n1")
	if r := cli(t, "", "open", "--addr", addr, "--shard", "logs-s1", "--term", "3", "--allocation", "a1"); r.code != 0 {
		t.Fatalf("open: exit %d, %s", r.code, r.stderr)
	}
	waitFor(t, "the master to be primary", func() bool { return strings.Contains(mErr.String(), "master is primary") })

	check := func(who, component, node, log string) (shardTerm bool) {
		t.Helper()
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%s: a log line is not JSON: %q (%v)", who, line, err)
				continue
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("%s: line without %q: %s", who, k, line)
				}
			}
			if rec[logKeyComponent] != component || rec[logKeyNode] != node {
				t.Errorf("%s: line with component %v and node %v, want %s and %s: %s", who, rec[logKeyComponent], rec[logKeyNode], component, node, line)
			}
			if _, ok := rec["err"]; ok {
				t.Errorf(`%s: line with the key "err" (want "error"): %s`, who, line)
			}
			_, hasShard := rec[logKeyShard].(string)
			_, hasTerm := rec[logKeyTerm].(float64)
			shardTerm = shardTerm || hasShard && hasTerm
		}
		return shardTerm
	}
	if !check("sidecar", "sidecar", "n1", sErr.String()) {
		t.Errorf("no sidecar line names a shard and a term under %q and %q:\n%s", logKeyShard, logKeyTerm, sErr.String())
	}
	cancel()
	select {
	case <-mDone:
	case <-time.After(30 * time.Second):
		t.Fatal("master did not stop")
	}
	if !check("master", "master", "m1", mErr.String()) {
		t.Errorf("no master line names a shard and a term under %q and %q:\n%s", logKeyShard, logKeyTerm, mErr.String())
	}

	_, _, text := startServeLogs(t, "--store", "mem://logs-text", "--listen", "127.0.0.1:0", "--node", "n2", "--log-format", "text")
	first, _, _ := strings.Cut(text.String(), "\n")
	if !strings.HasPrefix(first, "time=") || !strings.Contains(first, " level=") || !strings.Contains(first, " component=sidecar node=n2") {
		t.Errorf("--log-format text: first line %q", first)
	}
	if r := cli(t, "", "master", "--log-format", "xml"); r.code != 2 || !strings.Contains(r.stderr, "--log-format") {
		t.Errorf("master --log-format xml: exit %d, %q", r.code, r.stderr)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
