package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/internal/harness/cost"
	"github.com/shardfence/shardfence/sidecar"
)

const costSummary = "what a shard costs a month on a store, in every fencing mode, from a workload or a live sidecar"

// costFlags are `shardfence cost`'s flags.
type costFlags struct {
	provider, class, pricesFile string
	put, get, storage           float64
	w                           cost.Workload
	mode                        string
	budget                      float64
	measure                     bool
	addr, tokenFile             string
	sample                      time.Duration
	asJSON                      bool
}

func runCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cost", stdout)
	var f costFlags
	fs.StringVar(&f.provider, "provider", "aws", "store provider of the price table: aws, gcp, azure, cloudflare (or one of --prices)")
	fs.StringVar(&f.class, "class", "", "storage class (default: the provider's first: s3-standard, standard, hot-lrs, r2-standard)")
	fs.StringVar(&f.pricesFile, "prices", "", "a price table in the built-in table's JSON format, instead of it ('shardfence cost --show-prices' prints that)")
	fs.Float64Var(&f.put, "put-per-1k", -1, "override: $ per 1,000 PUT-class requests (writes, LIST)")
	fs.Float64Var(&f.get, "get-per-1k", -1, "override: $ per 1,000 GET-class requests (GET, HEAD)")
	fs.Float64Var(&f.storage, "storage-per-gb-month", -1, "override: $ per GiB-month stored")
	fs.Float64Var(&f.w.SyncsPerSecond, "syncs-per-second", 100, "syncs a shard acknowledges a second (each carries every append that arrived during the one before; see --max-gather-delay of serve)")
	fs.Float64Var(&f.w.BytesPerSecond, "bytes-per-second", 0, "op payload bytes a shard writes a second")
	fs.DurationVar(&f.w.CheckpointEvery, "checkpoint-every", sidecar.DefaultCheckpointEvery, "how often the primary checkpoints (serve --checkpoint-every); 0: never, the translog is kept whole")
	fs.Int64Var(&f.w.CheckpointBytes, "checkpoint-bytes", 0, "size of one checkpoint, stored (the shard's state)")
	fs.IntVar(&f.w.CheckpointFiles, "checkpoint-files", 1, "files in one checkpoint (one PUT each)")
	fs.DurationVar(&f.w.LeaseInterval, "lease-interval", sidecar.DefaultSettings().LeaseInterval, "lease mode's lease interval (one CAS per interval)")
	fs.Int64Var(&f.w.InlineLimit, "inline-limit", int64(sidecar.DefaultSettings().InlineLimit), "payloads of a sync up to this go inside its md object; larger ones cost a data object more")
	fs.StringVar(&f.mode, "fencing-mode", "per_sync", "the mode you run (marked in the table): per_sync, observe, lease or create_only")
	fs.Float64Var(&f.budget, "budget", 0, "$ per shard-month: say which modes and sync intervals stay within it")
	fs.BoolVar(&f.measure, "measure", false, "measure each mode's requests per sync by running the translog writer on a metered in-memory store (a second or two) instead of taking them from the protocol")
	fs.StringVar(&f.addr, "addr", "", "a live sidecar (HOST:PORT or URL): read its /metrics twice, --sample apart, and price its syncs, bytes and requests")
	fs.StringVar(&f.tokenFile, "auth-token-file", os.Getenv(envPrefix+"AUTH_TOKEN_FILE"), "with --addr: file holding the sidecar's bearer token")
	fs.DurationVar(&f.sample, "sample", 10*time.Second, "with --addr: how long to count the sidecar's requests")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	showPrices := fs.Bool("show-prices", false, "print the price table in use (JSON) and exit")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, clipArg(fs.Arg(0)))
	}
	table := cost.DefaultTable()
	if f.pricesFile != "" {
		b, err := os.ReadFile(f.pricesFile)
		if err != nil {
			return fmt.Errorf("%w: --prices: %v", errUsage, err)
		}
		if table, err = cost.ParseTable(b); err != nil {
			return fmt.Errorf("%w: --prices %s: %v", errUsage, f.pricesFile, err)
		}
	}
	if *showPrices {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(table)
	}
	price, err := pickPrice(table, &f)
	if err != nil {
		return err
	}
	mine := cost.Mode(strings.ReplaceAll(f.mode, "-", "_"))
	switch {
	case mine != cost.PerSync && mine != cost.Observe && mine != cost.Lease && mine != cost.CreateOnly:
		return fmt.Errorf("%w: --fencing-mode %q (per_sync, observe, lease or create_only)", errUsage, f.mode)
	case f.w.SyncsPerSecond < 0 || f.w.BytesPerSecond < 0 || f.w.CheckpointBytes < 0 || f.w.CheckpointFiles < 0 || f.w.CheckpointEvery < 0:
		return fmt.Errorf("%w: the workload's figures are not negative", errUsage)
	case f.w.LeaseInterval <= 0 || f.w.InlineLimit < 0 || f.budget < 0:
		return fmt.Errorf("%w: --lease-interval must be positive, --inline-limit and --budget not negative", errUsage)
	}

	per := map[cost.Mode]cost.Requests{}
	for _, m := range cost.Modes() {
		per[m] = cost.Protocol(m)
	}
	if f.measure {
		fmt.Fprintln(stderr, "measuring each mode's requests per sync on the translog writer...")
		for _, m := range cost.Modes() {
			r, _, err := cost.Measure(ctx, m, 2000, time.Millisecond)
			if err != nil {
				return err
			}
			per[m] = r
		}
	}
	var live *liveSample
	if f.addr != "" {
		if live, err = sampleSidecar(ctx, &f, stderr); err != nil {
			return err
		}
		f.w.SyncsPerSecond = live.syncsPerSecond / float64(live.shards)
		f.w.BytesPerSecond = live.bytesPerSecond / float64(live.shards)
	}
	return printCost(stdout, &f, table, price, mine, per, live)
}

// pickPrice is the table's row for --provider and --class (the provider's
// first class by default) with the flag overrides applied.
func pickPrice(table cost.Table, f *costFlags) (cost.Price, error) {
	var p cost.Price
	var err error
	if f.class == "" {
		for _, row := range table.Prices {
			if row.Provider == f.provider {
				f.class = row.Class
				break
			}
		}
	}
	if p, err = table.Find(f.provider, f.class); err != nil {
		return cost.Price{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, o := range []struct {
		v    float64
		to   *float64
		name string
	}{{f.put, &p.PutPer1k, "put-per-1k"}, {f.get, &p.GetPer1k, "get-per-1k"}, {f.storage, &p.StoragePerGBMonth, "storage-per-gb-month"}} {
		if o.v >= 0 {
			*o.to = o.v
			p.Source = "overridden by --" + o.name + "; otherwise " + p.Source
		}
	}
	return p, nil
}

// liveSample is what two scrapes of a sidecar's /metrics said.
type liveSample struct {
	addr                           string
	seconds                        float64
	shards                         int
	syncsPerSecond, bytesPerSecond float64
	casPerSync                     float64
	// measured are the sidecar's own requests per sync over the sample,
	// everything included (checkpoints, reads, GC, opens).
	measured cost.Requests
}

// sampleSidecar scrapes the sidecar twice and takes the differences: its
// syncs (shardfence_sidecar_syncs_total over every open shard), the bytes
// it wrote (shardfence_blobstore_body_bytes_total) and its store requests
// by kind (shardfence_blobstore_requests_total).
func sampleSidecar(ctx context.Context, f *costFlags, stderr io.Writer) (*liveSample, error) {
	base := f.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	base = strings.TrimRight(base, "/")
	var token string
	if f.tokenFile != "" {
		t, err := readToken(f.tokenFile)
		if err != nil {
			return nil, err
		}
		token = t
	}
	scrape := func() (map[string]*dto.MetricFamily, time.Time, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%w: --addr %q: %v", errUsage, clipArg(f.addr), err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("cost: read %s/metrics: %w", base, err)
		}
		defer res.Body.Close()
		at := time.Now()
		if res.StatusCode != http.StatusOK {
			hint := ""
			if res.StatusCode == http.StatusUnauthorized {
				hint = " (pass the sidecar's token with --auth-token-file)"
			}
			return nil, at, fmt.Errorf("cost: read %s/metrics: %s%s", base, res.Status, hint)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(res.Body)
		if err != nil {
			return nil, at, fmt.Errorf("cost: %s/metrics: %w", base, err)
		}
		return fams, at, nil
	}
	a, t0, err := scrape()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "counting %s's syncs and store requests for %v...\n", base, f.sample)
	select {
	case <-time.After(f.sample):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	b, t1, err := scrape()
	if err != nil {
		return nil, err
	}
	secs := t1.Sub(t0).Seconds()
	syncs := sumDelta(a, b, sidecar.SyncsMetric, nil)
	shards := len(labelValues(b, sidecar.SyncsMetric, "shard"))
	if syncs <= 0 || shards == 0 {
		return nil, fmt.Errorf("cost: %s acknowledged no sync in %v (%d shards open): price a workload with --syncs-per-second instead, or sample longer", base, f.sample, shards)
	}
	putOps := map[string]bool{"Put": true, "CreateIfAbsent": true, "CompareAndSwap": true, "List": true}
	getOps := map[string]bool{"Get": true, "Stat": true, "GetRange": true}
	put := sumDelta(a, b, metered.RequestsMetric, func(l map[string]string) bool { return putOps[l["op"]] })
	get := sumDelta(a, b, metered.RequestsMetric, func(l map[string]string) bool { return getOps[l["op"]] })
	written := sumDelta(a, b, metered.BytesMetric, func(l map[string]string) bool { return l["direction"] == "write" })
	return &liveSample{
		addr: base, seconds: secs, shards: shards,
		syncsPerSecond: syncs / secs, bytesPerSecond: written / secs,
		casPerSync: sumDelta(a, b, sidecar.CASWritesMetric, nil) / syncs,
		measured: cost.Requests{Put: put / syncs, Get: get / syncs,
			Source: fmt.Sprintf("measured on %s: %.0f syncs in %.1fs, every store request of the sidecar counted", base, syncs, secs)},
	}, nil
}

// sumDelta is the increase of the counter name between two scrapes, over
// the series keep accepts (nil: all). A series that went away or restarted
// counts from zero.
func sumDelta(a, b map[string]*dto.MetricFamily, name string, keep func(map[string]string) bool) float64 {
	before := map[string]float64{}
	key := func(m *dto.Metric) (string, map[string]string) {
		l := map[string]string{}
		var k strings.Builder
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
			k.WriteString(p.GetName() + "=" + p.GetValue() + ",")
		}
		return k.String(), l
	}
	if fa := a[name]; fa != nil {
		for _, m := range fa.GetMetric() {
			k, _ := key(m)
			before[k] = m.GetCounter().GetValue()
		}
	}
	var sum float64
	if fb := b[name]; fb != nil {
		for _, m := range fb.GetMetric() {
			k, l := key(m)
			if keep != nil && !keep(l) {
				continue
			}
			d := m.GetCounter().GetValue() - before[k]
			if d < 0 {
				d = m.GetCounter().GetValue()
			}
			sum += d
		}
	}
	return sum
}

func labelValues(fams map[string]*dto.MetricFamily, name, label string) map[string]bool {
	out := map[string]bool{}
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			for _, p := range m.GetLabel() {
				if p.GetName() == label {
					out[p.GetValue()] = true
				}
			}
		}
	}
	return out
}

// costRow is one line of the table (and of --json).
type costRow struct {
	Mode          string  `json:"mode"`
	Yours         bool    `json:"yours,omitempty"`
	PutPerSync    float64 `json:"put_per_sync"`
	GetPerSync    float64 `json:"get_per_sync"`
	Source        string  `json:"source"`
	PutPerMonth   float64 `json:"put_per_month"`
	GetPerMonth   float64 `json:"get_per_month"`
	RequestUSD    float64 `json:"request_usd"`
	StorageUSD    float64 `json:"storage_usd"`
	TotalUSD      float64 `json:"total_usd"`
	MaxSyncsPerS  float64 `json:"max_syncs_per_second_within_budget,omitempty"`
	WithinBudget  *bool   `json:"within_budget,omitempty"`
	leaseCASMonth float64
}

func printCost(w io.Writer, f *costFlags, table cost.Table, p cost.Price, mine cost.Mode, per map[cost.Mode]cost.Requests, live *liveSample) error {
	var rows []costRow
	add := func(name string, m cost.Mode, r cost.Requests, yours bool) {
		e := cost.Cost(f.w, m, r, p)
		row := costRow{Mode: name, Yours: yours, PutPerSync: r.Put, GetPerSync: r.Get, Source: r.Source,
			PutPerMonth: e.PutPerMonth, GetPerMonth: e.GetPerMonth, RequestUSD: e.RequestUSD, StorageUSD: e.StorageUSD, TotalUSD: e.TotalUSD,
			leaseCASMonth: e.LeaseCASPerMonth}
		if f.budget > 0 {
			ok := e.TotalUSD <= f.budget
			row.WithinBudget = &ok
			row.MaxSyncsPerS = cost.MaxSyncsPerSecond(f.w, m, r, p, f.budget)
		}
		rows = append(rows, row)
	}
	if live != nil {
		// The sidecar's own mix: its requests per sync as counted, priced
		// as they are (the protocol rows below price the same syncs).
		add("this sidecar, as measured", cost.Unfenced, live.measured, false)
	}
	for _, m := range cost.Modes() {
		name := string(m)
		if m == cost.Lease {
			name = fmt.Sprintf("lease (%v)", f.w.LeaseInterval)
		}
		if m == cost.Unfenced {
			name = "unfenced (no safety)"
		}
		add(name, m, per[m], m == mine && live == nil)
	}
	if f.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"price": p, "prices_date": table.Date, "workload": f.w, "budget_usd": f.budget, "modes": rows})
	}

	if live != nil {
		fmt.Fprintf(w, "live sidecar %s: %d shards open, %.1f syncs/s and %s/s written per shard over %.1fs; %.2f fence CAS per sync (mode: %s)\n",
			live.addr, live.shards, f.w.SyncsPerSecond, humanBytes(f.w.BytesPerSecond), live.seconds, live.casPerSync, guessMode(live.casPerSync))
	} else {
		fmt.Fprintf(w, "one shard: %g syncs/s, %s/s of ops", f.w.SyncsPerSecond, humanBytes(f.w.BytesPerSecond))
		if f.w.CheckpointEvery > 0 {
			fmt.Fprintf(w, ", a %s checkpoint of %d file(s) every %v\n", humanBytes(float64(f.w.CheckpointBytes)), f.w.CheckpointFiles, f.w.CheckpointEvery)
		} else {
			fmt.Fprintln(w, ", no checkpoints")
		}
	}
	fmt.Fprintf(w, "prices: %s (%s): PUT $%g/1k, GET $%g/1k, storage $%g/GiB-month; %s, written down %s (check it: --show-prices)\n\n",
		p.Name(), p.Region, p.PutPer1k, p.GetPer1k, p.StoragePerGBMonth, p.Source, table.Date)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "mode\tPUT/sync\tGET/sync\tPUT/month\tGET/month\trequests $\tstorage $\t$/shard-month\t"
	if f.budget > 0 {
		head += fmt.Sprintf("within $%g\tmax syncs/s\t", f.budget)
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		name := r.Mode
		if r.Yours {
			name = "* " + name
		}
		line := fmt.Sprintf("%s\t%.2f\t%.2f\t%s\t%s\t%.2f\t%.2f\t%.2f\t", name, r.PutPerSync, r.GetPerSync, humanCount(r.PutPerMonth), humanCount(r.GetPerMonth), r.RequestUSD, r.StorageUSD, r.TotalUSD)
		if r.WithinBudget != nil {
			line += fmt.Sprintf("%s\t%s\t", yesNo(*r.WithinBudget), maxRate(r.MaxSyncsPerS))
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if live == nil {
		fmt.Fprintf(w, "* is --fencing-mode. ")
	}
	fmt.Fprintln(w, "Where the requests per sync come from:")
	for _, r := range rows {
		fmt.Fprintf(w, "  %s: %s\n", r.Mode, r.Source)
	}
	fmt.Fprintf(w, "Plus, in every mode: a data object per sync whose payload exceeds %s (--inline-limit), each checkpoint's files, manifest and about %d GC listings, and lease mode's CAS once per %v while it syncs (%s a month here). A month is 730 hours; storage is the checkpoint and the translog since it.\n",
		humanBytes(float64(f.w.InlineLimit)), cost.CheckpointLists, f.w.LeaseInterval, humanCount(leaseCAS(rows)))
	if f.budget > 0 {
		printBudget(w, f, rows)
	}
	return nil
}

// printBudget says which modes fit the budget at the workload's rate, and
// at what sync interval each would.
func printBudget(w io.Writer, f *costFlags, rows []costRow) {
	fmt.Fprintf(w, "\nBudget $%g per shard-month at %g syncs/s:\n", f.budget, f.w.SyncsPerSecond)
	for _, r := range rows {
		if r.Mode == "unfenced (no safety)" {
			continue
		}
		switch {
		case *r.WithinBudget:
			fmt.Fprintf(w, "  %s fits ($%.2f).\n", r.Mode, r.TotalUSD)
		case r.MaxSyncsPerS == 0:
			fmt.Fprintf(w, "  %s cannot fit: storage alone costs more.\n", r.Mode)
		default:
			fmt.Fprintf(w, "  %s fits at up to %s syncs/s: a sync every %v or longer.\n",
				r.Mode, maxRate(r.MaxSyncsPerS), time.Duration(float64(time.Second)/r.MaxSyncsPerS).Round(time.Millisecond))
		}
	}
	fmt.Fprintln(w, "Fewer syncs carry more ops each: a longer serve --max-gather-delay, or fewer, larger appends.")
}

func leaseCAS(rows []costRow) float64 {
	for _, r := range rows {
		if r.leaseCASMonth > 0 {
			return r.leaseCASMonth
		}
	}
	return 0
}

// guessMode names the fencing mode a CAS-per-sync ratio suggests.
func guessMode(casPerSync float64) string {
	switch {
	case casPerSync > 0.9:
		return "per_sync or observe, by its CAS per sync"
	case casPerSync > 0:
		return "lease, by its CAS per sync"
	}
	return "create_only or unfenced, by its CAS per sync"
}

func maxRate(v float64) string {
	if math.IsInf(v, 1) {
		return "any"
	}
	return fmt.Sprintf("%.2f", v)
}

func humanCount(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func humanBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
