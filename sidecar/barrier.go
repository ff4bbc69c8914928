package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// The read barrier. Writes are fenced by the store; reads are served by
// the primary from its own state, which a paused or partitioned primary
// still holds after a successor took the shard over. A barrier proves, at
// a point after it was called, that this sidecar's allocation still holds
// the shard's term:
//
//   - per_sync, create_only and observe: one read of the shard's fence key.
//     While the key exists and names this claim, no successor has swept it,
//     so none has sealed or acknowledged anything: every op acknowledged by
//     anyone before the read was acknowledged here. Concurrent barriers
//     share one read, started after each of them was called.
//   - lease: none while the lease of the last fence CAS runs (the
//     successor waits that lease plus a margin after its sweep before it
//     seals, the same bound lease-mode acknowledgements rely on); a read
//     of the key as above once it ran out.
//
// A primary that answers a read from its state after a successful
// barrier, having applied every op below the barrier's NextSeqNo, answers
// a linearizable read (docs/PROTOCOL.md section 3, "Read barrier").

// BarrierResult is what a barrier proved.
type BarrierResult struct {
	Term int64
	// Gen and NextSeqNo are the shard's log as acknowledged when the
	// barrier was called: every op acknowledged before it has a sequence
	// number below NextSeqNo.
	Gen       int64
	NextSeqNo int64
	// Local: answered inside the lease, with no store request.
	Local bool
}

// barrierTimeout bounds one shared fence key read.
const barrierTimeout = 30 * time.Second

// Barrier proves that this sidecar still holds the shard's term (see
// above). expectedTerm, when not 0, refuses a shard open at another term.
func (s *Server) Barrier(ctx context.Context, name string, expectedTerm int64) (BarrierResult, error) {
	const op = "Barrier"
	sh, err := s.get(op, name)
	if err != nil {
		return BarrierResult{}, err
	}
	state, target := sh.lifecycle()
	switch state {
	case ShardHandedOff:
		return BarrierResult{}, opErr(op, name, &handoffError{err: fence.ErrHandedOff, target: target, node: sh.targetNodeName()}, "read on the relocation target")
	case ShardHandingOff:
		return BarrierResult{}, opErr(op, name, &handoffError{err: ErrHandingOff, target: target, node: sh.targetNodeName()}, "read on the target once it adopted the shard")
	}
	if sh.isReplaying() {
		// A warm open's replay has not yet learnt where the log ends: no
		// position to promise.
		return BarrierResult{}, opErr(op, name, ErrReplaying, "retry once Status reports replaying false")
	}
	sh.mu.Lock()
	res := BarrierResult{Term: sh.term, Gen: sh.ackedGen, NextSeqNo: sh.nextSeq}
	chain, w, mode, fenceErr, unfenced := sh.chain, sh.w, sh.settings.Mode, sh.fenceErr, sh.settings.FencingDisabled
	sh.mu.Unlock()
	switch {
	case expectedTerm != 0 && expectedTerm != res.Term:
		return BarrierResult{}, opErr(op, name, fmt.Errorf("%w: open at term %d, the caller expects %d", ErrWrongTerm, res.Term, expectedTerm), "reopen the shard at the caller's term")
	case fenceErr != nil:
		return BarrierResult{}, opErr(op, name, fenceErr, hintFor(fenceErr))
	case unfenced || chain == nil:
		return BarrierResult{}, opErr(op, name, fmt.Errorf("%w: the shard is open unfenced: no term to prove, so no barrier", ErrInvalidArgument), "open the shard fenced to serve linearizable reads")
	}
	if mode == translog.Lease && w != nil && w.Lease().Covers(s.clock.Now()) {
		s.metrics.barriers.WithLabelValues("local").Inc()
		res.Local = true
		return res, nil
	}
	check := chain.Check
	if mode == translog.Observe {
		// An observe-mode writer goes on writing whatever the key says:
		// the barrier reads without fencing it.
		check = func(ctx context.Context) error {
			held, err := chain.Holds(ctx)
			if err == nil && !held {
				err = fmt.Errorf("%w: the fence key no longer names this claim (observe mode: the writer goes on, but its reads are not linearizable)", fence.ErrFenced)
			}
			return err
		}
	}
	if err := sh.barriers.do(ctx, func() error {
		s.metrics.barrierReads.Inc()
		cctx, cancel := context.WithTimeout(context.Background(), barrierTimeout)
		defer cancel()
		return check(cctx)
	}); err != nil {
		if errors.Is(err, fence.ErrFenced) {
			if mode != translog.Observe && sh.failed(err) {
				s.metrics.fenced.Inc()
				succ, _ := fence.SuccessorTerm(err)
				s.log.Warn("shard fenced (found by a read barrier)", append(sh.logAttrs(), "successor_term", succ, "error", err.Error())...)
			}
			s.metrics.barriers.WithLabelValues("fenced").Inc()
			return BarrierResult{}, opErr(op, name, err, "this sidecar lost the shard's term: serve no read from its state")
		}
		s.metrics.barriers.WithLabelValues("error").Inc()
		return BarrierResult{}, opErr(op, name, err, "the fence key could not be read: serve no read until a barrier succeeds")
	}
	s.metrics.barriers.WithLabelValues("store").Inc()
	return res, nil
}

// barrierGroup shares fence key reads between concurrent barriers of one
// shard. A caller joins the round that has not been sent yet (or starts
// one), so every read a caller waits for was sent after it was called:
// callers that arrive while a read is on its way wait for the next one.
type barrierGroup struct {
	mu      sync.Mutex
	waiting *barrierRound
	running bool
}

type barrierRound struct {
	done chan struct{}
	err  error
}

// do waits for a read sent after the call: read is one fence key read.
func (g *barrierGroup) do(ctx context.Context, read func() error) error {
	g.mu.Lock()
	r := g.waiting
	if r == nil {
		r = &barrierRound{done: make(chan struct{})}
		g.waiting = r
		if !g.running {
			g.running = true
			go g.loop(read)
		}
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop sends one read per round until no round waits.
func (g *barrierGroup) loop(read func() error) {
	for {
		g.mu.Lock()
		r := g.waiting
		g.waiting = nil
		if r == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		r.err = read()
		close(r.done)
	}
}
