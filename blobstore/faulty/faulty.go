// Package faulty is a blobstore middleware (blobstore.Container.With) for
// deterministic, seeded fault injection: latency, definite failures, lost
// requests and lost responses, requests that land late, S3-style 409
// conflicts, silently dropped deletes, and a store that ignores
// preconditions. The fencing protocol must stay safe under every one of
// them; tests and benches use this middleware to prove it.
//
// Rules are added and removed at runtime, so a test can say "lose the
// response of the next CAS on keys under fence/" at the exact step it wants.
// The middleware counts what it injected, and Before/After hooks let a
// checker observe or hold every request. A call the container refused before
// any request (an invalid key, a done context) is counted and seen by the
// hooks, but never faulted: no store would have answered it.
package faulty

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// OpSet is a set of operations; the zero set matches every operation.
type OpSet uint16

// Ops returns the set of ops.
func Ops(ops ...blobstore.Op) OpSet {
	var s OpSet
	for _, o := range ops {
		s |= 1 << o
	}
	return s
}

// Common sets.
const (
	AllOps      OpSet = 1<<blobstore.NumOps - 1
	Reads       OpSet = 1<<blobstore.OpGet | 1<<blobstore.OpStat | 1<<blobstore.OpList | 1<<blobstore.OpGetRange
	Writes      OpSet = 1<<blobstore.OpPut | 1<<blobstore.OpCreateIfAbsent | 1<<blobstore.OpCompareAndSwap | 1<<blobstore.OpDelete | 1<<blobstore.OpDeleteIfMatch
	Conditional OpSet = 1<<blobstore.OpCreateIfAbsent | 1<<blobstore.OpCompareAndSwap | 1<<blobstore.OpDeleteIfMatch
	Deletes     OpSet = 1<<blobstore.OpDelete | 1<<blobstore.OpDeleteIfMatch
)

// Has reports whether op is in s (the zero set holds every op).
func (s OpSet) Has(op blobstore.Op) bool { return s == 0 || s&(1<<op) != 0 }

// Fault is what a firing rule does to a request.
type Fault uint8

// The faults. Each says whether the request reaches the inner store.
const (
	// None injects no failure; a rule with only Latency uses it.
	None Fault = iota
	// Unavailable fails the request before it reaches the store
	// (blobstore.ErrUnavailable): definitely not applied.
	Unavailable
	// Conflict answers like S3's 409 ConditionalRequestConflict
	// (blobstore.ErrConflict): not applied, retryable.
	Conflict
	// LostRequest drops the request before the store sees it but reports
	// an ambiguous outcome (blobstore.ErrAmbiguous), like a timeout.
	LostRequest
	// LostResponse applies the request to the store and then reports an
	// ambiguous outcome: the write landed, the caller cannot know.
	LostResponse
	// DropDelete reports success for a Delete or DeleteIfMatch without
	// deleting, like a multi-object delete that silently skips keys. Only
	// a re-LIST tells.
	DropDelete
	// LandLater answers at once with an ambiguous outcome and holds the
	// request; the store applies it only when Land is called, as a request
	// that timed out on the client and reached the store late does. Calls
	// the test lands after later calls model reordering in the network.
	LandLater
	// PreconditionIgnored counts conditional calls served unconditionally
	// while SetIgnorePreconditions is on; it is not a rule's fault.
	PreconditionIgnored
	numFaults
)

var faultNames = [numFaults]string{"none", "unavailable", "conflict", "lost request", "lost response", "dropped delete", "landing later", "precondition ignored"}

func (f Fault) String() string {
	if f < numFaults {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", uint8(f))
}

// ErrInjected is wrapped by every error the middleware makes up, so a test can
// tell an injected failure from a real one.
var ErrInjected = errors.New("injected fault")

// Latency is a delay of Base plus a uniformly drawn part of Jitter.
type Latency struct {
	Base   time.Duration
	Jitter time.Duration
}

// Fixed is a constant delay.
func Fixed(d time.Duration) Latency { return Latency{Base: d} }

// Uniform is a delay drawn uniformly from [lo, hi).
func Uniform(lo, hi time.Duration) Latency { return Latency{Base: lo, Jitter: max(0, hi-lo)} }

// Rule says which requests to disturb and how.
type Rule struct {
	// Ops limits the rule to some operations; zero means all.
	Ops OpSet
	// Prefix limits the rule to keys that start with it (for List, the
	// listed prefix). Keys are relative to the wrapped container.
	Prefix string
	// Fault is injected when the rule fires. When several rules fire on one
	// request, the first with a fault decides it.
	Fault Fault
	// Latency delays the request when the rule fires; delays of all firing
	// rules add up. A context that ends during the delay fails the request
	// before it reaches the store.
	Latency Latency
	// Probability is the chance a matching request fires the rule, drawn
	// from the seeded generator; 0 means always.
	Probability float64
	// Times caps how often the rule fires; 0 means without limit.
	Times int
}

// RuleID names an added rule.
type RuleID uint64

// Request is one call as the hooks see it.
type Request struct {
	Op  blobstore.Op
	Key string // the key, or the prefix for List
	Seq uint64 // order of arrival at the middleware, from 1
}

// Hooks observe every request. Before runs before any fault or delay and may
// block to hold the request (a checker turns each request into a step it
// schedules); a non-nil error fails the request without reaching the store.
// After runs with the error the caller receives.
type Hooks struct {
	Before func(ctx context.Context, r Request) error
	After  func(ctx context.Context, r Request, err error)
}

type rule struct {
	id      RuleID
	r       Rule
	fired   int
	removed bool
}

// Container is a container whose calls pass through the fault injector;
// the embedded *blobstore.Container is what callers use as the store. Every
// method is safe for concurrent use, including changing rules while requests
// run.
type Container struct {
	*blobstore.Container
	inner *blobstore.Container

	mu     sync.Mutex
	rng    *rand.Rand
	rules  []*rule
	nextID RuleID

	pending []pendingCall // LandLater requests, in arrival order; under mu

	ignorePre atomic.Uint32 // an OpSet of conditional ops served unconditionally

	restarting atomic.Bool
	vmu        sync.Mutex
	versions   map[string]version // per key, while restarting; under vmu
	hooks      atomic.Pointer[Hooks]
	seq        atomic.Uint64
	requests   [blobstore.NumOps]atomic.Int64
	injected   [blobstore.NumOps][numFaults]atomic.Int64
	delayed    [blobstore.NumOps]atomic.Int64
}

// New wraps inner. The same seed and the same sequence of requests give the
// same faults. Keys in rules and hooks are relative to inner.
func New(inner *blobstore.Container, seed uint64) *Container {
	c := &Container{inner: inner, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	c.Container = inner.With("faulty", c.intercept)
	return c
}

// Inner returns the wrapped container, for reading the truth behind a fault.
func (c *Container) Inner() *blobstore.Container { return c.inner }

// Add installs a rule after the existing ones.
func (c *Container) Add(r Rule) (RuleID, error) {
	if r.Fault >= PreconditionIgnored {
		return 0, fmt.Errorf("faulty: fault %v cannot be a rule's fault (use SetIgnorePreconditions)", r.Fault)
	}
	if r.Fault == DropDelete && (r.Ops == 0 || r.Ops&^Deletes != 0) {
		return 0, errors.New("faulty: DropDelete applies only to Delete and DeleteIfMatch; set Ops to faulty.Deletes or a part of it")
	}
	if r.Probability < 0 || r.Probability > 1 || r.Times < 0 || r.Latency.Base < 0 || r.Latency.Jitter < 0 {
		return 0, fmt.Errorf("faulty: rule %+v: probability must be in [0,1], times and latencies not negative", r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	c.rules = append(c.rules, &rule{id: c.nextID, r: r})
	return c.nextID, nil
}

// MustAdd is Add for rules written in test code, where a bad rule is a bug.
func (c *Container) MustAdd(r Rule) RuleID {
	id, err := c.Add(r)
	if err != nil {
		panic(err)
	}
	return id
}

// Remove uninstalls a rule; its fired count stays readable.
func (c *Container) Remove(id RuleID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rules {
		if r.id == id {
			r.removed = true
		}
	}
}

// Clear uninstalls every rule.
func (c *Container) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rules {
		r.removed = true
	}
}

// Fired returns how many times a rule fired.
func (c *Container) Fired(id RuleID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rules {
		if r.id == id {
			return r.fired
		}
	}
	return 0
}

// SetIgnorePreconditions turns the store into one that accepts every
// conditional write: CreateIfAbsent overwrites, CompareAndSwap ignores the
// token (and creates missing keys), DeleteIfMatch deletes. Capabilities still
// claim enforcement, as a misconfigured S3-compatible store would.
func (c *Container) SetIgnorePreconditions(on bool) {
	if on {
		c.IgnorePreconditionsOf(Conditional)
	} else {
		c.IgnorePreconditionsOf(0)
	}
}

// IgnorePreconditionsOf breaks only some conditional writes, as a driver
// that forgets one header would: with Ops(OpCompareAndSwap) every CAS is
// sent without If-Match (a plain PUT), with Ops(OpCreateIfAbsent) every
// create without If-None-Match. The empty set (0) turns it off; unlike a
// rule's, it does not mean every op.
func (c *Container) IgnorePreconditionsOf(ops OpSet) { c.ignorePre.Store(uint32(ops & Conditional)) }

// SetHooks installs h for every later request; the zero Hooks removes them.
func (c *Container) SetHooks(h Hooks) {
	if h.Before == nil && h.After == nil {
		c.hooks.Store(nil)
		return
	}
	c.hooks.Store(&h)
}

// Requests returns how many calls of op reached the middleware.
func (c *Container) Requests(op blobstore.Op) int64 { return c.requests[op].Load() }

// Injected returns how many calls of op got fault f.
func (c *Container) Injected(op blobstore.Op, f Fault) int64 { return c.injected[op][f].Load() }

// InjectedTotal returns how many calls of any op got fault f.
func (c *Container) InjectedTotal(f Fault) int64 {
	var n int64
	for op := range blobstore.NumOps {
		n += c.injected[op][f].Load()
	}
	return n
}

// Delayed returns how many calls of op were delayed by a rule.
func (c *Container) Delayed(op blobstore.Op) int64 { return c.delayed[op].Load() }

type decision struct {
	fault Fault
	rule  RuleID
	delay time.Duration
}

func (c *Container) decide(op blobstore.Op, key string) decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d decision
	for _, r := range c.rules {
		if r.removed || (r.r.Times > 0 && r.fired >= r.r.Times) {
			continue
		}
		if !r.r.Ops.Has(op) || !strings.HasPrefix(key, r.r.Prefix) {
			continue
		}
		if r.r.Fault != None && d.fault != None {
			continue // the request's fault is decided; leave this budget alone
		}
		if p := r.r.Probability; p > 0 && p < 1 && c.rng.Float64() >= p {
			continue
		}
		r.fired++
		d.delay += r.r.Latency.Base
		if j := r.r.Latency.Jitter; j > 0 {
			d.delay += time.Duration(c.rng.Int64N(int64(j)))
		}
		if r.r.Fault != None {
			d.fault, d.rule = r.r.Fault, r.id
		}
	}
	return d
}

// pendingCall is a LandLater request: the call, with its own copy of the
// body, and the rest of the chain it goes on to when it lands.
type pendingCall struct {
	req  Request
	call blobstore.Call
	next blobstore.Handler
}

// Landing is the store's answer to a held request when it finally lands.
type Landing struct {
	Request Request
	Err     error
}

// Pending returns how many LandLater requests are held.
func (c *Container) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Land applies every held request to the store, in arrival order, and
// returns what the store answered to each; the callers were long told the
// outcome was unknown.
func (c *Container) Land(ctx context.Context) []Landing {
	c.mu.Lock()
	held := c.pending
	c.pending = nil
	c.mu.Unlock()
	out := make([]Landing, 0, len(held))
	for _, p := range held {
		r, err := c.apply(ctx, p.call, p.next)
		if err == nil && r.Reader != nil {
			_ = r.Reader.Close()
		}
		out = append(out, Landing{Request: p.req, Err: err})
	}
	return out
}

// intercept runs one request through hooks, delay and fault.
func (c *Container) intercept(ctx context.Context, call blobstore.Call, next blobstore.Handler) (res blobstore.Result, err error) {
	op, key := call.Op, call.Key
	req := Request{Op: op, Key: key, Seq: c.seq.Add(1)}
	c.requests[op].Add(1)
	hooks := c.hooks.Load()
	if hooks != nil && hooks.After != nil {
		defer func() { hooks.After(ctx, req, err) }()
	}
	if hooks != nil && hooks.Before != nil {
		if herr := hooks.Before(ctx, req); herr != nil {
			return blobstore.Result{}, herr
		}
	}
	if call.Refusal != nil {
		// Refused before any request (an invalid key, a dead context): no
		// fault can stand in for that answer.
		return next(ctx, call)
	}
	d := c.decide(op, key)
	if d.delay > 0 {
		c.delayed[op].Add(1)
		timer := time.NewTimer(d.delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return blobstore.Result{}, ctx.Err()
		case <-timer.C:
		}
	}
	if d.fault == None {
		return c.apply(ctx, call, next)
	}
	c.injected[op][d.fault].Add(1)
	cause := fmt.Errorf("%w: %v (rule %d)", ErrInjected, d.fault, d.rule)
	switch d.fault {
	case Unavailable:
		return blobstore.Result{}, blobstore.Unavailable(cause)
	case Conflict:
		return blobstore.Result{}, fmt.Errorf("%w: %w", blobstore.ErrConflict, cause)
	case LostRequest:
		return blobstore.Result{}, blobstore.Ambiguous(cause)
	case LostResponse:
		// Whatever the store answered never arrives (a stream it opened
		// is closed unread).
		if r, err := c.apply(ctx, call, next); err == nil && r.Reader != nil {
			_ = r.Reader.Close()
		}
		return blobstore.Result{}, blobstore.Ambiguous(cause)
	case LandLater:
		// The caller may reuse its buffer once the call returns.
		call.Body = bytes.Clone(call.Body)
		c.mu.Lock()
		c.pending = append(c.pending, pendingCall{req: req, call: call, next: next})
		c.mu.Unlock()
		return blobstore.Result{}, blobstore.Ambiguous(cause)
	default: // DropDelete
		return blobstore.Result{}, nil
	}
}

// apply performs a call on the store, honouring SetIgnorePreconditions;
// shared by live and held requests.
func (c *Container) apply(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
	if ign := OpSet(c.ignorePre.Load()); ign != 0 && ign.Has(call.Op) && call.Op.Conditional() {
		c.injected[call.Op][PreconditionIgnored].Add(1)
		if call.Op == blobstore.OpDeleteIfMatch {
			call.Op = blobstore.OpDelete
		} else {
			call.Op = blobstore.OpPut
		}
		call.Expected = ""
	}
	if c.restarting.Load() {
		return c.applyRestarting(ctx, call, next)
	}
	return next(ctx, call)
}

// SetRestartingTokens makes the store's tokens per-key version numbers
// ("1", "2", ...) that start again at 1 whenever a key is created, as a
// store that counts versions per object and forgets the count on delete
// would. Preconditions are still enforced against the version, so the
// start-up probe accepts the store; but a key deleted and created again
// hands out a token an earlier holder may still have (ABA), which only
// protocol-level checks catch. Turning it on forgets what it knew.
func (c *Container) SetRestartingTokens(on bool) {
	c.vmu.Lock()
	c.versions = map[string]version{}
	c.vmu.Unlock()
	c.restarting.Store(on)
}

// version is a key's current version while tokens restart: the inner
// store's token and the number shown instead.
type version struct {
	real blobstore.Token
	n    int
}

func (v version) token() blobstore.Token { return blobstore.Token(strconv.Itoa(v.n)) }

func (c *Container) applyRestarting(ctx context.Context, call blobstore.Call, next blobstore.Handler) (blobstore.Result, error) {
	if call.Op == blobstore.OpCompareAndSwap || call.Op == blobstore.OpDeleteIfMatch || (call.Op == blobstore.OpGetRange && call.Expected != "") {
		c.vmu.Lock()
		v, ok := c.versions[call.Key]
		c.vmu.Unlock()
		if ok && call.Expected == v.token() {
			call.Expected = v.real
		} else {
			call.Expected = "no-such-version"
		}
	}
	res, err := next(ctx, call)
	if err != nil {
		return res, err
	}
	c.vmu.Lock()
	defer c.vmu.Unlock()
	switch call.Op {
	case blobstore.OpPut, blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap:
		// Zero for a key created now: its count starts again.
		v := version{real: res.Token, n: c.versions[call.Key].n + 1}
		c.versions[call.Key] = v
		res.Token = v.token()
	case blobstore.OpDelete, blobstore.OpDeleteIfMatch:
		delete(c.versions, call.Key)
	case blobstore.OpGet:
		res.Object.Token = c.observeLocked(call.Key, res.Object.Token)
	case blobstore.OpStat, blobstore.OpGetRange:
		res.Attrs.Token = c.observeLocked(call.Key, res.Attrs.Token)
	case blobstore.OpList:
		items := slices.Clone(res.Page.Items)
		for i := range items {
			items[i].Token = c.observeLocked(items[i].Key, items[i].Token)
		}
		res.Page.Items = items
	}
	return res, nil
}

// observeLocked maps a token read from the inner store to the key's
// version, counting a write this layer did not see as a new version.
func (c *Container) observeLocked(key string, real blobstore.Token) blobstore.Token {
	v, ok := c.versions[key]
	if !ok || v.real != real {
		v = version{real: real, n: v.n + 1}
		c.versions[key] = v
	}
	return v.token()
}
