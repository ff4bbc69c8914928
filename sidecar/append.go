package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// Append appends ops and returns once they are durable and fenced.
func (s *Server) Append(ctx context.Context, name string, ops [][]byte, expectedTerm int64) (translog.Ack, error) {
	ack, err := s.append(ctx, name, ops, expectedTerm)
	if err != nil {
		s.metrics.appends.WithLabelValues(reasonLabel(err)).Inc()
		return ack, err
	}
	s.metrics.appends.WithLabelValues("ok").Inc()
	s.metrics.ackedOps.Add(float64(ack.Count))
	return ack, nil
}

func (s *Server) append(ctx context.Context, name string, ops [][]byte, expectedTerm int64) (translog.Ack, error) {
	const op = "Append"
	sh, err := s.get(op, name)
	if err != nil {
		return translog.Ack{}, err
	}
	if hint, err := s.opts.Limits.checkOps(ops); err != nil {
		return translog.Ack{}, opErr(op, name, err, hint)
	}
	if err := s.appendable(op, sh, expectedTerm); err != nil {
		return translog.Ack{}, err
	}
	start, sent := time.Now(), s.clock.Now()
	w := sh.writer()
	actx, stop := cutOnStoreFault(ctx, w)
	ack, err := w.Append(actx, ops)
	stop()
	if err != nil {
		return translog.Ack{}, s.appendFailed(op, sh, actx, w, err)
	}
	s.metrics.ackLatency.Observe(time.Since(start).Seconds())
	sh.acked(ack, sent)
	s.noteObserved(sh, ack)
	return ack, nil
}

// appendable refuses an append that the shard's state or the sidecar's
// forbids before anything is written: handed off or handing off, open at
// another term than the caller expects, the sidecar shutting down.
func (s *Server) appendable(op string, sh *shard, expectedTerm int64) error {
	state, target := sh.lifecycle()
	switch state {
	case ShardHandedOff:
		return opErr(op, sh.name, &handoffError{err: fence.ErrHandedOff, target: target, node: sh.targetNodeName()}, "append on the relocation target")
	case ShardHandingOff:
		return opErr(op, sh.name, &handoffError{err: ErrHandingOff, target: target, node: sh.targetNodeName()}, "not acknowledged; retry on the target once it adopted the shard")
	}
	if sh.isReplaying() {
		return opErr(op, sh.name, ErrReplaying, "nothing was written; retry once Status reports replaying false (reads are served meanwhile)")
	}
	if expectedTerm != 0 && expectedTerm != sh.term {
		return opErr(op, sh.name, fmt.Errorf("%w: open at term %d, the caller expects %d", ErrWrongTerm, sh.term, expectedTerm), "reopen the shard at the caller's term")
	}
	if err := s.Ready(); err != nil {
		return opErr(op, sh.name, err, "nothing was written; append on the shard's next primary")
	}
	return nil
}

// appendFailed is the error an append whose writer refused or failed it
// returns: a handoff that drained the writer under it, a store fault that
// cut it short, or the writer's own error (logged and counted once).
func (s *Server) appendFailed(op string, sh *shard, ctx context.Context, w *translog.Writer, err error) error {
	if state, target := sh.lifecycle(); errors.Is(err, translog.ErrClosed) && state.movedAway() {
		// The handoff drained the writer under this append.
		return opErr(op, sh.name, &handoffError{err: ErrHandingOff, target: target, node: sh.targetNodeName(), cause: err}, "not acknowledged; retry on the target once it adopted the shard")
	}
	s.noteFailure(sh, err)
	if ferr := storeFault(ctx, w, err); ferr != err {
		return opErr(op, sh.name, ferr, "the store is failing, see the shard's store health in status; retry the append once it takes writes again")
	}
	return opErr(op, sh.name, err, hintFor(err))
}

// handoffError is an append refused because the shard moved, or is
// moving, to another allocation: the API names it (ErrorDetail's
// allocation and node) so a client can follow the shard.
type handoffError struct {
	err    error // fence.ErrHandedOff or ErrHandingOff
	target string
	node   string
	cause  error
}

func (e *handoffError) Error() string {
	msg := fmt.Sprintf("%v: the shard moved to allocation %q", e.err, e.target)
	if e.err == ErrHandingOff {
		msg = fmt.Sprintf("%v to allocation %q", e.err, e.target)
	}
	if e.node != "" {
		msg += fmt.Sprintf(" on node %q", e.node)
	}
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

func (e *handoffError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.err, e.cause}
	}
	return []error{e.err}
}

// noteObserved logs, once per shard, the first ack an observe-mode writer
// gave that per-sync fencing would have failed.
func (s *Server) noteObserved(sh *shard, ack translog.Ack) {
	if ack.FencingObserved == "" {
		return
	}
	sh.mu.Lock()
	first := !sh.observedLogged
	sh.observedLogged = true
	sh.mu.Unlock()
	if first {
		s.log.Warn("fencing observed: per_sync mode would have failed this append and every later one (observe mode acknowledges them)",
			append(sh.logAttrs(), "gen", ack.Gen, "reason", ack.FencingObserved)...)
	}
}

// noteFailure logs and counts a writer's terminal failure once.
func (s *Server) noteFailure(sh *shard, err error) {
	werr := sh.writer().Err()
	if werr == nil || !sh.failed(werr) {
		return
	}
	if errors.Is(werr, fence.ErrFenced) {
		s.metrics.fenced.Inc()
		succ, _ := fence.SuccessorTerm(werr)
		s.log.Warn("shard fenced", append(sh.logAttrs(), "successor_term", succ, "error", werr.Error())...)
		return
	}
	s.log.Error("shard writer failed", append(sh.logAttrs(), "error", werr.Error())...)
}
