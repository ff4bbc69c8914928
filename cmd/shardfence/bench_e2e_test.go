package main

import (
	"errors"
	"strings"
	"testing"
)

func TestBenchE2EPrintsEveryPath(t *testing.T) {
	var out, errOut syncBuffer
	c := thisBinary()
	if err := benchE2E(t.Context(), c, []string{"--duration", "300ms", "--callers", "1,4"}, &out, &errOut); err != nil {
		t.Fatalf("bench e2e: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"in-process translog", "unary API", "stream API", "client package", "tcp", "unix", "sidecar CPU", "ops/sync", "CPU x in-process", "target at 4 callers"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{{"--callers", "0"}, {"--transports", "udp"}, {"--store", "mem://x"}} {
		if err := benchE2E(t.Context(), c, bad, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
