package master

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer is a slog JSON sink a test reads back line by line.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns the lines written since the last take, decoded.
func (b *logBuffer) take(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	b.buf.Reset()
	return out
}

// findLine returns the one line whose message starts with prefix and
// whose client is client; it fails the test if there is not exactly one.
func findLine(t *testing.T, lines []map[string]any, prefix, client string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, l := range lines {
		if msg, _ := l["msg"].(string); strings.HasPrefix(msg, prefix) && l["client"] == client {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d lines %q for client %q, want 1; lines: %v", len(found), prefix, client, lines)
	}
	return found[0]
}

// Every liveness transition of a client or a sidecar node is logged, with
// the client, its incarnation, how long it has been silent and the TTL
// that ran out.
func TestLivenessTransitionsAreLogged(t *testing.T) {
	var buf logBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}))
	m, clk := newTestMaster(t, liveCfg(true), Options{Logger: log})
	ctx := context.Background()
	mount(t, m, "c1", 1, 1000)
	reg := NodeRegistration{Name: "n1", Addr: "http://n1", Store: "s3://b/p", Fencing: true, Session: "n1-1"}
	if _, err := m.RegisterNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	node := NodeClientID("n1")
	m.CheckLiveness(ctx)
	advance(m, clk, 9*time.Second)
	if lines := buf.take(t); len(lines) != 0 {
		t.Fatalf("lines while every client is active: %v", lines)
	}

	// Both go silent past the active TTL: one WARN line each.
	advance(m, clk, time.Second)
	lines := buf.take(t)
	for _, id := range []string{"c1", node} {
		l := findLine(t, lines, "client suspected", id)
		if l["level"] != "WARN" || l["incarnation"] == nil || l["since_signal"] != "10s" ||
			l["client_active_ttl"] != "10s" || l["client_suspicion_ttl"] != "20s" {
			t.Fatalf("suspected line: %v", l)
		}
	}

	// The node registers again within its suspicion window: active again.
	advance(m, clk, 5*time.Second)
	if _, err := m.RegisterNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	lines = buf.take(t)
	l := findLine(t, lines, "client active again", node)
	if l["level"] != "INFO" || l["since_signal"] != "15s" || l["suspected_for"] != "5s" || l["client_suspicion_ttl"] != "20s" {
		t.Fatalf("recovery line: %v", l)
	}
	if len(lines) != 1 {
		t.Fatalf("lines after the node's recovery: %v", lines)
	}

	// c1 never pings: offline once its suspicion TTL ran out, then
	// offboarded (synchronously here). The node pings on.
	for range 3 {
		advance(m, clk, 5*time.Second)
		ping(t, m, node)
	}
	lines = buf.take(t)
	l = findLine(t, lines, "client offline", "c1")
	if l["level"] != "WARN" || l["since_signal"] != "30s" || l["suspected_for"] != "20s" || l["client_suspicion_ttl"] != "20s" {
		t.Fatalf("offline line: %v", l)
	}
	if l := findLine(t, lines, "client offboarded", "c1"); l["level"] != "INFO" {
		t.Fatalf("offboarded line: %v", l)
	}
	for _, l := range lines {
		if l["client"] == node {
			t.Fatalf("a line for the node that recovered: %v", l)
		}
	}
	if s := state(m, "c1"); s != 0 {
		t.Fatalf("c1 after both TTLs: %v", s)
	}
}
