package main

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardfence/shardfence/conformance"
)

// TestConformanceSelection: which suites and checks a run's flags select,
// and which flag combinations are usage errors.
func TestConformanceSelection(t *testing.T) {
	blob, fencing := conformance.BlobSuite, conformance.FencingSuite
	for _, tc := range []struct {
		name     string
		f        conformanceFlags
		suites   []conformance.Suite
		selected []string
		usage    bool
	}{
		{name: "all", suites: []conformance.Suite{blob, fencing}},
		{name: "fencing only", f: conformanceFlags{fencingOnly: true}, suites: []conformance.Suite{fencing}},
		{name: "blob only", f: conformanceFlags{blobOnly: true}, suites: []conformance.Suite{blob}},
		{name: "both only flags", f: conformanceFlags{fencingOnly: true, blobOnly: true}, usage: true},
		{name: "one blob check", f: conformanceFlags{only: "crud"}, suites: []conformance.Suite{blob}, selected: []string{"crud"}},
		{name: "a check of each suite", f: conformanceFlags{only: " crud ,claim-race"}, suites: []conformance.Suite{blob, fencing}, selected: []string{"crud", "claim-race"}},
		{name: "a fencing check", f: conformanceFlags{only: "claim-race"}, suites: []conformance.Suite{fencing}, selected: []string{"claim-race"}},
		{name: "unknown check", f: conformanceFlags{only: "no-such-check"}, usage: true},
		{name: "check of a suite left out", f: conformanceFlags{only: "crud", fencingOnly: true}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			suites, selected, err := tc.f.selection()
			if tc.usage {
				if !errors.Is(err, errUsage) {
					t.Fatalf("want a usage error, got suites %v, checks %v, error %v", suites, selected, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(suites, tc.suites) || !slices.Equal(selected, tc.selected) {
				t.Fatalf("suites %v, checks %v; want %v, %v", suites, selected, tc.suites, tc.selected)
			}
		})
	}
}
