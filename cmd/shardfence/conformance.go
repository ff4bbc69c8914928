package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/conformance"
)

const conformanceSummary = "check that an object store keeps the contract fencing relies on"

// conformanceOutput is the --json document.
type conformanceOutput struct {
	Store   string              `json:"store"`
	Prefix  string              `json:"prefix"`
	Probe   probeOutput         `json:"probe"`
	Report  *conformance.Report `json:"report,omitempty"`
	Passed  int                 `json:"passed"`
	Failed  int                 `json:"failed"`
	Skipped int                 `json:"skipped"`
	Warned  int                 `json:"warned"`
}

type probeOutput struct {
	Status conformance.Status `json:"status"`
	Detail string             `json:"detail,omitempty"`
}

// maxDetails caps the failure lines printed per check; the JSON has all.
const maxDetails = 8

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("conformance", stderr)
	store := fs.String("store", "", "store URL to check, e.g. file://./data, s3://bucket/prefix, mem://name")
	asJSON := fs.Bool("json", false, "print one JSON document instead of the table")
	timeout := fs.Duration("timeout", 10*time.Minute, "stop the whole run after this long; unfinished checks are reported as skipped")
	only := fs.String("only", "", "comma-separated check names to run (default: all)")
	verbose := fs.Bool("v", false, "print what failing checks logged, not only their failures")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: shardfence conformance --store URL [--json] [--timeout D] [--only a,b] [-v]\n\n")
		fmt.Fprintf(stderr, "Runs the blobstore contract suite against a live store. Every key it writes is under a\n")
		fmt.Fprintf(stderr, "unique shardfence-conformance/ prefix and removed afterwards. Exit status 1 if the store\n")
		fmt.Fprintf(stderr, "ignores preconditions or any check fails.\n\nChecks:\n")
		for _, ch := range conformance.Checks() {
			fmt.Fprintf(stderr, "  %-22s %s\n", ch.Name, ch.Description)
		}
		fmt.Fprintf(stderr, "\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the store goes in --store)", errUsage, fs.Arg(0))
	}
	if *store == "" {
		return fmt.Errorf("%w: --store URL is required, e.g. --store file://./data", errUsage)
	}
	var selected []string
	if *only != "" {
		known := map[string]bool{}
		for _, ch := range conformance.Checks() {
			known[ch.Name] = true
		}
		for name := range strings.SplitSeq(*only, ",") {
			name = strings.TrimSpace(name)
			if !known[name] {
				return fmt.Errorf("%w: --only: no check named %q (see shardfence conformance -h)", errUsage, name)
			}
			selected = append(selected, name)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := blobstore.Open(ctx, *store)
	if err != nil {
		return err
	}
	defer c.Close()

	prefix := conformance.ScratchPrefix()
	out := conformanceOutput{Store: c.String(), Prefix: prefix + "/"}
	if !*asJSON {
		fmt.Fprintf(stdout, "Conformance of %s\n", c)
		fmt.Fprintf(stdout, "Scratch keys go under %s and are removed afterwards.\n\n", out.Prefix)
	}

	// The probe comes first: on a store that accepts stale writes, the
	// suite's failures would only restate that fencing cannot work there.
	probeStore, err := blobstore.Sub(c, prefix)
	if err != nil {
		return err
	}
	if err := blobstore.ProbePreconditions(ctx, probeStore); err != nil {
		out.Probe = probeOutput{Status: conformance.Fail, Detail: err.Error()}
		if *asJSON {
			if jerr := writeJSON(stdout, out); jerr != nil {
				return jerr
			}
		} else {
			fmt.Fprintf(stdout, "Precondition probe: FAIL\n    %v\n\n", err)
		}
		if errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
			return fmt.Errorf("refusing %s: it does not enforce conditional writes, so a fenced primary could overwrite its successor; no further checks were run", c)
		}
		return fmt.Errorf("precondition probe on %s could not finish (is the store reachable and writable?): %w", c, err)
	}
	out.Probe = probeOutput{Status: conformance.Pass}

	width := len("CHECK")
	for _, ch := range conformance.Checks() {
		width = max(width, len(ch.Name))
	}
	opts := conformance.Options{Prefix: prefix, Only: selected}
	if !*asJSON {
		fmt.Fprintf(stdout, "Precondition probe: ok (a second create, a stale CAS and a CAS on a missing key are refused)\n\n")
		fmt.Fprintf(stdout, "%-*s  %-6s  %10s\n", width, "CHECK", "RESULT", "LATENCY")
		descriptions := map[string]string{}
		for _, ch := range conformance.Checks() {
			descriptions[ch.Name] = ch.Description
		}
		opts.Progress = func(r conformance.CheckResult) { printRow(stdout, width, r, descriptions[r.Name], *verbose) }
	}
	rep := conformance.Run(ctx, c, opts)
	out.Report = &rep
	out.Passed, out.Failed, out.Skipped = rep.Count(conformance.Pass), rep.Count(conformance.Fail), rep.Count(conformance.Skip)
	out.Warned = rep.Count(conformance.Warn)

	if *asJSON {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "\n%d passed, %d failed", out.Passed, out.Failed)
		if out.Skipped > 0 {
			fmt.Fprintf(stdout, ", %d skipped", out.Skipped)
		}
		fmt.Fprintf(stdout, " in %s on %s\n", rep.Elapsed.Round(time.Millisecond), c)
		if out.Warned > 0 {
			fmt.Fprintf(stdout, "%d advisory check(s) warned: a property the fencing protocol does not rely on is missing (see above).\n", out.Warned)
		}
		if rep.CleanupError != "" {
			fmt.Fprintf(stdout, "Cleanup: %s\n", rep.CleanupError)
		}
	}
	switch {
	case out.Failed > 0:
		return fmt.Errorf("%d of %d checks failed on %s; the store (or its driver) does not keep the contract, do not run fenced shards on it", out.Failed, len(rep.Results), c)
	case ctx.Err() != nil:
		return fmt.Errorf("run stopped after --timeout %s with %d checks skipped on %s", *timeout, out.Skipped, c)
	}
	return nil
}

func printRow(w io.Writer, width int, r conformance.CheckResult, description string, verbose bool) {
	lat := "-"
	if r.Status != conformance.Skip {
		lat = fmtLatency(r.Duration)
	}
	fmt.Fprintf(w, "%-*s  %-6s  %10s\n", width, r.Name, r.Status, lat)
	if r.Status != conformance.Fail && r.Status != conformance.Warn {
		return
	}
	fmt.Fprintf(w, "    expected: %s\n", description)
	for i, d := range r.Details {
		if i == maxDetails {
			fmt.Fprintf(w, "    ... and %d more (use --json for all)\n", len(r.Details)-maxDetails)
			break
		}
		fmt.Fprintf(w, "    %s\n", d)
	}
	if verbose {
		for _, l := range r.Logs {
			fmt.Fprintf(w, "    log: %s\n", l)
		}
	}
}

func fmtLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
