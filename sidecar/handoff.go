package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/relocation"
)

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
	if sh.isReplaying() {
		return nil, opErr(op, name, ErrReplaying, "hand the shard off once its replay ended")
	}
	if target == sh.alloc {
		return nil, opErr(op, name, fmt.Errorf("%w: target %q is the source itself", ErrInvalidArgument, target), "")
	}
	sh.mu.Lock()
	if sh.src == nil {
		// The options a resumed writer reopens with: the shard's own.
		sh.src = relocation.NewSource(sh.store, sh.chain, sh.w, sh.settings.WriterOptions())
	}
	src := sh.src
	sh.state, sh.target, sh.targetNode = ShardHandingOff, target, targetNode
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
	sh.setState(ShardHandedOff, target)
	s.log.Info("handed off", append(sh.logAttrs(), "target", target, "target_node", targetNode, "handoff_gen", hc.Gen,
		"duration_ms", time.Since(start).Milliseconds())...)
	return b, nil
}

// AdoptHandoff opens the shard on this sidecar as the target of a handoff:
// same term, continuing the fence chain at the context's token. What the
// adoption checks and does is the opener's Adopt; the shard takes a slot
// here only where this sidecar's own term no longer writes.
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
	settings, err := s.settingsFor(op, name, req)
	if err != nil {
		return ShardStatus{}, err
	}
	if settings.FencingDisabled {
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: a handed-off shard stays fenced", ErrInvalidArgument), "")
	}
	store, err := s.storeFor(op, name, settings)
	if err != nil {
		return ShardStatus{}, err
	}
	if err := validateName("target allocation", hc.Target, false); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	admit := func(prev *shard) error {
		if prev == nil {
			return nil
		}
		if st := prev.status(); !st.State.yieldsToAdopt() {
			return opErr(op, name, fmt.Errorf("%w: the shard is %s here at term %d", ErrShardBusy, st.State, prev.term), "close it here first")
		}
		return nil
	}
	sh := &shard{name: name, store: store, term: hc.Term, alloc: hc.Target, settings: settings, state: ShardOpening, stallAfter: s.opts.StallAfter}
	_, err = s.openIn(ctx, op, sh, admit, func() (*opened, error) {
		return s.opener.Adopt(ctx, store, hc, openParams{Shard: name, Term: hc.Term, Allocation: hc.Target, Node: s.opts.Node, Settings: settings})
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return ShardStatus{}, err
		}
		return ShardStatus{}, opErr(op, name, err, hintFor(err))
	}
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
	sh := s.reg.lookup(name)
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
	resumed := outcome == relocation.Resumed
	if resumed {
		sh.mu.Lock()
		sh.w, sh.state, sh.target = src.Writer(), ShardOpen, ""
		sh.mu.Unlock()
	}
	s.log.Info("handoff aborted", append(sh.logAttrs(), "outcome", outcome.String())...)
	return resumed, nil
}
