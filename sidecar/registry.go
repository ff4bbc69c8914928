package sidecar

import (
	"context"
	"sync"
)

// registry holds the shards of one sidecar by name: every shard that is
// opening, open, handed off or closing here. Open and AdoptHandoff take a
// shard's slot in three steps: reserve puts the new shard there in state
// opening (so every other call on the name waits or is refused), and
// commit or rollback ends the reservation. A shard the sidecar gains or
// loses changes here and only here, which is where a stream of those
// changes to a primary or a master would be fed from.
type registry struct {
	mu       sync.Mutex
	shards   map[string]*shard
	draining bool

	// closing counts the goroutines closing writers a commit replaced
	// (a previous term's, fenced by the new claim, still answering its
	// pending appends); drain waits for them. Its Add happens under mu
	// while not draining, so no Add races drain's Wait.
	closing sync.WaitGroup
	// bg is the context of those closes, cancelled when a drain runs out
	// of time (the closes then abandon their syncs in progress).
	bg       context.Context
	cancelBg context.CancelFunc
}

func newRegistry() *registry {
	bg, cancel := context.WithCancel(context.Background())
	return &registry{shards: map[string]*shard{}, bg: bg, cancelBg: cancel}
}

// reservation is a slot taken by reserve: the new shard in state opening,
// and the shard it replaces (nil if none).
type reservation struct {
	r    *registry
	sh   *shard
	prev *shard
}

// reserve puts sh (state opening) in its name's slot if admit accepts the
// shard there now (nil when none); admit runs under the registry's lock.
// A draining sidecar takes no reservation (ErrShuttingDown).
func (r *registry) reserve(sh *shard, admit func(prev *shard) error) (*reservation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return nil, ErrShuttingDown
	}
	prev := r.shards[sh.name]
	if err := admit(prev); err != nil {
		return nil, err
	}
	r.shards[sh.name] = sh
	return &reservation{r: r, sh: sh, prev: prev}, nil
}

// commit ends the reservation with the shard open (the caller installed
// its writer). The writer of the shard it replaced is closed in the
// background, so its pending appends are answered; drain waits for that.
// A sidecar that started draining meanwhile refuses: the slot goes back
// to the previous shard and the caller closes its writer.
func (rv *reservation) commit() error {
	r := rv.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		rv.rollbackLocked()
		return ErrShuttingDown
	}
	if rv.prev != nil {
		r.closing.Add(1)
		go r.closeReplaced(rv.prev)
	}
	return nil
}

// closeReplaced stops a replaced shard's warm serving, if any (its replay
// then leaves no writer behind), and closes its writer.
func (r *registry) closeReplaced(sh *shard) {
	defer r.closing.Done()
	sh.stopWarm()
	if w := sh.writer(); w != nil {
		_ = w.Close(r.bg)
	}
}

// rollback gives the slot back to the shard the reservation replaced.
func (rv *reservation) rollback() {
	rv.r.mu.Lock()
	defer rv.r.mu.Unlock()
	rv.rollbackLocked()
}

func (rv *reservation) rollbackLocked() {
	r := rv.r
	if r.shards[rv.sh.name] != rv.sh {
		return
	}
	if rv.prev != nil {
		r.shards[rv.sh.name] = rv.prev
	} else {
		delete(r.shards, rv.sh.name)
	}
}

// lookup returns the shard in name's slot, nil if none.
func (r *registry) lookup(name string) *shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shards[name]
}

// release empties sh's slot, if sh still holds it.
func (r *registry) release(sh *shard) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shards[sh.name] == sh {
		delete(r.shards, sh.name)
	}
}

// all returns every shard in the registry.
func (r *registry) all() []*shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*shard, 0, len(r.shards))
	for _, sh := range r.shards {
		out = append(out, sh)
	}
	return out
}

// isDraining reports whether drain began.
func (r *registry) isDraining() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.draining
}

// startDrain refuses every later reservation and returns the shards held
// now: no shard enters the registry after it.
func (r *registry) startDrain() []*shard {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	return r.all()
}

// waitReplaced waits for the closes of replaced writers; if ctx ends
// first they abandon their syncs in progress, and it waits for that.
func (r *registry) waitReplaced(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		r.closing.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.cancelBg()
		<-done
	}
	r.cancelBg()
}
