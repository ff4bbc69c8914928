package ha

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/seal"
)

// SnapshotResult reports a complete snapshot.
type SnapshotResult struct {
	Key      string // the checkpoint manifest's key
	Gen      int64  // the log generation it covers
	Objects  int
	Bytes    int64
	Duration time.Duration
	// Pause is how long the freeze held changes back; reads went on.
	// Copy is how long copying the objects (as encoded records) took after
	// it (a change to a stripe not copied yet copied that stripe first).
	Pause, Copy time.Duration
	// Unchanged: the log had not moved since the last snapshot, so
	// nothing was written; Key names that one.
	Unchanged bool
	// Collected counts what the GC after it deleted.
	Collected int
}

// snapshot takes a complete snapshot and publishes it as a checkpoint of
// the log:
//
//  1. freeze the master for an instant (changes wait, reads go on),
//     capture one clock pair, and cut the log there, so the snapshot is
//     exactly the log up to a generation boundary; the objects are then
//     copied stripe by stripe, as encoded records, copy-on-write
//     (master.Freeze);
//  2. wait for that generation's acknowledgement: a snapshot never covers
//     an entry the log might lose;
//  3. write the files (outside every lock) and upload them;
//  4. check the term is still ours (no higher fence key), then create the
//     checkpoint manifest, last, with create-if-absent;
//  5. collect what it makes unneeded through the fenced GC: log
//     generations and snapshots below the retained ones, never a poison.
//
// A master superseded before step 4 publishes nothing. One superseded in
// the instant between the check and the create still publishes a correct
// base: its generation was acknowledged, so every later restore point
// holds it.
func (n *Node) snapshot(ctx context.Context, explicit bool) (SnapshotResult, error) {
	start := time.Now()
	n.mu.Lock()
	m, lg, sh, role, last := n.m, n.oplog, n.sh, n.role, n.lastSnap
	n.mu.Unlock()
	if role != RolePrimary || lg == nil {
		return SnapshotResult{}, fmt.Errorf("%w: only the primary takes snapshots", master.ErrNotPrimary)
	}
	if pos, _ := lg.Acked(); pos == last.pos && (last.key != "" || pos.Gen == 0) {
		// Nothing changed since the last snapshot (or nothing was ever
		// logged).
		return SnapshotResult{Key: last.key, Gen: last.gen, Unchanged: true}, nil
	}
	fail := func(err error) (SnapshotResult, error) {
		n.opts.Metrics.snapshotFailures.Inc()
		return SnapshotResult{}, err
	}
	var cut *batch
	snap := m.Freeze(func() { cut = lg.Cut() }, n.opts.SnapshotFormat)
	pos, err := cut.position(ctx)
	if err != nil {
		return fail(fmt.Errorf("snapshot: the log up to the freeze was not acknowledged: %w", err))
	}
	if pos == last.pos {
		return SnapshotResult{Key: last.key, Gen: last.gen, Unchanged: true}, nil
	}
	term := sh.Chain.Term()
	dir, err := os.MkdirTemp(n.opts.Dir, "shardfence-master-snapshot-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	id := fmt.Sprintf("%s.t%d.g%d", n.opts.Cluster, term, pos.Gen)
	files, err := snap.WriteFiles(dir, id)
	if err != nil {
		return fail(err)
	}
	var size int64
	local := make([]seal.LocalFile, len(files))
	for i, f := range files {
		local[i] = seal.LocalFile{Name: f.Name, Path: f.Path}
		size += f.Size
	}
	// Only while this master holds its term: its own verdict, then the
	// fence keys (an unreadable fence refuses here, unlike a shard's
	// checkpoint, which fails open).
	if err := sh.Chain.Err(); err != nil {
		return fail(err)
	}
	if h, err := sh.Chain.Superseded(ctx); err != nil {
		return fail(fmt.Errorf("snapshot not published: the fence keys could not be read to prove term %d still holds the log: %w", term, err))
	} else if h > 0 {
		return fail(fmt.Errorf("%w: term %d claimed the log; this master's snapshot is not published", seal.ErrSuperseded, h))
	}
	_, proof := lg.Acked()
	so := seal.Options{Clock: n.opts.Clock, Backoff: n.opts.Backoff, Parallelism: 4}
	man, err := seal.PublishCheckpoint(ctx, n.store, sh.Chain, pos.Gen, local, seal.PublishOptions{
		Options: so, Freshness: n.opts.Freshness, LastCAS: proof, NextSeqNo: pos.NextSeqNo,
	})
	if err != nil {
		return fail(err)
	}
	res := SnapshotResult{Key: man.Key(), Gen: pos.Gen, Objects: snap.Objects(), Bytes: size, Pause: snap.Pause, Copy: snap.Copy}
	n.mu.Lock()
	n.lastSnap = snapshotInfo{key: man.Key(), gen: pos.Gen, pos: pos}
	n.mu.Unlock()
	_, proof = lg.Acked()
	gc, err := seal.GC(ctx, n.store, sh.Chain, seal.GCOptions{Options: so, Policy: n.opts.Retain, Freshness: n.opts.Freshness, LastCAS: proof})
	if err != nil {
		n.log.Warn("GC after the snapshot did not complete; the next snapshot tries again", "err", err)
	}
	if gc != nil {
		res.Collected = len(gc.Deleted)
	}
	res.Duration = time.Since(start)
	n.opts.Metrics.snapshots.Inc()
	n.opts.Metrics.snapshotSeconds.Observe(res.Duration.Seconds())
	n.opts.Metrics.snapshotBytes.Set(float64(size))
	n.opts.Metrics.snapshotObjects.Set(float64(res.Objects))
	n.opts.Metrics.snapshotPause.Set(res.Pause.Seconds())
	n.log.Info("complete snapshot published", "key", res.Key, "gen", res.Gen, "objects", res.Objects, "bytes", size,
		"duration", res.Duration, "pause", res.Pause, "collected", res.Collected, "explicit", explicit)
	return res, nil
}

// restoreCandidate restores a hydrated snapshot into a fresh master; an
// error refuses the candidate (an older one is tried).
func (n *Node) restoreCandidate(ctx context.Context, m seal.Manifest, paths []string) (*master.Master, error) {
	files := make(map[string]string, len(paths))
	for i, f := range m.Files {
		files[f.Name] = paths[i]
	}
	cand, err := n.newMaster()
	if err != nil {
		return nil, err
	}
	res, err := cand.RestoreSnapshot(ctx, files)
	if err != nil {
		return nil, err
	}
	n.log.Info("complete snapshot restored", "checkpoint", m.Key(), "version", res.Manifest.Version, "id", res.Manifest.ID,
		"objects", res.Objects, "segments", res.Segments, "dropped", res.Dropped, "cleaned", res.Cleaned, "expired", res.Expired)
	return cand, nil
}
