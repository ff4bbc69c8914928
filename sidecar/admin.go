package sidecar

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// GCResult is what a GC planned and deleted.
type GCResult struct {
	Planned []seal.Object
	Deleted []string
}

// GC deletes what no restore point of the shard needs, on behalf of the
// term open here: orphans, translog below the newest checkpoint minus the
// shard's retention, markers and checkpoints beyond retention. It runs
// only while this term owns the shard (a fence CAS within the freshness
// interval), never deletes a poison, and plans without deleting on dryRun.
func (s *Server) GC(ctx context.Context, name string, dryRun bool) (GCResult, error) {
	const op = "GC"
	sh, err := s.get(op, name)
	if err != nil {
		return GCResult{}, err
	}
	if sh.chain == nil {
		return GCResult{}, opErr(op, name, fmt.Errorf("%w: GC needs a fenced shard (it proves ownership with the fence key)", ErrInvalidArgument), "")
	}
	if sh.isReplaying() {
		return GCResult{}, opErr(op, name, ErrReplaying, "run GC once the replay ended")
	}
	if w := sh.warmShard(); w != nil && w.stats().Locality == LocalityPartial {
		return GCResult{}, opErr(op, name, ErrPartial, "run GC once Status reports locality full")
	}
	sh.mu.Lock()
	proof := sh.proof
	sh.mu.Unlock()
	res, err := seal.GC(ctx, sh.store, sh.chain, seal.GCOptions{
		Options: seal.Options{Clock: s.clock}, Policy: seal.GCPolicy{RetainGens: sh.settings.RetentionGens},
		Freshness: sh.settings.FreshnessInterval, LastCAS: proof, DryRun: dryRun,
	})
	if err != nil {
		return GCResult{}, opErr(op, name, err, hintFor(err))
	}
	s.log.Info("gc", append(sh.logAttrs(), "planned", len(res.Planned), "deleted", len(res.Deleted), "dry_run", dryRun)...)
	return GCResult{Planned: res.Planned, Deleted: res.Deleted}, nil
}

// PublishCheckpoint stores files as the checkpoint of the shard's state up
// to gen: gen must be acknowledged by this term, or be its restore point.
// It is refused once a higher term exists.
func (s *Server) PublishCheckpoint(ctx context.Context, name string, gen int64, chunks []FileChunk) (string, error) {
	const op = "PublishCheckpoint"
	sh, err := s.get(op, name)
	if err != nil {
		return "", err
	}
	if sh.chain == nil {
		return "", opErr(op, name, fmt.Errorf("%w: checkpoints need a fenced shard", ErrInvalidArgument), "")
	}
	if sh.isReplaying() {
		return "", opErr(op, name, ErrReplaying, "publish once the replay ended")
	}
	sh.mu.Lock()
	acked, proof := sh.ackedGen, sh.proof
	sh.mu.Unlock()
	var next int64
	switch {
	case gen == sh.restore.Gen:
		next = sh.restore.NextSeqNo
	case gen >= sh.startGen && gen <= acked:
		md, err := translog.NewReader(sh.store, name).ReadMD(ctx, sh.term, gen)
		if err != nil {
			return "", opErr(op, name, err, hintFor(err))
		}
		next = md.FirstSeqNo + md.OpCount
	default:
		return "", opErr(op, name, fmt.Errorf("%w: generation %d is neither acknowledged by term %d (%d..%d) nor its restore point %d", ErrInvalidArgument, gen, sh.term, sh.startGen, acked, sh.restore.Gen), "checkpoint a generation this term acknowledged")
	}
	files, err := assembleChunks(chunks)
	if err != nil {
		return "", opErr(op, name, err, "")
	}
	m, err := seal.PublishCheckpointFS(ctx, sh.store, sh.chain, gen, files, seal.PublishOptions{
		Options: seal.Options{Clock: s.clock}, Freshness: sh.settings.FreshnessInterval, LastCAS: proof, NextSeqNo: next,
	})
	if err != nil {
		return "", opErr(op, name, err, hintFor(err))
	}
	sh.mu.Lock()
	sh.checkpoints = append(sh.checkpoints, seal.Manifest{Term: m.Term, Gen: m.Gen, NextSeqNo: m.NextSeqNo})
	sh.backlog.checkpointed(m.Gen, time.Now())
	sh.mu.Unlock()
	go s.afterCheckpoint(name)
	s.log.Info("checkpoint published", append(sh.logAttrs(), "checkpoint_gen", gen, "files", len(m.Files), "key", m.Key())...)
	return m.Key(), nil
}

// assembleChunks reassembles file chunks in memory. Names are checked like
// shard ids, segment by segment, so each is a plain relative path; a file's
// chunks come in order; no name is both a file and a folder of another.
func assembleChunks(chunks []FileChunk) (*seal.MemFiles, error) {
	bodies := map[string][]byte{}
	for _, c := range chunks {
		for _, seg := range strings.Split(c.Name, "/") {
			if err := ValidateShardID(seg); err != nil {
				return nil, fmt.Errorf("%w: checkpoint file name %q: each path segment must be a plain name", ErrInvalidArgument, clip(c.Name))
			}
		}
		body, seen := bodies[c.Name]
		if c.Offset != int64(len(body)) {
			return nil, fmt.Errorf("%w: checkpoint file %q: chunk at offset %d, expected %d (send each file's chunks in order)", ErrInvalidArgument, clip(c.Name), c.Offset, len(body))
		}
		if !seen {
			// The request's own bytes, capped so that a later chunk
			// appends to a copy.
			bodies[c.Name] = c.Data[:len(c.Data):len(c.Data)]
			continue
		}
		bodies[c.Name] = append(body, c.Data...)
	}
	files := seal.NewMemFiles()
	for name, body := range bodies {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := bodies[dir]; ok {
				return nil, fmt.Errorf("%w: checkpoint file %q appears twice, as a file and as a folder of %q", ErrInvalidArgument, clip(dir), clip(name))
			}
		}
		if _, err := files.WriteFile(name, body); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	return files, nil
}
