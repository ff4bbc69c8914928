package main

import (
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
)

func TestBenchStoreOnMem(t *testing.T) {
	code, out, errOut := runCmd(t, "bench", "store", "--store", "mem://bench-store", "--duration", "20ms", "--clients", "1,4")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"Store: mem://bench-store\n", "OPERATION", "OPS/S", "P50", "P99"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && (f[1] == "1" || f[1] == "4") {
			rows++
			if f[2] == "0" {
				t.Errorf("row with no requests: %q", line)
			}
		}
	}
	if rows != 12 {
		t.Errorf("%d rows, want 6 operations x 2 client levels:\n%s", rows, out)
	}
	c, err := blobstore.Open(t.Context(), "mem://bench-store")
	if err != nil {
		t.Fatal(err)
	}
	if left, err := blobstore.ListAll(t.Context(), c, ""); err != nil || len(left) != 0 {
		t.Errorf("after the bench the store holds %d keys (%v), want none", len(left), err)
	}
}

func TestBenchStoreFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "store"},
		{"bench", "store", "--store", "mem://x", "--clients", "0"},
		{"bench", "store", "--store", "mem://x", "--ops", "Get,Frobnicate"},
		{"bench", "store", "--store", "mem://x", "--duration", "-1s"},
		{"bench", "store", "--store", "mem://x", "extra"},
	} {
		if code, _, errOut := runCmd(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage); stderr: %s", args, code, errOut)
		}
	}
	if code, _, errOut := runCmd(t, "bench", "store", "--store", "nosuch://x"); code != 1 || !strings.Contains(errOut, "unknown scheme") {
		t.Errorf("unknown scheme: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}
}
