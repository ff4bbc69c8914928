package sidecar

import (
	"context"
	"fmt"
	"math"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Inspect reads a shard's fence keys and translog layout straight from
// root (the store all shards live under), without opening the shard. It
// writes nothing, so it is safe next to a live primary. What it reports is
// seal.Describe's; this is its rendering for the API.
func Inspect(ctx context.Context, root *blobstore.Container, shard string) (*sidecarv1.InspectResponse, error) {
	const op = "Inspect"
	if err := ValidateShardID(shard); err != nil {
		return nil, opErr(op, shard, err, "")
	}
	store, err := blobstore.Sub(root, shard)
	if err != nil {
		return nil, opErr(op, shard, fmt.Errorf("%w: %w", ErrInvalidArgument, err), "")
	}
	d, err := seal.Describe(ctx, store, shard, seal.Options{})
	if err != nil {
		return nil, opErr(op, shard, err, "check that the store is reachable")
	}
	out := &sidecarv1.InspectResponse{Shard: shard}
	// The stored fencing first: it says what every term runs and how long
	// a successor waits.
	out.Lines = settingsLines(d.Settings)
	if st := d.Settings; st.Found {
		out.StoredSettings = fencingProto(st.Fencing)
		if st.Rewrite != nil {
			out.SettingsRewrite = st.Rewrite.String()
		}
	}
	for _, fk := range d.Fence {
		p := &sidecarv1.FenceKey{Key: fk.Key, Term: fk.Term, Error: fk.Err}
		if fk.Err == "" {
			p.Owner, p.Seq, p.Gen = fk.Record.Allocation, fk.Record.Seq, fk.Record.Gen
		}
		out.FenceKeys = append(out.FenceKeys, p)
	}
	for _, key := range d.Unexpected {
		out.Lines = append(out.Lines, fmt.Sprintf("unexpected key %q under %s", key, layout.MDPrefix))
	}
	for _, tl := range d.Translog {
		out.Translog = append(out.Translog, &sidecarv1.TermGens{Term: tl.Term, FirstGen: tl.FirstGen, LastGen: tl.LastGen, Count: tl.Count, Poisoned: tl.Poisoned})
		if tl.Err != "" {
			out.Lines = append(out.Lines, fmt.Sprintf("term %d generation %d: %s", tl.Term, tl.LastGen, tl.Err))
		}
	}
	out.Lines = append(out.Lines, reportLines(d.Report)...)
	return out, nil
}

// settingsLines is the stored fencing, one fact per line.
func settingsLines(st seal.StoredSettings) []string {
	switch {
	case st.Err != nil:
		return []string{fmt.Sprintf("settings: %v", st.Err)}
	case !st.Found:
		return []string{"settings: none stored (no open created them yet)"}
	}
	l := []string{"settings: fencing " + st.Fencing.String() + " (" + layout.FencingKey + ")"}
	if st.OutOfRange != nil {
		l = append(l, fmt.Sprintf("settings: the stored lease %v is outside %v..%v: no term opens until `shardfence settings` rewrites it", st.Fencing.LeaseInterval, seal.MinLeaseInterval, seal.MaxLeaseInterval))
	}
	if st.Rewrite != nil {
		l = append(l, "settings: rewrite in progress "+st.Rewrite.String()+"; no term opens until it finishes (run `shardfence settings` again)")
	}
	return l
}

// fencingProto is the stored fencing in the API's settings message (the
// other fields are per open and stay unset).
func fencingProto(f seal.Fencing) *sidecarv1.ShardSettings {
	p := &sidecarv1.ShardSettings{FencingDisabled: f.Disabled, Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC}
	switch f.Mode {
	case translog.Lease:
		p.Mode, p.LeaseIntervalMs = sidecarv1.FencingMode_FENCING_MODE_LEASE, f.LeaseInterval.Milliseconds()
	case translog.CreateOnly:
		p.Mode = sidecarv1.FencingMode_FENCING_MODE_CREATE_ONLY
	case translog.Observe:
		p.Mode = sidecarv1.FencingMode_FENCING_MODE_OBSERVE
	}
	return p
}

// reportLines is the seal chain, lineage, checkpoints and what GC would
// delete, one fact per line.
func reportLines(rep *seal.Report) []string {
	var l []string
	add := func(format string, args ...any) { l = append(l, fmt.Sprintf(format, args...)) }
	if len(rep.Markers) == 0 {
		add("seal markers: none (no term has opened yet)")
	}
	for _, m := range rep.Markers {
		add("seal marker of term %d (allocation %s): restores term %d gen %d", m.Term, m.Allocation, m.Restore.Term, m.Restore.Gen)
	}
	for _, r := range rep.Lineage.Ranges {
		to := fmt.Sprint(r.To)
		if r.To == math.MaxInt64 {
			to = "open"
		}
		add("lineage: term %d gens %d..%s", r.Term, r.From, to)
	}
	if len(rep.Markers) > 0 && !rep.Lineage.Complete {
		add("lineage: the oldest markers were collected; history below gen %d lives in checkpoints", rep.Lineage.Base()+1)
	}
	for _, c := range rep.Checkpoints {
		note := ""
		if !c.OnLineage {
			note = " (off the lineage: never used)"
		}
		if c.Err != "" {
			note += " error: " + c.Err
		}
		add("checkpoint term %d gen %d: %d files, %d bytes%s", c.Term, c.Gen, c.Files, c.Bytes, note)
	}
	for _, p := range rep.Poisons {
		add("poison %s: generation %d of term %d sealed by term %d", p.Key, p.Gen, p.Term, p.Sealed)
	}
	for _, o := range rep.Orphans {
		add("orphan %s: %s", o.Key, o.Reason)
	}
	for _, o := range rep.GC {
		add("gc would delete %s: %s", o.Key, o.Reason)
	}
	for _, o := range rep.Problems {
		add("problem %s: %s", o.Key, o.Reason)
	}
	return l
}
