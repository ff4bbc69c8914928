package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/seal"
)

// Open claims, seals and restores the shard and opens it for appends;
// events receive the restore as it happens.
func (s *Server) Open(ctx context.Context, name string, term int64, alloc string, req Settings, events func(openEvent) error) (ShardStatus, error) {
	return s.OpenWith(ctx, name, term, alloc, req, OpenOptions{}, events)
}

// OpenOptions are how an Open restores the shard.
type OpenOptions struct {
	// Warm opens in partial locality (OpenRequest.warm).
	Warm bool
}

// OpenWith is Open as opts asks.
func (s *Server) OpenWith(ctx context.Context, name string, term int64, alloc string, req Settings, opts OpenOptions, events func(openEvent) error) (ShardStatus, error) {
	const op = "Open"
	// An Open retried on a failing store is answered with the store's
	// error before the caller's deadline; retrying it is safe.
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	res, err := s.open(ctx, name, term, alloc, req, opts.Warm, s.watch.tee(name, term, alloc, events))
	s.watch.opened(name, term, alloc, res, err)
	if err != nil {
		s.metrics.opens.WithLabelValues(reasonLabel(err)).Inc()
		s.log.Warn("open failed", "shard", name, "term", term, "allocation", alloc, "error", err.Error())
		var e *Error
		if !errors.As(err, &e) {
			err = opErr(op, name, err, openHint(err, term))
		}
		return ShardStatus{}, err
	}
	s.metrics.opens.WithLabelValues("ok").Inc()
	return res, nil
}

// openAgain is the admission verdict for an Open of the term and
// allocation already open here: it is answered again, not reopened.
type openAgain struct{ status ShardStatus }

func (openAgain) Error() string { return "open again" }

func (s *Server) open(ctx context.Context, name string, term int64, alloc string, req Settings, warm bool, events func(openEvent) error) (ShardStatus, error) {
	const op = "Open"
	if err := ValidateShardID(name); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	if term < 1 || term > MaxTerm {
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: term %d is outside 1..%d", ErrInvalidArgument, term, int64(MaxTerm)), "")
	}
	if err := validateName("allocation", alloc, false); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	settings, err := s.settingsFor(op, name, req)
	if err != nil {
		return ShardStatus{}, err
	}
	if settings.FencingDisabled && !s.opts.AllowUnfenced {
		return ShardStatus{}, opErr(op, name, ErrUnfencedRefused, "start the sidecar with --allow-unfenced, for benchmarks only")
	}
	store, err := s.storeFor(op, name, settings)
	if err != nil {
		return ShardStatus{}, err
	}
	admit := func(prev *shard) error {
		if prev == nil {
			return nil
		}
		st := prev.status()
		switch {
		case st.State.inTransition():
			return opErr(op, name, ErrShardBusy, "retry when the other Open or Close returned")
		case st.State == ShardOpen && prev.term == term && prev.alloc == alloc:
			return openAgain{st}
		case prev.term > term:
			return opErr(op, name, fmt.Errorf("%w: open here at term %d, above %d", ErrWrongTerm, prev.term, term), "a lower term cannot take the shard back")
		}
		return nil
	}
	start := time.Now()
	s.log.Info("opening shard", "shard", name, "term", term, "allocation", alloc, "mode", settings.Mode.String(),
		"ack_order", settings.AckOrder.String(), "fencing", !settings.FencingDisabled)
	sh := &shard{name: name, store: store, term: term, alloc: alloc, settings: settings, state: ShardOpening, stallAfter: s.opts.StallAfter}
	var replayed int64 // bytes of the ops replayed: the backlog the term inherits
	o, err := s.openIn(ctx, op, sh, admit, func() (*opened, error) {
		return s.opener.Open(ctx, store, openParams{Shard: name, Term: term, Allocation: alloc, Node: s.opts.Node, Settings: settings, HydrateDir: s.opts.HydrateDir, Warm: warm},
			s.countHydration(func(ev openEvent) error {
				if ev.Ops != nil {
					for _, op := range ev.Ops.Ops {
						replayed += int64(len(op))
					}
				}
				if events == nil {
					return nil
				}
				return events(ev)
			}))
	})
	if err == nil {
		sh.mu.Lock()
		sh.backlog.inherited = replayed
		sh.mu.Unlock()
	}
	var again openAgain
	if errors.As(err, &again) {
		// The fencing fields are the shard's, whatever this call asked.
		st := again.status
		if want := settings.withFencing(seal.FencingOf(st.Settings.WriterOptions())); st.Settings != want {
			return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: the shard is open at term %d with other settings: %s", ErrInvalidArgument, term, st.Settings.diff(want)), "settings are fixed when a shard opens; open a new term to change them")
		}
		return st, nil
	}
	if err != nil {
		return ShardStatus{}, err
	}
	if st := sh.status(); st.Settings != settings {
		s.log.Info("shard runs its stored fencing, not the requested", "shard", name, "term", term,
			"fencing", o.Fencing.String(), "requested", seal.FencingOf(settings.WriterOptions()).String())
	}
	s.log.Info("shard open", append(sh.logAttrs(), "restore_term", o.Restore.Term, "restore_gen", o.Restore.Gen,
		"start_gen", o.StartGen, "duration_ms", time.Since(start).Milliseconds())...)
	return sh.status(), nil
}

// openIn takes sh's slot if admit accepts the shard there, runs step (the
// opener's Open or Adopt) and installs what it opened. A failed step gives
// the slot back; a sidecar that began draining meanwhile closes the new
// writer and gives the slot back too. Errors of admit and step are
// returned as they are.
func (s *Server) openIn(ctx context.Context, op string, sh *shard, admit func(prev *shard) error, step func() (*opened, error)) (*opened, error) {
	rv, err := s.reg.reserve(sh, admit)
	if errors.Is(err, ErrShuttingDown) {
		return nil, opErr(op, sh.name, err, "open the shard on another sidecar")
	}
	if err != nil {
		return nil, err
	}
	o, err := step()
	if err != nil {
		rv.rollback()
		return nil, err
	}
	if o.Warm != nil {
		sh.installWarm(o, s.newWarm(sh, o.Warm.Manifest))
	} else {
		sh.install(o)
	}
	if err := rv.commit(); err != nil {
		if o.Warm != nil {
			sh.stopWarm()
			o.Warm.Cancel()
			if r := <-o.Warm.Replayed; r.Writer != nil {
				_ = r.Writer.Close(context.WithoutCancel(ctx))
			}
		} else {
			_ = o.Writer.Close(context.WithoutCancel(ctx))
		}
		return nil, opErr(op, sh.name, err, "open the shard on another sidecar")
	}
	if o.Warm != nil {
		s.runWarm(sh, o.Warm)
	}
	return o, nil
}

// settingsFor returns the settings a call opening the shard runs: req's,
// its zero fields taken from the sidecar's defaults.
func (s *Server) settingsFor(op, name string, req Settings) (Settings, error) {
	settings := mergeSettings(s.opts.Defaults, req)
	if err := settings.Validate(); err != nil {
		return Settings{}, opErr(op, name, err, "")
	}
	return settings, nil
}

// storeFor is the shard's container, for a call opening it with settings:
// a fenced shard needs a store that enforces preconditions.
func (s *Server) storeFor(op, name string, settings Settings) (*blobstore.Container, error) {
	if !settings.FencingDisabled && s.probeErr != nil {
		return nil, opErr(op, name, s.probeErr, "use a store that enforces conditional writes")
	}
	store, err := s.shardStore(name)
	if err != nil {
		return nil, opErr(op, name, fmt.Errorf("%w: %w", ErrInvalidArgument, err), "")
	}
	return store, nil
}

// countHydration counts the restored bytes an open streams, then passes
// each event on to events (nil: nowhere).
func (s *Server) countHydration(events func(openEvent) error) func(openEvent) error {
	return func(ev openEvent) error {
		switch {
		case ev.File != nil:
			s.metrics.hydration.Add(float64(len(ev.File.Data)))
		case ev.Ops != nil:
			for _, o := range ev.Ops.Ops {
				s.metrics.hydration.Add(float64(len(o)))
			}
		}
		if events == nil {
			return nil
		}
		return events(ev)
	}
}

// openHint says what a caller does next about a failed Open of term: a
// refused Open never means a successor took writes from this caller, only
// that this term cannot be (re)opened.
func openHint(err error, term int64) string {
	switch {
	case errors.Is(err, seal.ErrTermAlreadyOpen):
		return fmt.Sprintf("term %d already wrote and cannot be reopened: open the shard at a higher term", term)
	case errors.Is(err, fence.ErrFenced):
		if succ, ok := fence.SuccessorTerm(err); ok && succ >= MaxTerm {
			return fmt.Sprintf("term %d, the highest term there is, holds the shard: it can no longer fail over", succ)
		}
		if succ, ok := fence.SuccessorTerm(err); ok && succ > term {
			return fmt.Sprintf("term %d holds the shard: open it at a term above %d", succ, succ)
		}
		return fmt.Sprintf("term %d is claimed or sealed by another allocation: open the shard at a higher term", term)
	}
	return hintFor(err)
}
