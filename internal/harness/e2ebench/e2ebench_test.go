package e2ebench

import (
	"slices"
	"testing"
	"time"
)

func row(path string, callers, ops int, p50 time.Duration) result {
	return result{path: path, callers: callers, ops: ops, elapsed: time.Second, p50: p50}
}

func TestTarget(t *testing.T) {
	base := row("in-process translog", 64, 10000, 2*time.Millisecond)
	for _, tc := range []struct {
		name  string
		r     result
		x     float64
		met   bool
		aimed bool
	}{
		{"as fast", row("stream API", 64, 10000, 3*time.Millisecond), 1, true, true},
		{"at 0.85x", row("client package", 64, 8500, 2*time.Millisecond), 0.85, true, true},
		{"below 0.85x", row("client package", 64, 8400, 2*time.Millisecond), 0.84, false, true},
		{"p50 a round trip above", row("stream API", 64, 10000, 4*time.Millisecond), 1, true, true},
		{"p50 more than a round trip above", row("stream API", 64, 10000, 4*time.Millisecond+time.Microsecond), 1, false, true},
		{"the unary API is not aimed at", row("unary API", 64, 10000, 2*time.Millisecond), 1, true, false},
		{"fewer callers are not aimed at", row("stream API", 16, 10000, 2*time.Millisecond), 1, true, false},
	} {
		x, met := target(tc.r, base)
		if x < tc.x-1e-9 || x > tc.x+1e-9 || met != tc.met {
			t.Errorf("%s: %.3fx met %v, want %.3fx met %v", tc.name, x, met, tc.x, tc.met)
		}
		if got := targeted(tc.r, 64); got != tc.aimed {
			t.Errorf("%s: targeted %v, want %v", tc.name, got, tc.aimed)
		}
	}
}

func TestRowFigures(t *testing.T) {
	base := result{ops: 1000, clientCPU: time.Second}
	for _, tc := range []struct {
		name string
		r    result
		want string
	}{
		{"client only, twice the CPU per op", result{ops: 500, clientCPU: time.Second, serverCPU: -1}, "2.00"},
		{"client and sidecar", result{ops: 1000, clientCPU: 500 * time.Millisecond, serverCPU: time.Second}, "1.50"},
		{"no ops", result{ops: 0, clientCPU: time.Second}, "-"},
	} {
		if got := cpuRatio(tc.r, base); got != tc.want {
			t.Errorf("cpuRatio %s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if got := cpuRatio(result{ops: 10, clientCPU: time.Second}, result{}); got != "-" {
		t.Errorf("cpuRatio without a base: %s", got)
	}
	if got := (result{syncs: 4, syncedOps: 10}).opsPerSync(); got != "2.5" {
		t.Errorf("opsPerSync %s, want 2.5", got)
	}
	if got := (result{syncs: -1}).opsPerSync(); got != "-" {
		t.Errorf("opsPerSync unknown %s, want -", got)
	}
	if got := per1k(2*time.Second, 1000); got != "2.000" {
		t.Errorf("per1k %s, want 2.000", got)
	}
	if got := per1k(-1, 1000); got != "-" {
		t.Errorf("per1k unknown %s, want -", got)
	}
}

func TestServeArgs(t *testing.T) {
	if got := serveArgs("tcp", "/s", false); !slices.Equal(got, []string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}) {
		t.Errorf("tcp: %v", got)
	}
	if got := serveArgs("unix", "/s", true); !slices.Equal(got, []string{"serve", "--listen", "unix:///s/sidecar.sock", "--log-level", "warn", "--pprof"}) {
		t.Errorf("unix with pprof: %v", got)
	}
}

func TestWithPrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"file:///tmp/x", "file:///tmp/x/p/q"},
		{"s3://bucket/base/?region=r", "s3://bucket/base/p/q?region=r"},
		{"minio://host:9000/bucket", "minio://host:9000/bucket/p/q"},
	} {
		got, err := withPrefix(tc.in, "p/q")
		if err != nil || got != tc.want {
			t.Errorf("withPrefix(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := withPrefix("mem://", "p"); err == nil {
		t.Error("a mem:// store was accepted")
	}
}
