package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/conformance"
)

const conformanceSummary = "certify an object store for fencing: the blob contract, then the fencing protocol run against it"

// conformanceOutput is the --json document.
type conformanceOutput struct {
	Store  string      `json:"store"`
	Prefix string      `json:"prefix"`
	Probe  probeOutput `json:"probe"`
	// Report is the blob suite's, Fencing the fencing suite's; either is
	// absent when not run.
	Report      *conformance.Report `json:"report,omitempty"`
	Fencing     *conformance.Report `json:"fencing,omitempty"`
	Certificate *certificateOutput  `json:"certificate,omitempty"`
	Passed      int                 `json:"passed"`
	Failed      int                 `json:"failed"`
	Skipped     int                 `json:"skipped"`
	Warned      int                 `json:"warned"`
}

type probeOutput struct {
	Status conformance.Status `json:"status"`
	Detail string             `json:"detail,omitempty"`
}

// certificateOutput says what was recorded for serve to read.
type certificateOutput struct {
	Key      string `json:"key"`
	Recorded bool   `json:"recorded"`
	// Refuses is true when serve will refuse the store (a fencing check
	// failed).
	Refuses bool   `json:"refuses"`
	Error   string `json:"error,omitempty"`
}

// maxDetails caps the failure lines printed per check; the JSON has all.
const maxDetails = 8

// conformanceFlags are the flags of `shardfence conformance`.
type conformanceFlags struct {
	store, only                                    string
	asJSON, fencingOnly, blobOnly, noCert, verbose bool
	timeout                                        time.Duration
}

func conformanceFlagSet(stdout io.Writer) (*flag.FlagSet, *conformanceFlags) {
	fs := newFlags("conformance", stdout)
	f := &conformanceFlags{}
	fs.StringVar(&f.store, "store", "", "store URL to check, e.g. file://./data, s3://bucket/prefix, mem://name")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON document instead of the tables")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "stop the whole run after this long; unfinished checks are reported as skipped")
	fs.StringVar(&f.only, "only", "", "comma-separated check names to run, of either suite (default: all)")
	fs.BoolVar(&f.fencingOnly, "fencing-only", false, "run only the fencing suite (after the precondition probe)")
	fs.BoolVar(&f.blobOnly, "blob-only", false, "run only the blob suite; records no certificate")
	fs.BoolVar(&f.noCert, "no-certificate", false, "do not record the outcome in the store for serve to read")
	fs.BoolVar(&f.verbose, "v", false, "print what failing checks logged, not only their failures")
	fs.Usage = func() {
		w := fs.Output() // the flag package prints usage itself on -h, to its output
		fmt.Fprintf(w, "usage: shardfence conformance --store URL [--fencing-only | --blob-only] [--json] [--timeout D] [--only a,b] [--no-certificate] [-v]\n\n")
		fmt.Fprintf(w, "Certifies a live store in two suites: the blob contract, then the fencing protocol (the real\n")
		fmt.Fprintf(w, "fence, translog, seal, recovery and relocation code run against the store with injected\n")
		fmt.Fprintf(w, "faults). Every key it writes is under a unique shardfence-conformance/ prefix and removed\n")
		fmt.Fprintf(w, "afterwards. When the fencing suite ran, the outcome is recorded at %s under the\n", conformance.CertificateKey)
		fmt.Fprintf(w, "store URL: serve, and a master whose --store is that URL, refuse a store that failed a\n")
		fmt.Fprintf(w, "fencing check. Exit status 1 if the store ignores preconditions or any check fails.\n")
		for _, suite := range conformance.Suites() {
			fmt.Fprintf(w, "\n%s checks:\n", suiteTitle(suite))
			for _, ch := range suite.Checks() {
				fmt.Fprintf(w, "  %-24s %s\n", ch.Name, ch.Description)
			}
		}
		fmt.Fprintf(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, f
}

// selection is the suites to run and, with --only, the checks selected
// (nil: all of them).
func (f *conformanceFlags) selection() (suites []conformance.Suite, selected []string, err error) {
	if f.fencingOnly && f.blobOnly {
		return nil, nil, fmt.Errorf("%w: --fencing-only and --blob-only exclude each other", errUsage)
	}
	suites = conformance.Suites()
	switch {
	case f.fencingOnly:
		suites = []conformance.Suite{conformance.FencingSuite}
	case f.blobOnly:
		suites = []conformance.Suite{conformance.BlobSuite}
	}
	if f.only == "" {
		return suites, nil, nil
	}
	for name := range strings.SplitSeq(f.only, ",") {
		name = strings.TrimSpace(name)
		suite, ok := conformance.SuiteOf(name)
		if !ok {
			return nil, nil, fmt.Errorf("%w: --only: no check named %q (see shardfence conformance -h)", errUsage, name)
		}
		if !slices.Contains(suites, suite) {
			return nil, nil, fmt.Errorf("%w: --only: %q is a check of the %s suite, which this run leaves out", errUsage, name, suite)
		}
		selected = append(selected, name)
	}
	// Only the suites that have a selected check run.
	suites = slices.DeleteFunc(suites, func(s conformance.Suite) bool {
		return !slices.ContainsFunc(s.Checks(), func(ch conformance.Check) bool { return slices.Contains(selected, ch.Name) })
	})
	return suites, selected, nil
}

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, f := conformanceFlagSet(stdout)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the store goes in --store)", errUsage, fs.Arg(0))
	}
	if f.store == "" {
		return fmt.Errorf("%w: --store URL is required, e.g. --store file://./data", errUsage)
	}
	suites, selected, err := f.selection()
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := blobstore.Open(ctx, f.store)
	if err != nil {
		return err
	}
	defer c.Close()

	prefix := conformance.ScratchPrefix()
	out := conformanceOutput{Store: c.String(), Prefix: prefix + "/"}
	if !f.asJSON {
		fmt.Fprintf(stdout, "Conformance of %s\n", c)
		fmt.Fprintf(stdout, "Scratch keys go under %s and are removed afterwards.\n\n", out.Prefix)
	}
	if err := probeConformance(ctx, c, prefix, &out, f.asJSON, stdout); err != nil {
		return err
	}
	var reports []conformance.Report
	for _, suite := range suites {
		reports = append(reports, runSuite(ctx, c, suite, prefix, selected, f.asJSON, f.verbose, stdout))
	}
	out.add(reports)
	if out.Fencing != nil && !f.noCert {
		out.Certificate = recordCertificate(ctx, c, reports)
	}
	if err := out.print(stdout, f.asJSON); err != nil {
		return err
	}
	total := 0
	for _, rep := range reports {
		total += len(rep.Results)
	}
	switch {
	case out.Failed > 0:
		return fmt.Errorf("%d of %d checks failed on %s; the store (or its driver) does not keep the contract, do not run fenced shards on it", out.Failed, total, c)
	case ctx.Err() != nil:
		return fmt.Errorf("run stopped after --timeout %s with %d checks skipped on %s", f.timeout, out.Skipped, c)
	}
	return nil
}

// probeConformance runs the precondition probe first: on a store that
// accepts stale writes, the suites' failures would only restate that
// fencing cannot work there. A failed probe ends the run (the JSON
// document printed first).
func probeConformance(ctx context.Context, c *blobstore.Container, prefix string, out *conformanceOutput, asJSON bool, stdout io.Writer) error {
	probeStore, err := blobstore.Sub(c, prefix)
	if err != nil {
		return err
	}
	if err := blobstore.ProbePreconditions(ctx, probeStore); err != nil {
		out.Probe = probeOutput{Status: conformance.Fail, Detail: err.Error()}
		if asJSON {
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
	if !asJSON {
		fmt.Fprintf(stdout, "Precondition probe: ok (a second create, a stale CAS and a CAS on a missing key are refused)\n")
	}
	return nil
}

// add puts the suites' reports and their counts into the document.
func (out *conformanceOutput) add(reports []conformance.Report) {
	for i, rep := range reports {
		switch rep.Suite {
		case conformance.BlobSuite:
			out.Report = &reports[i]
		case conformance.FencingSuite:
			out.Fencing = &reports[i]
		}
		out.Passed += rep.Count(conformance.Pass)
		out.Failed += rep.Count(conformance.Fail)
		out.Skipped += rep.Count(conformance.Skip)
		out.Warned += rep.Count(conformance.Warn)
	}
}

// recordCertificate records the run in the store for serve and the
// master. It is recorded even after a timeout: a skipped check is
// unverified, a failed one still refuses.
func recordCertificate(ctx context.Context, c *blobstore.Container, reports []conformance.Report) *certificateOutput {
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer wcancel()
	cert, err := conformance.RecordCertificate(wctx, c, time.Now(), reports...)
	co := &certificateOutput{Key: conformance.CertificateKey, Refuses: cert.Refusal() != nil}
	if err != nil {
		co.Error = err.Error()
	} else {
		co.Recorded = true
	}
	return co
}

// print writes the JSON document, or the certificate's line after the
// tables.
func (out *conformanceOutput) print(stdout io.Writer, asJSON bool) error {
	if asJSON {
		return writeJSON(stdout, out)
	}
	co := out.Certificate
	switch {
	case co == nil:
	case !co.Recorded:
		fmt.Fprintf(stdout, "\nCertificate: not recorded: %s\n", co.Error)
	case co.Refuses:
		fmt.Fprintf(stdout, "\nCertificate: recorded at %s; shardfence serve will refuse this store (a fencing check failed), and so will a master with this --store, unless given --allow-fencing-failures.\n", co.Key)
	default:
		fmt.Fprintf(stdout, "\nCertificate: recorded at %s; shardfence serve and a master with this --store read it at start-up.\n", co.Key)
	}
	return nil
}

func suiteTitle(s conformance.Suite) string {
	switch s {
	case conformance.BlobSuite:
		return "Blob contract"
	case conformance.FencingSuite:
		return "Fencing protocol"
	}
	return string(s)
}

// runSuite runs one suite and, unless asJSON, prints its table as rows
// finish and its summary line.
func runSuite(ctx context.Context, c *blobstore.Container, suite conformance.Suite, prefix string, selected []string, asJSON, verbose bool, stdout io.Writer) conformance.Report {
	checks := suite.Checks()
	opts := conformance.Options{Suite: suite, Prefix: prefix, Only: selected}
	fencing := suite == conformance.FencingSuite
	if !asJSON {
		width := len("CHECK")
		for _, ch := range checks {
			width = max(width, len(ch.Name))
		}
		fmt.Fprintf(stdout, "\n%s (suite %s v%d)\n", suiteTitle(suite), suite, suite.Version())
		if fencing {
			fmt.Fprintf(stdout, "%-*s  %-6s  %10s  %s\n", width, "CHECK", "RESULT", "LATENCY", "GUARDS")
		} else {
			fmt.Fprintf(stdout, "%-*s  %-6s  %10s\n", width, "CHECK", "RESULT", "LATENCY")
		}
		byName := map[string]conformance.Check{}
		for _, ch := range checks {
			byName[ch.Name] = ch
		}
		opts.Progress = func(r conformance.CheckResult) { printRow(stdout, width, r, byName[r.Name], verbose) }
	}
	rep := conformance.Run(ctx, c, opts)
	if !asJSON {
		fmt.Fprintf(stdout, "%d passed, %d failed", rep.Count(conformance.Pass), rep.Count(conformance.Fail))
		if n := rep.Count(conformance.Skip); n > 0 {
			fmt.Fprintf(stdout, ", %d skipped", n)
		}
		fmt.Fprintf(stdout, " in %s on %s\n", rep.Elapsed.Round(time.Millisecond), c)
		if n := rep.Count(conformance.Warn); n > 0 {
			fmt.Fprintf(stdout, "%d advisory check(s) warned: a property the fencing protocol does not rely on is missing (see above).\n", n)
		}
		if rep.CleanupError != "" {
			fmt.Fprintf(stdout, "Cleanup: %s\n", rep.CleanupError)
		}
	}
	return rep
}

func printRow(w io.Writer, width int, r conformance.CheckResult, ch conformance.Check, verbose bool) {
	lat := "-"
	if r.Status != conformance.Skip {
		lat = fmtLatency(r.Duration)
	}
	if len(ch.Guards) > 0 {
		fmt.Fprintf(w, "%-*s  %-6s  %10s  %s\n", width, r.Name, r.Status, lat, strings.Join(ch.Guards, ", "))
	} else {
		fmt.Fprintf(w, "%-*s  %-6s  %10s\n", width, r.Name, r.Status, lat)
	}
	if r.Status != conformance.Fail && r.Status != conformance.Warn {
		return
	}
	fmt.Fprintf(w, "    expected: %s\n", ch.Description)
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
