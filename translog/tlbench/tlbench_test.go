package tlbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// BenchmarkTranslog runs each mode with 64 appenders and 1 ms per store
// request; b.N is the number of appends. Run with -benchtime=2000x or so.
func BenchmarkTranslog(b *testing.B) {
	for _, m := range Modes()[:3] {
		b.Run(m.Name, func(b *testing.B) {
			cfg := Config{Latency: time.Millisecond, Appenders: 64, OpSize: 1024, Appends: b.N, Seed: 1}
			r, err := Run(context.Background(), cfg, m)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(r.P50)/float64(time.Millisecond), "p50-ms")
			b.ReportMetric(float64(r.P99)/float64(time.Millisecond), "p99-ms")
			b.ReportMetric(r.WritesPerSync(), "writes/sync")
			b.ReportMetric(float64(r.Syncs)/float64(max(1, r.Appends)), "syncs/append")
		})
	}
}

func TestRunCountsRequestsPerSync(t *testing.T) {
	cfg := Config{Appenders: 8, OpSize: 64, Appends: 200, Seed: 1}
	var rs []Result
	for _, m := range Modes()[:3] {
		r, err := Run(context.Background(), cfg, m)
		if err != nil {
			t.Fatal(err)
		}
		if r.Appends != 200 || r.Syncs < 1 || r.Syncs > 200 {
			t.Fatalf("%s: %+v", m.Name, r)
		}
		// Inline syncs: one md create each, plus one CAS when fenced.
		wantCAS := 1.0
		if !m.Fenced {
			wantCAS = 0
		}
		if r.Create != 1 || r.CAS != wantCAS || r.Put != 0 {
			t.Fatalf("%s: per sync %.2f creates, %.2f CAS, %.2f PUT", m.Name, r.Create, r.CAS, r.Put)
		}
		rs = append(rs, r)
	}
	var out bytes.Buffer
	WriteTable(&out, cfg, rs)
	for _, m := range []string{"| concurrent |", "| sequenced |", "| unfenced |"} {
		if !strings.Contains(out.String(), m) {
			t.Fatalf("table lacks %q:\n%s", m, out.String())
		}
	}
}
