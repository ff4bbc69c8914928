package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBenchDispatch(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(t.Context(), []string{"bench"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "translog") {
		t.Fatalf("bench without a target: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := dispatch(t.Context(), []string{"bench", "nonesuch"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown bench target "nonesuch"`) {
		t.Fatalf("unknown target: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := dispatch(t.Context(), []string{"bench", "translog", "-modes", "bogus"}, &out, &errb); code != 2 {
		t.Fatalf("unknown mode: exit %d, stderr %q", code, errb.String())
	}
}

func TestBenchTranslogPrintsTable(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "translog", "-duration", "150ms", "-latency", "1ms", "-appenders", "8", "-op-size", "128", "-modes", "concurrent,unfenced,create_only"}
	if code := dispatch(t.Context(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{"| concurrent |", "| unfenced |", "| create_only |", "target 2 PUTs per inline sync: 2.00", "target create_only 1 PUT per inline sync: 1.00"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
