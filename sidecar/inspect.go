package sidecar

import (
	"context"
	"fmt"
	"math"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Inspect reads a shard's fence keys and translog layout straight from
// root (the store all shards live under), without opening the shard. It
// writes nothing, so it is safe next to a live primary.
func Inspect(ctx context.Context, root *blobstore.Container, shard string) (*sidecarv1.InspectResponse, error) {
	const op = "Inspect"
	if err := ValidateShardID(shard); err != nil {
		return nil, opErr(op, shard, err, "")
	}
	store, err := blobstore.Sub(root, shard)
	if err != nil {
		return nil, opErr(op, shard, fmt.Errorf("%w: %w", ErrInvalidArgument, err), "")
	}
	out := &sidecarv1.InspectResponse{Shard: shard}
	// The stored fencing first: it says what every term runs and how long
	// a successor waits.
	f, rw, found, err := seal.ReadFencing(ctx, store, shard, seal.Options{})
	switch {
	case err != nil:
		out.Lines = append(out.Lines, fmt.Sprintf("settings: %v", err))
	case !found:
		out.Lines = append(out.Lines, "settings: none stored (no open created them yet)")
	default:
		out.StoredSettings = fencingProto(f)
		out.Lines = append(out.Lines, "settings: fencing "+f.String()+" ("+seal.FencingKey+")")
		if f.Mode == translog.Lease && (f.LeaseInterval < seal.MinLeaseInterval || f.LeaseInterval > seal.MaxLeaseInterval) {
			out.Lines = append(out.Lines, fmt.Sprintf("settings: the stored lease %v is outside %v..%v: no term opens until `shardfence settings` rewrites it", f.LeaseInterval, seal.MinLeaseInterval, seal.MaxLeaseInterval))
		}
		if rw != nil {
			out.SettingsRewrite = rw.String()
			out.Lines = append(out.Lines, "settings: rewrite in progress "+rw.String()+"; no term opens until it finishes (run `shardfence settings` again)")
		}
	}
	keys, err := blobstore.ListAll(ctx, store, fence.KeyPrefix)
	if err != nil {
		return nil, opErr(op, shard, err, "check that the store is reachable")
	}
	for _, a := range keys {
		fk := &sidecarv1.FenceKey{Key: a.Key}
		fk.Term, _ = fence.ParseKey(a.Key)
		obj, err := store.Get(ctx, a.Key)
		if err == nil {
			var rec fence.Record
			if rec, err = fence.DecodeRecord(shard, a.Key, obj.Body); err == nil {
				fk.Owner, fk.Seq, fk.Gen = rec.Allocation, rec.Seq, rec.Gen
			}
		}
		if err != nil {
			fk.Error = err.Error()
		}
		out.FenceKeys = append(out.FenceKeys, fk)
	}
	mds, err := blobstore.ListAll(ctx, store, translog.MDPrefix)
	if err != nil {
		return nil, opErr(op, shard, err, "check that the store is reachable")
	}
	var cur *sidecarv1.TermGens
	// Inverted names list the newest term first, its newest generation
	// first.
	for _, a := range mds {
		term, gen, ok := translog.ParseMDKey(a.Key)
		if !ok {
			out.Lines = append(out.Lines, fmt.Sprintf("unexpected key %q under %s", a.Key, translog.MDPrefix))
			continue
		}
		if cur == nil || cur.Term != term {
			cur = &sidecarv1.TermGens{Term: term, LastGen: gen}
			out.Translog = append(out.Translog, cur)
			// A poison, if any, is the newest generation of its term.
			if md, err := translog.NewReader(store, shard).ReadMD(ctx, term, gen); err != nil {
				out.Lines = append(out.Lines, fmt.Sprintf("term %d generation %d: %v", term, gen, err))
			} else if md.Kind == translog.KindPoison {
				cur.Poisoned = append(cur.Poisoned, gen)
			}
		}
		cur.FirstGen = gen
		cur.Count++
	}
	rep, err := seal.Inspect(ctx, store, shard, seal.Options{})
	if err != nil {
		return nil, opErr(op, shard, err, "check that the store is reachable")
	}
	out.Lines = append(out.Lines, reportLines(rep)...)
	return out, nil
}

// fencingProto is the stored fencing in the API's settings message (the
// other fields are per open and stay unset).
func fencingProto(f seal.Fencing) *sidecarv1.ShardSettings {
	p := &sidecarv1.ShardSettings{FencingDisabled: f.Disabled, Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC}
	if f.Mode == translog.Lease {
		p.Mode, p.LeaseIntervalMs = sidecarv1.FencingMode_FENCING_MODE_LEASE, f.LeaseInterval.Milliseconds()
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
