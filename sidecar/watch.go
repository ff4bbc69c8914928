package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardfence/shardfence/translog"
)

// WatchKind is what a WatchEvent says.
type WatchKind int

// Watch events.
const (
	// WatchOpening: this sidecar started opening the shard; Progress,
	// File and Ops events of its restore follow, then WatchGained or
	// WatchOpenFailed.
	WatchOpening WatchKind = iota + 1
	WatchProgress
	WatchFile
	WatchOps
	// WatchGained: the shard takes appends here at (Term, Allocation).
	WatchGained
	WatchOpenFailed
	// WatchLost: the shard no longer takes appends here (Reason).
	WatchLost
	// WatchFenced: a higher term (SuccessorTerm) took the shard.
	WatchFenced
	// WatchSynced: the shards here when the watch started were all
	// listed; live events follow.
	WatchSynced
	// WatchCheckpointRequested: the shard's replay backlog passed the
	// checkpoint policy: publish a checkpoint covering CheckpointGen.
	WatchCheckpointRequested
)

// Reasons of a WatchLost event.
const (
	LostClosed     = "closed"
	LostHandedOff  = "handed_off"
	LostSuperseded = "superseded" // reopened here at a higher term
)

// WatchEvent is one event of Watch.
type WatchEvent struct {
	Kind       WatchKind
	Shard      string
	Term       int64
	Allocation string
	Progress   *Progress
	File       *FileChunk
	Ops        *translog.Batch
	// Status is the shard's status (WatchGained, WatchFenced).
	Status *ShardStatus
	// Current marks a WatchGained for a shard already open when the watch
	// started: no restore stream was sent.
	Current       bool
	Reason        string
	Err           string
	SuccessorTerm int64
	// CheckpointGen, BacklogBytes and BacklogGens: what a
	// WatchCheckpointRequested asks to cover, and the backlog then.
	CheckpointGen             int64
	BacklogBytes, BacklogGens int64
}

// ErrWatchBehind: a watcher did not take its events fast enough and was
// cut off; it watches again and reads what it missed.
var ErrWatchBehind = errors.New("watch fell behind")

// watchBuffer bounds the bytes of events one watcher may have pending:
// queued for it, or being sent to it.
const watchBuffer = 64 << 20

// watchPoll is how often the hub looks at the shards for changes no call
// announced (a writer fenced, a handoff, an adoption).
const watchPoll = 50 * time.Millisecond

// watchHub fans the sidecar's shard events out to watchers. A slow
// watcher never holds anything up: past watchBuffer bytes pending it is
// cut off with ErrWatchBehind. Opens announce their restore stream and
// outcome themselves (tee); everything else is found by looking at the
// shards while someone watches.
type watchHub struct {
	s *Server

	mu      sync.Mutex
	subs    map[*watchSub]struct{}
	seen    map[string]seenShard
	polling bool
}

// seenShard is a shard as the hub last reported it.
type seenShard struct {
	term   int64
	alloc  string
	state  string
	fenced bool
}

type watchSub struct {
	filter  map[string]bool
	pending int
	err     error
	wake    chan struct{}
	mu      sync.Mutex
	queue   []WatchEvent
}

func newWatchHub(s *Server) *watchHub {
	return &watchHub{s: s, subs: map[*watchSub]struct{}{}, seen: map[string]seenShard{}}
}

func eventBytes(ev WatchEvent) int {
	n := 128
	if ev.File != nil {
		n += len(ev.File.Data)
	}
	if ev.Ops != nil {
		for _, o := range ev.Ops.Ops {
			n += len(o) + 8
		}
	}
	return n
}

// publishLocked queues ev for every watcher of its shard. The caller
// holds h.mu.
func (h *watchHub) publishLocked(ev WatchEvent) {
	for sub := range h.subs {
		if len(sub.filter) > 0 && !sub.filter[ev.Shard] {
			continue
		}
		sub.mu.Lock()
		if sub.err == nil {
			sub.pending += eventBytes(ev)
			if sub.pending > watchBuffer {
				sub.err = fmt.Errorf("%w: more than %d bytes of events pending; watch again and Read the shards from where you are", ErrWatchBehind, watchBuffer)
				sub.queue = nil
			} else {
				sub.queue = append(sub.queue, ev)
			}
		}
		sub.mu.Unlock()
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
}

func (h *watchHub) publish(ev WatchEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) > 0 {
		h.publishLocked(ev)
	}
}

// tee wraps an Open's event callback so watchers see the restore stream
// too. It never fails the open: watchers are served from their queues.
func (h *watchHub) tee(shard string, term int64, alloc string, events func(openEvent) error) func(openEvent) error {
	h.publish(WatchEvent{Kind: WatchOpening, Shard: shard, Term: term, Allocation: alloc})
	return func(ev openEvent) error {
		out := WatchEvent{Shard: shard, Term: term, Allocation: alloc}
		switch {
		case ev.Progress != nil:
			out.Kind, out.Progress = WatchProgress, ev.Progress
		case ev.File != nil:
			out.Kind, out.File = WatchFile, ev.File
		case ev.Ops != nil:
			b := *ev.Ops
			out.Kind, out.Ops = WatchOps, &b
		}
		if out.Kind != 0 {
			h.publish(out)
		}
		if events == nil {
			return nil
		}
		return events(ev)
	}
}

// opened announces the outcome of an open or adoption here.
func (h *watchHub) opened(shard string, term int64, alloc string, st ShardStatus, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if len(h.subs) > 0 {
			h.publishLocked(WatchEvent{Kind: WatchOpenFailed, Shard: shard, Term: term, Allocation: alloc, Err: err.Error(), Reason: Reason(err)})
		}
		return
	}
	h.changedLocked(st, false)
}

// changedLocked compares a shard's status with what the hub last
// reported and publishes the difference.
func (h *watchHub) changedLocked(st ShardStatus, current bool) {
	now := seenShard{term: st.Term, alloc: st.Allocation, state: fmt.Sprint(st.State), fenced: st.Fenced}
	was, ok := h.seen[st.Shard]
	if ok && was == now {
		return
	}
	h.seen[st.Shard] = now
	if ok && (was.term != now.term || was.alloc != now.alloc) && was.state != "closed" {
		h.publishLocked(WatchEvent{Kind: WatchLost, Shard: st.Shard, Term: was.term, Allocation: was.alloc, Reason: LostSuperseded})
		ok = false
	}
	stc := st
	switch {
	case now.fenced && (!ok || !was.fenced):
		h.publishLocked(WatchEvent{Kind: WatchFenced, Shard: st.Shard, Term: st.Term, Allocation: st.Allocation, SuccessorTerm: st.SuccessorTerm, Status: &stc, Err: st.Err})
	case now.state == LostHandedOff && (!ok || was.state != LostHandedOff):
		h.publishLocked(WatchEvent{Kind: WatchLost, Shard: st.Shard, Term: st.Term, Allocation: st.Allocation, Reason: LostHandedOff, Status: &stc})
	case now.state == "open" && (!ok || was.state != "open"):
		h.publishLocked(WatchEvent{Kind: WatchGained, Shard: st.Shard, Term: st.Term, Allocation: st.Allocation, Status: &stc, Current: current})
	}
}

// look compares every shard with what was reported, including shards that
// went away.
func (h *watchHub) look() {
	shards := h.s.Shards()
	h.mu.Lock()
	defer h.mu.Unlock()
	present := map[string]bool{}
	for _, st := range shards {
		present[st.Shard] = true
		h.changedLocked(st, false)
	}
	for name, was := range h.seen {
		if !present[name] {
			delete(h.seen, name)
			if was.state != "closed" {
				h.publishLocked(WatchEvent{Kind: WatchLost, Shard: name, Term: was.term, Allocation: was.alloc, Reason: LostClosed})
			}
		}
	}
}

// poll looks at the shards until nobody watches.
func (h *watchHub) poll() {
	t := time.NewTicker(watchPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-h.s.stopped:
		}
		h.mu.Lock()
		if len(h.subs) == 0 {
			h.polling = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		h.look()
	}
}

// Watch calls fn with the events of the shards named (all when none),
// starting with a WatchGained (Current) or WatchFenced for each shard
// there now and a WatchSynced, until ctx ends, fn fails, or the watcher falls behind
// (ErrWatchBehind).
func (s *Server) Watch(ctx context.Context, shards []string, fn func(WatchEvent) error) error {
	for _, name := range shards {
		if err := ValidateShardID(name); err != nil {
			return opErr("Watch", name, err, "")
		}
	}
	h := s.watch
	sub := &watchSub{filter: map[string]bool{}, wake: make(chan struct{}, 1)}
	for _, name := range shards {
		sub.filter[name] = true
	}
	current := s.Shards()
	h.mu.Lock()
	if len(h.subs) == 0 {
		// Nobody watched: start from what is here now.
		h.seen = map[string]seenShard{}
		for _, st := range current {
			h.seen[st.Shard] = seenShard{term: st.Term, alloc: st.Allocation, state: fmt.Sprint(st.State), fenced: st.Fenced}
		}
	}
	for _, st := range current {
		if len(sub.filter) > 0 && !sub.filter[st.Shard] {
			continue
		}
		stc := st
		switch {
		case st.Fenced:
			sub.queue = append(sub.queue, WatchEvent{Kind: WatchFenced, Shard: st.Shard, Term: st.Term, Allocation: st.Allocation, SuccessorTerm: st.SuccessorTerm, Status: &stc, Err: st.Err})
		case fmt.Sprint(st.State) == "open":
			sub.queue = append(sub.queue, WatchEvent{Kind: WatchGained, Shard: st.Shard, Term: st.Term, Allocation: st.Allocation, Status: &stc, Current: true})
		}
	}
	sub.queue = append(sub.queue, WatchEvent{Kind: WatchSynced})
	h.subs[sub] = struct{}{}
	if !h.polling {
		h.polling = true
		go h.poll()
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.subs, sub)
		h.mu.Unlock()
	}()
	for {
		// One event at a time: an event counts against the watcher's
		// buffer until fn (the stream's send, which waits for a stalled
		// consumer) returned, and the rest stay in the queue, where a
		// cut-off drops them. Taking the whole queue at once let a stalled
		// watcher hold what it took plus a whole buffer more, and get all
		// of it on resuming instead of being cut off.
		sub.mu.Lock()
		ev, have := WatchEvent{}, len(sub.queue) > 0
		if have {
			ev = sub.queue[0]
			sub.queue[0] = WatchEvent{}
			sub.queue = sub.queue[1:]
		}
		err := sub.err
		sub.mu.Unlock()
		if have {
			ferr := fn(ev)
			sub.mu.Lock()
			sub.pending -= eventBytes(ev)
			sub.mu.Unlock()
			if ferr != nil {
				return ferr
			}
			continue
		}
		if err != nil {
			return opErr("Watch", "", err, "call Watch again, then Read each shard from the sequence number you hold")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopped:
			return opErr("Watch", "", ErrShuttingDown, "watch the shard's next sidecar")
		case <-sub.wake:
		}
	}
}
