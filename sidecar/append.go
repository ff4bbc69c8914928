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
	state, target := sh.lifecycle()
	switch state {
	case ShardHandedOff:
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: the shard moved to allocation %q", fence.ErrHandedOff, target), "append on the relocation target")
	case ShardHandingOff:
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w to allocation %q", ErrHandingOff, target), "not acknowledged; retry on the target once it adopted the shard")
	}
	if expectedTerm != 0 && expectedTerm != sh.term {
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: open at term %d, the caller expects %d", ErrWrongTerm, sh.term, expectedTerm), "reopen the shard at the caller's term")
	}
	if err := s.Ready(); err != nil {
		return translog.Ack{}, opErr(op, name, err, "nothing was written; append on the shard's next primary")
	}
	start, sent := time.Now(), s.clock.Now()
	w := sh.writer()
	actx, stop := cutOnStoreFault(ctx, w)
	ack, err := w.Append(actx, ops)
	stop()
	if err != nil {
		if state, target := sh.lifecycle(); errors.Is(err, translog.ErrClosed) && state.movedAway() {
			// The handoff drained the writer under this append.
			return translog.Ack{}, opErr(op, name, fmt.Errorf("%w to allocation %q: %w", ErrHandingOff, target, err), "not acknowledged; retry on the target once it adopted the shard")
		}
		s.noteFailure(sh, err)
		if ferr := storeFault(actx, w, err); ferr != err {
			return translog.Ack{}, opErr(op, name, ferr, "the store is failing, see the shard's store health in status; retry the append once it takes writes again")
		}
		return translog.Ack{}, opErr(op, name, err, hintFor(err))
	}
	s.metrics.ackLatency.Observe(time.Since(start).Seconds())
	sh.acked(ack, sent)
	return ack, nil
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
