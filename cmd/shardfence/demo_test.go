package main

import (
	"strings"
	"testing"
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
