package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Close drains the shard's in-flight syncs, answers its pending appends
// and releases it on this sidecar. The term stays claimed and its writes
// may be in flight nowhere else, but it cannot be opened again: the next
// Open of the shard needs a higher term.
func (s *Server) Close(ctx context.Context, name string) (ShardStatus, error) {
	const op = "Close"
	sh, err := s.get(op, name)
	if err != nil {
		return ShardStatus{}, err
	}
	_, target := sh.lifecycle()
	sh.setState(ShardClosing, target)
	// A warm shard's replay and hydration end first: a replay that opened
	// a writer meanwhile closes it, as the shard no longer takes it.
	sh.stopWarm()
	var cerr error
	if w := sh.writer(); w != nil {
		cerr = w.Close(ctx)
	}
	st := sh.status()
	s.reg.release(sh)
	st.State = ShardClosed
	s.log.Info("shard closed", sh.logAttrs()...)
	if cerr != nil {
		return st, opErr(op, name, cerr, "syncs in progress were abandoned; their appends were not acknowledged")
	}
	return st, nil
}

// Shutdown stops taking opens and appends, syncs what every writer has
// queued, answers every pending caller and closes the writers, those a
// later term replaced here included. Nothing acknowledged is lost: an ack
// is only ever sent after its sync landed. When ctx ends first, the syncs
// still in progress are abandoned; Shutdown returns once every writer's
// goroutines ended either way.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopped) })
	shards := s.reg.startDrain()
	var wg sync.WaitGroup
	errs := make([]error, len(shards))
	for i, sh := range shards {
		wg.Go(func() {
			sh.stopWarm()
			w := sh.writer()
			if w == nil {
				return
			}
			if err := w.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("shard %q: %w", sh.name, err)
			}
		})
	}
	wg.Wait()
	s.reg.waitReplaced(ctx)
	s.removeWarm()
	s.log.Info("sidecar drained", "shards", len(shards))
	return errors.Join(errs...)
}
