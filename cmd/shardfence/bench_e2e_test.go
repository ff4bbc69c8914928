package main

import (
	"errors"
	"strings"
	"testing"
)

func TestBenchE2EPrintsBothPaths(t *testing.T) {
	var out, errOut syncBuffer
	if err := runBench(t.Context(), []string{"e2e", "--duration", "300ms", "--clients", "4", "--ops-per-append", "2"}, &out, &errOut); err != nil {
		t.Fatalf("bench e2e: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"in-process translog", "sidecar API (Connect, h2c)", "2 per append", "target API throughput"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := runBench(t.Context(), []string{"e2e", "--clients", "0"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("zero clients: %v", err)
	}
}
