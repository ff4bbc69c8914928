package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardfence/shardfence/internal/settle"
)

// Chain is a claimed term's fence key and the token this instance holds for
// it. Writes go only through CompareAndSwap against that token, each with a
// strictly higher seq. Methods are safe for concurrent use but serialize:
// the chain is a single sequence of writes.
type Chain struct {
	in           *Instance
	term         int64
	key          string
	created      bool
	sweptAt      int64
	predecessors []int64

	mu    sync.Mutex
	state State
	// smu guards reads of state from outside a write: writes hold mu for
	// the whole store round trip, and State (a status page, a health
	// check, a reconcile loop) must not wait behind a stalled store.
	// Only adoptLocked writes state, holding both.
	smu sync.Mutex
	// maybe holds our writes on top of state whose outcome is unknown
	// (lost responses, cancelled contexts). Any of them may still land, so
	// finding one in the key later is ours, not a rival's.
	maybe     []Record
	handedOff bool
}

// Term returns the chain's term.
func (c *Chain) Term() int64 { return c.term }

// Key returns the chain's fence key.
func (c *Chain) Key() string { return c.key }

// Shard returns the shard id.
func (c *Chain) Shard() string { return c.in.shard }

// Allocation returns the claiming allocation.
func (c *Chain) Allocation() string { return c.in.allocation }

// Instance returns the instance the chain belongs to.
func (c *Chain) Instance() *Instance { return c.in }

// Created reports whether this claim created the key (false when a restart
// of the same allocation adopted it).
func (c *Chain) Created() bool { return c.created }

// SweptAt is the steady-clock time at which every lower-term key was seen
// gone. A lease-mode successor waits lease+margin from here before it
// resolves the lineage.
func (c *Chain) SweptAt() int64 { return c.sweptAt }

// LeaseLeft is how much of a wait of d counted from the sweep is left now
// on the instance's steady clock (zero or negative: none).
func (c *Chain) LeaseLeft(d time.Duration) time.Duration {
	return time.Duration(c.sweptAt + int64(d) - c.in.clock.Now())
}

// WaitOutLease waits until d has passed on the instance's steady clock
// since the sweep (protocol section 4 step 5): d is the lease a deposed
// lease-mode writer may still hold, plus a margin, so every ack it makes
// without a CAS happens before the wait ends and the lineage is read. It
// is the protocol's one lease wait; whether and how long to wait is the
// caller's (recovery.Open, recovery.RewriteFencing).
func (c *Chain) WaitOutLease(ctx context.Context, d time.Duration) error {
	return Sleep(ctx, c.in.clock, c.LeaseLeft(d))
}

// Predecessors lists the lower terms whose keys this claim deleted.
func (c *Chain) Predecessors() []int64 { return append([]int64(nil), c.predecessors...) }

// State returns the record and token the chain holds now.
// It does not wait for a write in progress.
func (c *Chain) State() State {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.state
}

// Err returns the fencing error once the chain's instance is fenced.
func (c *Chain) Err() error { return c.in.Fenced() }

// Advance commits generation gen: CAS the key to {seq+1, gen}. It returns
// the new state, a *FencedError when the chain is lost, or a retryable
// *Error when the store gave no definite answer within the backoff (the
// write may still have landed; the next call settles it first).
func (c *Chain) Advance(ctx context.Context, gen int64) (State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.in.Fenced(); err != nil {
		return State{}, err
	}
	if c.handedOff {
		return State{}, c.opErr("Advance", ErrHandedOff)
	}
	if gen < c.state.Record.Gen {
		return State{}, c.opErr("Advance", fmt.Errorf("%w: generation %d is below the committed generation %d", ErrInvalidArgument, gen, c.state.Record.Gen))
	}
	next := func(base Record) Record {
		r := base
		r.Allocation, r.Node, r.Gen = c.in.allocation, c.in.node, gen
		return r
	}
	return c.writeLocked(ctx, "Advance", next, SettleWrite)
}

// TransferTo hands the term to a relocation target (section 6 step 2): the
// key's owner becomes allocation. The returned token is what the target
// must be given (Instance.Accept) and what Revert expects. After it, Advance
// fails with ErrHandedOff. The record keeps the generation of the chain's
// last CAS; TransferAt records where the log ends instead.
func (c *Chain) TransferTo(ctx context.Context, allocation, node string) (State, error) {
	return c.TransferAt(ctx, allocation, node, -1)
}

// TransferAt is TransferTo recording gen, the last generation the source
// acknowledged, in the transferred record (-1: keep the record's), so the
// target can check the handoff context it is given against the key
// (relocation.Adopt). gen below the generation the key already commits is
// ErrInvalidArgument.
func (c *Chain) TransferAt(ctx context.Context, allocation, node string, gen int64) (State, error) {
	if err := ValidateID("allocation", allocation, false); err != nil {
		return State{}, c.opErr("TransferTo", err)
	}
	if err := ValidateID("node", node, true); err != nil {
		return State{}, c.opErr("TransferTo", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.in.Fenced(); err != nil {
		return State{}, err
	}
	if c.handedOff {
		return State{}, c.opErr("TransferTo", ErrHandedOff)
	}
	if gen >= 0 && gen < c.state.Record.Gen {
		return State{}, c.opErr("TransferTo", fmt.Errorf("%w: generation %d is below generation %d the fence key commits", ErrInvalidArgument, gen, c.state.Record.Gen))
	}
	next := func(base Record) Record {
		r := base
		r.Allocation, r.Node = allocation, node
		if gen >= 0 {
			r.Gen = gen
		}
		return r
	}
	decide := func(obs Observation, prev State, attempts ...Record) Verdict {
		// A lost transfer response and a target that already continued
		// the chain: the transfer landed.
		if obs.Found && obs.Record.Allocation == allocation && obs.Record.Seq > prev.Record.Seq+1 {
			return Verdict{Action: Adopt, State: State{Record: obs.Record, Token: obs.Token}}
		}
		return SettleWrite(obs, prev, attempts...)
	}
	st, err := c.writeLocked(ctx, "TransferTo", next, decide)
	if err == nil {
		c.handedOff = true
	}
	return st, err
}

// Revert takes the term back after an aborted handoff (section 6 step 4):
// CAS, expecting the transfer's token, to this allocation. It reports true
// when the source may resume. When the target already wrote, the source
// stands down: false with a nil error, and the instance is fenced from then
// on.
func (c *Chain) Revert(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.handedOff {
		return false, c.opErr("Revert", fmt.Errorf("%w: nothing to revert (the chain was not transferred)", ErrInvalidArgument))
	}
	target := c.state.Record.Allocation
	standDown := false
	next := func(base Record) Record {
		r := base
		r.Allocation, r.Node = c.in.allocation, c.in.node
		return r
	}
	decide := func(obs Observation, prev State, attempts ...Record) Verdict {
		v := SettleWrite(obs, prev, attempts...)
		if v.Action == Fenced && obs.Found && obs.Record.Allocation == target {
			standDown = true
			v.Reason = "relocation target " + quote(target) + " took over the term before the revert"
		}
		return v
	}
	_, err := c.writeLocked(ctx, "Revert", next, decide)
	switch {
	case err == nil:
		c.handedOff = false
		return true, nil
	case standDown:
		return false, nil
	}
	return false, err
}

// Check reads the chain's key and fences the instance unless the key still
// names this claim as the term's owner: same allocation, same claim nonce.
// A key a higher term's sweep deleted, or one handed to another allocation
// (or re-claimed by another attempt of this one), is a *FencedError. A store
// error is returned as is and decides nothing. Check never writes: it is
// how a create-only writer, whose syncs send no CAS, learns it lost the
// term (translog.CreateOnly). The token is not compared: the chain's own
// ownership CAS (GC, a checkpoint) changes it.
func (c *Chain) Check(ctx context.Context) error {
	if err := c.in.Fenced(); err != nil {
		return err
	}
	obs, err := c.in.read(ctx, c.key)
	if err != nil {
		return c.opErr("Check", err)
	}
	own := c.State().Record
	switch {
	case !obs.Found:
		return c.in.fence(c.term, c.key, c.in.successor(ctx, c.term), "fence key missing at the fence check (a higher term claimed the shard)")
	case obs.Record.Allocation != c.in.allocation || obs.Record.Nonce != own.Nonce:
		return c.in.fence(c.term, c.key, c.in.successor(ctx, c.term), fmt.Sprintf("fence key no longer names this claim at the fence check (owner %q, seq %d)", obs.Record.Allocation, obs.Record.Seq))
	}
	return nil
}

// Holds reads the chain's key and reports whether it still names this
// claim as the term's owner (same allocation, same claim nonce), without
// fencing anything: an observe-mode writer's read barrier asks it. A
// store error is returned as is.
func (c *Chain) Holds(ctx context.Context) (bool, error) {
	obs, err := c.in.read(ctx, c.key)
	if err != nil {
		return false, c.opErr("Holds", err)
	}
	own := c.State().Record
	return obs.Found && obs.Record.Allocation == c.in.allocation && obs.Record.Nonce == own.Nonce, nil
}

// Superseded reports the highest term above the chain's, 0 if none. Only a
// higher term counts: a missing own key is not supersession (it may be a
// store hiccup; the next CAS decides).
func (c *Chain) Superseded(ctx context.Context) (int64, error) {
	l, err := c.in.list(ctx)
	if err != nil {
		return 0, c.opErr("Superseded", err)
	}
	return l.Above(c.term), nil
}

type settleFunc func(obs Observation, prev State, attempts ...Record) Verdict

// writeLocked CASes the key from c.state to next(c.state.Record) with seq+1.
// c.mu must be held.
func (c *Chain) writeLocked(ctx context.Context, op string, next func(Record) Record, decide settleFunc) (State, error) {
	if err := c.in.Fenced(); err != nil {
		return State{}, err
	}
	var fenced error
	var mine []Record // what this call sent
	done := func() bool {
		for _, r := range mine {
			if c.state.Record == r || c.state.Record.Seq > r.Seq {
				return true
			}
		}
		return false
	}
	// settle reads the key and decides every unknown write; it reports
	// whether this call's write is now the state.
	settleNow := func(ctx context.Context) (bool, error) {
		obs, err := c.in.read(ctx, c.key)
		if err != nil {
			return false, err
		}
		v := decide(obs, c.state, c.maybe...)
		switch v.Action {
		case Adopt:
			c.adoptLocked(v.State)
			return done(), nil
		case Resend:
			// The key still holds c.state: none of the unknown writes
			// has landed yet. They all expect c.state's token, as does
			// the next write, so at most one can ever land, and a later
			// settle finds it in c.maybe.
			return false, nil
		default:
			fenced = c.fenceLocked(ctx, v.Reason)
			return false, fenced
		}
	}
	err := Retry(ctx, c.in.clock, c.in.backoff, func(ctx context.Context) error {
		// The instance may have been fenced while this call backed off
		// (a poison seen by the writer's md path, another chain's
		// verdict): a fenced instance sends no further write.
		if err := c.in.Fenced(); err != nil {
			fenced = err
			return err
		}
		if len(c.maybe) > 0 {
			// An earlier write's outcome is unknown: settle it before
			// building on a state that may be stale.
			ok, err := settleNow(ctx)
			if err != nil || ok {
				return err
			}
		}
		want := next(c.state.Record)
		want.Seq = c.state.Record.Seq + 1
		body, err := want.Encode()
		if err != nil {
			return err
		}
		mine = append(mine, want)
		tok, err := c.in.store.CompareAndSwap(ctx, c.key, c.state.Token, body)
		if err == nil {
			c.adoptLocked(State{Record: want, Token: tok})
			return nil
		}
		if out := settle.Classify(err); out == settle.Definite {
			// It did not take effect: a conflict or an unavailable store
			// is sent again, anything else ends the call.
			return err
		}
		// Refused or unknown: the key's content decides.
		c.maybe = appendRecord(c.maybe, want)
		ok, serr := settleNow(ctx)
		switch {
		case serr != nil:
			return serr
		case ok:
			return nil
		}
		return errResend
	})
	if fenced != nil {
		return State{}, fenced
	}
	if err != nil {
		return State{}, c.opErr(op, err)
	}
	return c.state, nil
}

func (c *Chain) adoptLocked(s State) {
	c.smu.Lock()
	c.state = s
	c.smu.Unlock()
	// Every unknown write expected an older token; none can land now.
	c.maybe = nil
}

// fenceLocked marks the instance fenced, learning the successor term with
// one best-effort LIST.
func (c *Chain) fenceLocked(ctx context.Context, reason string) error {
	c.maybe = nil
	return c.in.fence(c.term, c.key, c.in.successor(ctx, c.term), reason)
}

func (c *Chain) opErr(op string, err error) error {
	var fe *FencedError
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Op: op, Shard: c.in.shard, Key: c.key, Term: c.term, Err: err}
}

func appendRecord(s []Record, r Record) []Record {
	for _, x := range s {
		if x == r {
			return s
		}
	}
	return append(s, r)
}

// Fence records a fencing verdict reached outside the chain, such as a
// poison md found at the generation being written, and returns the
// *FencedError every later call of the instance gets.
func (c *Chain) Fence(successor int64, reason string) error {
	return c.in.fence(c.term, c.key, successor, reason)
}
