package sidecar

import (
	"context"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// stateHandedOff: the fence key names the relocation target; this sidecar
// no longer acknowledges the shard.
const stateHandedOff = "handed_off"

// stateHandingOff: the source is draining and transferring the key.
const stateHandingOff = "handing_off"

// StartHandoff drains the shard's in-flight syncs, stops its appends and
// transfers the term's fence key to target. The returned context goes to
// the target's AdoptHandoff, or back to AbortHandoff here.
func (s *Server) StartHandoff(ctx context.Context, name, target, targetNode string) ([]byte, error) {
	const op = "StartHandoff"
	sh, err := s.get(op, name)
	if err != nil {
		return nil, err
	}
	if err := validateName("target allocation", target, false); err != nil {
		return nil, opErr(op, name, err, "")
	}
	if err := validateName("target node", targetNode, true); err != nil {
		return nil, opErr(op, name, err, "")
	}
	if sh.chain == nil {
		return nil, opErr(op, name, fmt.Errorf("%w: a handoff moves the fence key; this shard is unfenced", ErrInvalidArgument), "")
	}
	if target == sh.alloc {
		return nil, opErr(op, name, fmt.Errorf("%w: target %q is the source itself", ErrInvalidArgument, target), "")
	}
	sh.mu.Lock()
	if sh.src == nil {
		// The options a resumed writer reopens with: the shard's own.
		sh.src = relocation.NewSource(sh.store, sh.chain, sh.w, sh.settings.writerOptions(openParams{}, 0, 0))
	}
	src := sh.src
	sh.state, sh.target = stateHandingOff, target
	sh.mu.Unlock()
	start := time.Now()
	hc, err := src.Handoff(ctx, target, targetNode)
	if err != nil {
		// The drain closed the writer: appends stay refused as handing
		// off until a retried StartHandoff or an AbortHandoff settles it.
		return nil, opErr(op, name, err, "retry StartHandoff, or AbortHandoff to resume here")
	}
	b, err := hc.Marshal()
	if err != nil {
		return nil, opErr(op, name, err, "")
	}
	sh.mu.Lock()
	sh.state, sh.target = stateHandedOff, target
	sh.mu.Unlock()
	s.log.Info("handed off", append(sh.logAttrs(), "target", target, "target_node", targetNode, "handoff_gen", hc.Gen,
		"duration_ms", time.Since(start).Milliseconds())...)
	return b, nil
}

// AdoptHandoff opens the shard on this sidecar as the target of a handoff:
// same term, continuing the fence chain at the context's token.
func (s *Server) AdoptHandoff(ctx context.Context, raw []byte, req Settings) (ShardStatus, error) {
	const op = "AdoptHandoff"
	hc, err := relocation.Unmarshal(raw)
	if err != nil {
		return ShardStatus{}, opErr(op, "", fmt.Errorf("%w: %w", ErrInvalidArgument, err), "pass the bytes StartHandoff returned")
	}
	name := hc.Shard
	if err := ValidateShardID(name); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	settings := mergeSettings(s.opts.Defaults, req)
	if err := settings.Validate(); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	if settings.FencingDisabled {
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: a handed-off shard stays fenced", ErrInvalidArgument), "")
	}
	if s.probeErr != nil {
		return ShardStatus{}, opErr(op, name, s.probeErr, "use a store that enforces conditional writes")
	}
	store, err := s.shardStore(name)
	if err != nil {
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: %w", ErrInvalidArgument, err), "")
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return ShardStatus{}, opErr(op, name, ErrShuttingDown, "adopt the shard on another sidecar")
	}
	if prev := s.shards[name]; prev != nil && prev.status().State != stateHandedOff && prev.status().State != stateFenced {
		s.mu.Unlock()
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: the shard is %s here at term %d", ErrShardBusy, prev.status().State, prev.term), "close it here first")
	}
	if err := validateName("target allocation", hc.Target, false); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	sh := &shard{name: name, store: store, term: hc.Term, alloc: hc.Target, settings: settings, state: stateOpening, stallAfter: s.opts.StallAfter}
	prev := s.shards[name]
	s.shards[name] = sh
	s.mu.Unlock()
	undo := func(err error) (ShardStatus, error) {
		s.mu.Lock()
		if s.shards[name] == sh {
			if prev != nil {
				s.shards[name] = prev
			} else {
				delete(s.shards, name)
			}
		}
		s.mu.Unlock()
		return ShardStatus{}, opErr(op, name, err, hintFor(err))
	}
	// The term continues in the shard's stored fencing mode, not this
	// sidecar's defaults (relocation.Adopt enforces the same).
	fencing, err := seal.ShardFencing(ctx, store, name, seal.FencingOf(settings.WriterOptions()), seal.Options{})
	if err != nil {
		return undo(err)
	}
	settings = settings.withFencing(fencing)
	sh.mu.Lock()
	sh.settings = settings
	sh.mu.Unlock()
	// The lineage the source's term inherited, read before the chain is
	// taken: its newest marker must be the handed-off term's.
	rep, err := seal.Inspect(ctx, store, name, seal.Options{})
	if err != nil {
		return undo(err)
	}
	if len(rep.Lineage.Chain) == 0 || rep.Lineage.Chain[0].Term != hc.Term {
		return undo(fmt.Errorf("%w: the shard's newest seal marker is not of handed-off term %d", fence.ErrFenced, hc.Term))
	}
	chain, w, err := relocation.Adopt(ctx, store, hc.Target, hc, relocation.AdoptOptions{
		Node: s.opts.Node, Writer: settings.writerOptions(openParams{}, 0, 0),
	})
	if err != nil {
		return undo(err)
	}
	lin := rep.Lineage
	sh.mu.Lock()
	// Under the lock: Status may read the shard while it is adopted.
	sh.chain, sh.startGen = chain, hc.Gen+1
	sh.restore = RestorePoint{Term: hc.Term, Gen: hc.Gen, NextSeqNo: hc.NextSeqNo}
	if hc.Gen > 0 {
		sh.lineage = func(ctx context.Context, fn func(translog.Batch) error) error {
			return readLineage(ctx, store, name, lin, hc.Gen, fn)
		}
	}
	sh.opened = time.Now()
	sh.w, sh.ackedGen, sh.nextSeq, sh.state = w, hc.Gen, hc.NextSeqNo, stateOpen
	sh.mu.Unlock()
	s.log.Info("shard adopted", append(sh.logAttrs(), "source", hc.Source)...)
	st := sh.status()
	s.watch.opened(name, hc.Term, hc.Target, st, nil)
	return st, nil
}

// AbortHandoff ends a handoff on the source: it takes the fence key back
// and resumes appends (true), or stands down because the target already
// wrote (false, not an error).
func (s *Server) AbortHandoff(ctx context.Context, raw []byte) (bool, error) {
	const op = "AbortHandoff"
	hc, err := relocation.Unmarshal(raw)
	if err != nil {
		return false, opErr(op, "", fmt.Errorf("%w: %w", ErrInvalidArgument, err), "pass the bytes StartHandoff returned")
	}
	name := hc.Shard
	if err := ValidateShardID(name); err != nil {
		return false, opErr(op, name, err, "")
	}
	s.mu.Lock()
	sh := s.shards[name]
	s.mu.Unlock()
	if sh == nil || sh.alloc != hc.Source || sh.term != hc.Term {
		return false, opErr(op, name, ErrShardNotOpen, fmt.Sprintf("abort on the source: the sidecar of allocation %q at term %d", hc.Source, hc.Term))
	}
	sh.mu.Lock()
	src := sh.src
	sh.mu.Unlock()
	if src == nil {
		return false, opErr(op, name, fmt.Errorf("%w: no handoff was started here", ErrInvalidArgument), "")
	}
	outcome, err := src.Abort(ctx)
	if err != nil {
		return false, opErr(op, name, err, "retry AbortHandoff")
	}
	sh.mu.Lock()
	resumed := outcome == relocation.Resumed
	if resumed {
		sh.w, sh.state, sh.target = src.Writer(), stateOpen, ""
	}
	sh.mu.Unlock()
	s.log.Info("handoff aborted", append(sh.logAttrs(), "outcome", outcome.String())...)
	return resumed, nil
}
