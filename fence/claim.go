package fence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
)

// Instance is one allocation of one shard: the identity that claims terms
// and writes fence keys. Once any of its chains is fenced the instance is
// fenced for good: it cannot claim again, because its local state may lack
// acknowledged writes of the successor. A new instance (after a restore)
// must be created for a later grant.
type Instance struct {
	store         *blobstore.Container
	shard         string
	allocation    string
	node          string
	clock         Clock
	backoff       Backoff
	sweepAttempts int
	nonces        func() (string, error)

	mu     sync.Mutex
	fenced error
	held   int64 // the highest term this instance claimed
}

// Option configures an Instance.
type Option func(*Instance)

// WithNode records where the owner runs, for operators reading a fence key.
func WithNode(node string) Option { return func(in *Instance) { in.node = node } }

// WithClock sets the steady clock used for backoff and sweep timestamps.
func WithClock(c Clock) Option { return func(in *Instance) { in.clock = c } }

// WithBackoff sets how requests without a definite answer are retried.
func WithBackoff(b Backoff) Option { return func(in *Instance) { in.backoff = b } }

// NonceSource hands out the nonces that make every claim attempt's body
// unique. A Clock that also implements it (FakeClock does) is used when no
// WithNonces option is given, so a test that fixes the clock fixes every
// byte the instance writes.
type NonceSource interface {
	// Nonce returns a value never returned before for this shard and
	// term: at most MaxNonceLen bytes, no '|', no control characters.
	Nonce() string
}

// WithNonces sets where claim attempts take their nonces from. The default
// is 16 random bytes per attempt from crypto/rand.
func WithNonces(src NonceSource) Option {
	return func(in *Instance) { in.nonces = func() (string, error) { return src.Nonce(), nil } }
}

func randomNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("drawing a claim nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// WithSweepAttempts bounds the delete-and-verify rounds of a claim.
func WithSweepAttempts(n int) Option { return func(in *Instance) { in.sweepAttempts = n } }

// NewInstance returns the fencing identity of allocation for shard on store
// (a container already scoped to the shard's prefix).
func NewInstance(store *blobstore.Container, shard, allocation string, opts ...Option) (*Instance, error) {
	in := &Instance{store: store, shard: shard, allocation: allocation, clock: SystemClock(), backoff: DefaultBackoff(), sweepAttempts: 5}
	for _, o := range opts {
		o(in)
	}
	if in.nonces == nil {
		in.nonces = randomNonce
		if src, ok := in.clock.(NonceSource); ok {
			in.nonces = func() (string, error) { return src.Nonce(), nil }
		}
	}
	for _, chk := range []error{ValidateID("shard", shard, false), ValidateID("allocation", allocation, false), ValidateID("node", in.node, true)} {
		if chk != nil {
			return nil, &Error{Op: "NewInstance", Shard: shard, Key: layout.FenceDir, Err: chk}
		}
	}
	if store == nil {
		return nil, &Error{Op: "NewInstance", Shard: shard, Key: layout.FenceDir, Err: fmt.Errorf("%w: nil store", ErrInvalidArgument)}
	}
	if in.sweepAttempts < 1 {
		in.sweepAttempts = 1
	}
	return in, nil
}

// Claim is NewInstance followed by Instance.Claim.
func Claim(ctx context.Context, store *blobstore.Container, shard string, term int64, allocation string, opts ...Option) (*Chain, error) {
	in, err := NewInstance(store, shard, allocation, opts...)
	if err != nil {
		return nil, err
	}
	return in.Claim(ctx, term)
}

// Shard returns the shard id.
func (in *Instance) Shard() string { return in.shard }

// Allocation returns the allocation id.
func (in *Instance) Allocation() string { return in.allocation }

// Clock returns the instance's steady clock.
func (in *Instance) Clock() Clock { return in.clock }

// Store returns the container the instance writes to.
func (in *Instance) Store() *blobstore.Container { return in.store }

// Fenced returns the fencing error once the instance is fenced, else nil.
func (in *Instance) Fenced() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fenced
}

// errResend makes Retry send a write again after settling showed that it did
// not land.
var errResend = blobstore.Unavailable(errors.New("write did not take effect; sending it again"))

// Hooks let a caller run its own reads beside a claim's requests instead of
// after them (docs/PROTOCOL.md, section 4, "As built: the claim's rounds").
type Hooks struct {
	// Before runs beside step 1's LIST. The claim writes nothing until it
	// returns, and an error from it ends the claim before anything is
	// written (it is returned as is).
	Before func(ctx context.Context) error
	// Swept runs beside each LIST that verifies the sweep (steps 3 and 4),
	// after every delete of a lower key was acknowledged; swept lists the
	// lower terms this claim deleted so far. Its work counts only when
	// that LIST shows the sweep complete and the claim holding its key:
	// when the LIST shows a survivor it runs again beside the next one, so
	// it must be safe to run more than once (reads, or writes settled on
	// content). An error from it ends the claim (returned as is); the key
	// stays, as for any failure after step 2, for a retry of the claim.
	Swept func(ctx context.Context, swept []int64) error
}

// beside runs fn and hook (when set) concurrently and returns both errors.
func beside(ctx context.Context, fn func(context.Context) error, hook func(context.Context) error) (err, hookErr error) {
	if hook == nil {
		return fn(ctx), nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hookErr = hook(ctx)
	}()
	err = fn(ctx)
	<-done
	return err, hookErr
}

// Claim takes term for this instance (protocol section 4, steps 1-4): LIST
// for a higher term, create our key if absent and, beside that create,
// delete every lower-term key the LIST showed, then one LIST that verifies
// the sweep, that no higher term appeared and
// that our key still holds the token we created. It returns the chain to
// write with, or a *FencedError (a higher term exists, or another
// allocation holds this term), or an *Error that is retryable (store
// trouble, a lower key that would not go away). Steps 5-7 (the lease
// wait, Chain.WaitOutLease; seal; restore) belong to the caller.
func (in *Instance) Claim(ctx context.Context, term int64) (*Chain, error) {
	return in.ClaimWith(ctx, term, Hooks{})
}

// ClaimWith is Claim with the caller's work run beside the claim's LISTs
// (Hooks). recovery.Open reads the shard's settings beside step 1 and
// starts the seal's reads beside the verifying LIST, which keeps a
// takeover within a few round trips.
func (in *Instance) ClaimWith(ctx context.Context, term int64, h Hooks) (*Chain, error) {
	c := &claim{in: in, term: term, key: layout.FenceKey(max(term, 1)), hooks: h}
	in.mu.Lock()
	fenced, held := in.fenced, in.held
	in.mu.Unlock()
	if err, asIs := checkClaim(term, held, fenced); err != nil {
		if asIs {
			return nil, err
		}
		return nil, c.fail(err)
	}
	// Step 1: a higher term means our grant is stale.
	err, hookErr := c.list(ctx, h.Before)
	if err != nil {
		return nil, c.fail(err)
	}
	if hookErr != nil {
		return nil, hookErr
	}
	if higher, reason := staleGrant(c.l, term); higher > 0 {
		return nil, in.fence(term, c.key, higher, reason)
	}
	if err := c.create(ctx); err != nil {
		return nil, err
	}
	if err := c.sweep(ctx); err != nil {
		return nil, err
	}
	return c.chain()
}

// claim is the driver's state through one ClaimWith.
type claim struct {
	in    *Instance
	term  int64
	key   string
	hooks Hooks

	l       Listing // the latest LIST of fence/
	held    State   // our key, as created or adopted
	created bool    // this claim created the key: ours to withdraw
	swept   []int64 // the lower terms deleted so far
	sweptAt int64
}

func (c *claim) fail(err error) error {
	return &Error{Op: "Claim", Shard: c.in.shard, Key: c.key, Term: c.term, Err: err}
}

// list LISTs fence/ into c.l beside hook (when set).
func (c *claim) list(ctx context.Context, hook func(context.Context) error) (err, hookErr error) {
	return beside(ctx, func(ctx context.Context) error {
		var err error
		c.l, err = c.in.list(ctx)
		return err
	}, hook)
}

// create is step 2: create our key, settling AlreadyExists and lost
// responses on content. Every attempt has its own nonce: a lost create may
// land after a successor deleted the key, and on a store whose token
// hashes the body it would otherwise bring back the very token this claim
// holds, and a stale CAS of ours would succeed on it. Step 3's deletes go
// beside the create (docs/PROTOCOL.md, section 4, "the claim's rounds"):
// deleting a lower term's key is what any claimant above it does, whatever
// becomes of our create, and nothing is read until both answered.
func (c *claim) create(ctx context.Context) error {
	in := c.in
	var verdictErr error
	var attempts []Record
	step := settle.Step[Record]{
		Key: c.key, Get: in.get,
		Decode: func(body []byte) (Record, error) { return DecodeRecord(in.shard, c.key, body) },
		Ours: func(r Record) (bool, string) {
			v := SettleCreate(Observation{Found: true, Record: r}, attempts...)
			return v.Action == Adopt, v.Reason
		},
	}
	lower := c.l.Below(c.term)
	c.swept = addSwept(c.swept, lower)
	delCtx, stopDeletes := context.WithCancel(ctx)
	defer stopDeletes()
	deleted := make(chan error, 1)
	go func() { deleted <- in.deleteAll(delCtx, lower) }()
	err := Retry(ctx, in.clock, in.backoff, func(ctx context.Context) error {
		nonce, err := in.nonces()
		if err != nil {
			return err
		}
		attempted := Record{Shard: in.shard, Term: c.term, Allocation: in.allocation, Node: in.node, Nonce: nonce}
		if step.Body, err = attempted.Encode(); err != nil {
			return err
		}
		attempts = append(attempts, attempted)
		v, err := settle.Create(ctx, in.store, step)
		if held, created, ok := createHeld(v, attempted, attempts); ok {
			c.held, c.created = held, created
		}
		switch v.Action {
		case settle.Resend:
			return errResend
		case settle.Lost:
			verdictErr = in.fence(c.term, c.key, 0, v.Reason)
			return verdictErr
		}
		return err
	})
	if err != nil && verdictErr == nil {
		// The create failed on store trouble: the deletes are of no use
		// now (the claim is retried whole).
		stopDeletes()
	}
	delErr := <-deleted
	switch {
	case verdictErr != nil:
		return verdictErr
	case err != nil:
		return c.fail(err)
	case delErr != nil:
		return c.fail(delErr)
	}
	return nil
}

// sweep is steps 3 and 4: every lower-term key listed in step 1 was
// deleted beside the create; one LIST verifies the sweep, that no higher
// term appeared and that our key is still the version we hold (its listed
// token; a store that lists no token costs a GET). A survivor (a key
// created after step 1's LIST, or a delete acknowledged but not applied)
// is deleted in the next round. Deletion is what fences the incumbent: its
// next CAS finds no key. The caller's Swept hook runs beside the LIST:
// every delete was acknowledged before it starts, and its work is kept
// only if the LIST shows no survivor.
func (c *claim) sweep(ctx context.Context) error {
	in := c.in
	for round := 1; ; round++ {
		if round > 1 {
			lower := c.l.Below(c.term)
			if err := in.deleteAll(ctx, lower); err != nil {
				return c.fail(err)
			}
			c.swept = addSwept(c.swept, lower)
		}
		var hook func(context.Context) error
		if c.hooks.Swept != nil {
			sw := append([]int64(nil), c.swept...)
			hook = func(ctx context.Context) error { return c.hooks.Swept(ctx, sw) }
		}
		err, hookErr := c.list(ctx, hook)
		if err != nil {
			return c.fail(err)
		}
		v := judgeSweep(c.l, c.term, c.held.Token, round, in.sweepAttempts)
		switch v.Next {
		case sweepWithdraw:
			return c.withdraw(ctx, v.Reason, v.Higher)
		case sweepOwnMissing:
			// Only a higher term deletes our key; a fresh LIST shows it
			// once its create (sent beside its deletes) landed.
			return in.fence(c.term, c.key, in.successor(ctx, c.term), v.Reason)
		case sweepDone, sweepReadOwn:
			c.sweptAt = in.clock.Now()
			if v.Next == sweepReadOwn {
				if err := c.checkOwn(ctx); err != nil {
					return err
				}
			}
			return hookErr
		case sweepGiveUp:
			return c.fail(fmt.Errorf("%w: keys of terms %v remain after %d delete rounds (the store acknowledged deletes it did not apply): %w", ErrSweepIncomplete, v.Survivors, round, blobstore.ErrUnavailable))
		}
		if err := Sleep(ctx, in.clock, in.backoff.Delay(round)); err != nil {
			return c.fail(err)
		}
	}
}

// checkOwn reads our key when the verifying LIST did not show it at the
// token we hold: it must be exactly what we hold.
func (c *claim) checkOwn(ctx context.Context) error {
	obs, err := c.in.read(ctx, c.key)
	if err != nil {
		return c.fail(err)
	}
	if v := CheckOwn(obs, c.held); v.Action == Fenced {
		return c.in.fence(c.term, c.key, c.in.successor(ctx, c.term), v.Reason)
	}
	return nil
}

// withdraw stands down for a higher term. Only a key we created is
// deleted: the successor's path is never ours to touch, and a restart's
// key is ours to give up too.
func (c *claim) withdraw(ctx context.Context, reason string, succ int64) error {
	if c.created {
		_ = Retry(ctx, c.in.clock, c.in.backoff, func(ctx context.Context) error { return c.in.store.Delete(ctx, c.key) })
	}
	return c.in.fence(c.term, c.key, succ, reason)
}

// chain records the claimed term and returns its chain, unless the
// instance was fenced meanwhile.
func (c *claim) chain() (*Chain, error) {
	in := c.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.fenced != nil {
		return nil, in.fenced
	}
	in.held = max(in.held, c.term)
	return &Chain{in: in, term: c.term, key: c.key, created: c.created, sweptAt: c.sweptAt, predecessors: c.swept, state: c.held}, nil
}

// Accept continues a chain handed over by a relocation source (section 6
// step 3): the key of term must name this allocation as owner at token.
func (in *Instance) Accept(ctx context.Context, term int64, token blobstore.Token) (*Chain, error) {
	key := layout.FenceKey(max(term, 1))
	if term < 1 {
		return nil, &Error{Op: "Accept", Shard: in.shard, Key: key, Term: term, Err: fmt.Errorf("%w: term %d", ErrInvalidArgument, term)}
	}
	if err := in.Fenced(); err != nil {
		return nil, err
	}
	obs, err := in.read(ctx, key)
	if err != nil {
		return nil, &Error{Op: "Accept", Shard: in.shard, Key: key, Term: term, Err: err}
	}
	switch {
	case !obs.Found:
		return nil, in.fence(term, key, 0, "fence key missing at handoff (a higher term claimed the shard)")
	case obs.Record.Allocation != in.allocation || obs.Token != token:
		return nil, in.fence(term, key, 0, fmt.Sprintf("fence key not handed to this allocation (owner %q, seq %d, token matches: %v)", obs.Record.Allocation, obs.Record.Seq, obs.Token == token))
	}
	in.mu.Lock()
	in.held = max(in.held, term)
	in.mu.Unlock()
	return &Chain{in: in, term: term, key: key, sweptAt: in.clock.Now(), state: State{Record: obs.Record, Token: obs.Token}}, nil
}

// fence marks the instance fenced and returns the error every later call
// gets.
func (in *Instance) fence(term int64, key string, successor int64, reason string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.fenced == nil {
		in.fenced = &FencedError{Shard: in.shard, Key: key, Term: term, Allocation: in.allocation, Successor: successor, Reason: reason}
	}
	return in.fenced
}

// successor is the highest term above term, from one LIST; 0 when the
// LIST fails or shows none. It only enriches a fencing error.
func (in *Instance) successor(ctx context.Context, term int64) int64 {
	items, err := blobstore.ListAll(ctx, in.store, layout.FencePrefix)
	if err != nil {
		return 0
	}
	return ParseListing(items).Above(term)
}

func (in *Instance) list(ctx context.Context) (Listing, error) {
	var items []blobstore.Attrs
	err := Retry(ctx, in.clock, in.backoff, func(ctx context.Context) error {
		var err error
		items, err = blobstore.ListAll(ctx, in.store, layout.FencePrefix)
		return err
	})
	return ParseListing(items), err
}

// get reads key, retrying store trouble; found is false for a missing key.
func (in *Instance) get(ctx context.Context, key string) (obj blobstore.Object, found bool, err error) {
	err = Retry(ctx, in.clock, in.backoff, func(ctx context.Context) error {
		obj, found, err = settle.Once(ctx, in.store, key)
		return err
	})
	return obj, found, err
}

// read returns what the key holds; a missing key is an observation, not an
// error. A body that does not decode is a *BodyError and is not retried.
func (in *Instance) read(ctx context.Context, key string) (Observation, error) {
	obj, found, err := in.get(ctx, key)
	if err != nil || !found {
		return Observation{}, err
	}
	rec, err := DecodeRecord(in.shard, key, obj.Body)
	if err != nil {
		return Observation{}, err
	}
	return Observation{Found: true, Record: rec, Token: obj.Token}, nil
}

// deleteAll deletes the fence keys of terms side by side, each retried
// until the store answers; the first error is returned once every delete
// ended.
func (in *Instance) deleteAll(ctx context.Context, terms []int64) error {
	errs := make([]error, len(terms))
	var wg sync.WaitGroup
	for i, t := range terms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := layout.FenceKey(t)
			errs[i] = Retry(ctx, in.clock, in.backoff, func(ctx context.Context) error { return in.store.Delete(ctx, lk) })
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
