package main

import (
	"errors"
	"testing"
	"time"

	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// TestSettingsRewriteFromFlags: which flags ask for a rewrite, the
// fencing it stores, and the combinations refused as usage errors.
func TestSettingsRewriteFromFlags(t *testing.T) {
	wait := time.Minute
	for _, tc := range []struct {
		name    string
		f       settingsFlags
		rewrite bool
		to      seal.Fencing
		usage   bool
	}{
		{name: "show", f: settingsFlags{maxWait: wait}},
		{name: "per_sync", f: settingsFlags{term: 3, alloc: "a", mode: "per_sync", maxWait: wait}, rewrite: true, to: seal.Fencing{Mode: translog.PerSync}},
		{name: "lease", f: settingsFlags{term: 3, alloc: "a", mode: "lease", lease: 2 * time.Second, maxWait: wait}, rewrite: true, to: seal.Fencing{Mode: translog.Lease, LeaseInterval: 2 * time.Second}},
		{name: "unfenced", f: settingsFlags{term: 3, alloc: "a", mode: "unfenced", maxWait: wait}, rewrite: true, to: seal.Fencing{Mode: translog.PerSync, Disabled: true}},
		{name: "no term", f: settingsFlags{alloc: "a", mode: "observe", maxWait: wait}, rewrite: true, usage: true},
		{name: "no allocation", f: settingsFlags{term: 3, mode: "observe", maxWait: wait}, rewrite: true, usage: true},
		{name: "no mode", f: settingsFlags{term: 3, alloc: "a", maxWait: wait}, rewrite: true, usage: true},
		{name: "bad mode", f: settingsFlags{term: 3, alloc: "a", mode: "fast", maxWait: wait}, rewrite: true, usage: true},
		{name: "lease without its interval", f: settingsFlags{term: 3, alloc: "a", mode: "lease", maxWait: wait}, rewrite: true, usage: true},
		{name: "interval without lease", f: settingsFlags{term: 3, alloc: "a", mode: "per_sync", lease: time.Second, maxWait: wait}, rewrite: true, usage: true},
		{name: "no wait", f: settingsFlags{term: 3, alloc: "a", mode: "per_sync"}, rewrite: true, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rewrite, to, err := tc.f.rewrite()
			if rewrite != tc.rewrite {
				t.Fatalf("rewrite %v, want %v", rewrite, tc.rewrite)
			}
			if tc.usage {
				if !errors.Is(err, errUsage) {
					t.Fatalf("want a usage error, got %v (fencing %+v)", err, to)
				}
				return
			}
			if err != nil || to != tc.to {
				t.Fatalf("fencing %+v, error %v; want %+v", to, err, tc.to)
			}
		})
	}
}
