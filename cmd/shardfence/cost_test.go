package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// costColumn finds the table line of mode and returns its column fromEnd
// places before the last (0: $/shard-month without --budget).
func costColumn(t *testing.T, out, mode string, fromEnd int) float64 {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "* "))
		if len(f) > fromEnd && f[0] == mode {
			v, err := strconv.ParseFloat(f[len(f)-1-fromEnd], 64)
			if err != nil {
				t.Fatalf("%s: column %d of %q: %v", mode, fromEnd, line, err)
			}
			return v
		}
	}
	t.Fatalf("no row for %s in:\n%s", mode, out)
	return 0
}

// The worked example of docs/OPERATIONS.md: one shard at 100 syncs/s on S3
// Standard, every mode side by side, the chosen one marked, the source of
// each requests-per-sync figure named.
func TestCostWorkedExample(t *testing.T) {
	code, out, errOut := runCmd(t, "cost", "--syncs-per-second", "100", "--checkpoint-every", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for mode, usd := range map[string]float64{"per_sync": 2628.00, "observe": 2628.00, "create_only": 1340.28, "unfenced": 1314.00} {
		if got := costColumn(t, out, mode, 0); got != usd {
			t.Errorf("%s: $%.2f, want $%.2f\n%s", mode, got, usd, out)
		}
	}
	if !regexp.MustCompile(`lease \(10s\) .* 1315\.31\n`).MatchString(out) {
		t.Errorf("lease row:\n%s", out)
	}
	for _, want := range []string{"* per_sync", "aws/s3-standard", "protocol: md create + fence CAS", "a fence key GET every 4 syncs", "2026-"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A budget: which modes fit, and at what sync rate the others would.
	code, out, _ = runCmd(t, "cost", "--checkpoint-every", "0", "--budget", "1000", "--fencing-mode", "lease")
	if code != 0 || !strings.Contains(out, "per_sync fits at up to 38.05 syncs/s: a sync every 26ms or longer") || !strings.Contains(out, "* lease (10s)") {
		t.Errorf("--budget 1000:\n%s", out)
	}
	code, out, _ = runCmd(t, "cost", "--checkpoint-every", "0", "--syncs-per-second", "10", "--budget", "1000")
	if code != 0 || !strings.Contains(out, "per_sync fits ($262.80)") {
		t.Errorf("--budget 1000 at 10 syncs/s:\n%s", out)
	}

	// Other providers, overrides, a price file, JSON.
	code, out, _ = runCmd(t, "cost", "--provider", "gcp", "--checkpoint-every", "0", "--put-per-1k", "0.01")
	if code != 0 || costColumn(t, out, "per_sync", 0) != 5256.00 || !strings.Contains(out, "overridden by --put-per-1k") {
		t.Errorf("gcp with --put-per-1k 0.01:\n%s", out)
	}
	_, table, _ := runCmd(t, "cost", "--show-prices")
	file := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(file, []byte(strings.Replace(table, `"put_per_1k": 0.005,`, `"put_per_1k": 0.05,`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCmd(t, "cost", "--prices", file, "--checkpoint-every", "0", "--json")
	var doc struct {
		Modes []struct {
			Mode     string  `json:"mode"`
			TotalUSD float64 `json:"total_usd"`
		} `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Modes) != 5 || doc.Modes[0].Mode != "per_sync" || int(doc.Modes[0].TotalUSD) != 26280 {
		t.Errorf("--prices with a tenfold PUT price, --json: exit %d, %v\n%s", code, err, out)
	}
	for _, bad := range [][]string{{"cost", "--provider", "nope"}, {"cost", "--fencing-mode", "fast"}, {"cost", "--syncs-per-second", "-1"}, {"cost", "--prices", "/nonexistent"}} {
		if code, _, _ := runCmd(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// --addr prices a live sidecar: its syncs per second per shard and its own
// store requests per sync, counted between two scrapes while it appends.
func TestCostOfALiveSidecar(t *testing.T) {
	addr, _ := startServe(t, "--store", "file://"+t.TempDir(), "--listen", "127.0.0.1:0")
	if r := cli(t, "", "open", "--addr", addr, "--shard", "c1", "--term", "1", "--allocation", "a1"); r.code != 0 {
		t.Fatalf("open: %s", r.stderr)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if r := cli(t, "", "append", "--addr", addr, "--shard", "c1", "--op", "x"); r.code != 0 {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	code, out, errOut := runCmd(t, "cost", "--addr", addr, "--sample", "1500ms", "--checkpoint-every", "0")
	cancel()
	<-done
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile(`live sidecar \S+: 1 shards open, ([0-9.]+) syncs/s .* ([0-9.]+) fence CAS per sync \(mode: per_sync`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no live line:\n%s", out)
	}
	if rate, _ := strconv.ParseFloat(m[1], 64); rate < 10 {
		t.Errorf("%s syncs/s, want the appends' rate", m[1])
	}
	// per_sync: an md create and a CAS per sync, as counted by the
	// sidecar's metered store (the appends' reads are GETs, not PUTs).
	var put float64
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == "this" && f[3] == "measured" {
			put, _ = strconv.ParseFloat(f[4], 64)
			break
		}
	}
	if put < 1.9 || put > 2.2 {
		t.Errorf("measured PUT/sync %.2f, want about 2 (md create + CAS):\n%s", put, out)
	}
}
