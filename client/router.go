package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/httpauth"
)

// Route is where a shard is served, as the master's routing feed says.
type Route struct {
	Shard string
	Term  int64
	// Node and Addr are the owner and its sidecar's API URL; AppAddr is
	// the URL of the application next to it (serve --app-advertise), empty
	// when it registered none.
	Node, Addr, AppAddr string
	// State: assigned (not confirmed open), open, moving (a drain's
	// handoff runs; the source serves until it ends), failed, fenced,
	// unassigned.
	State string
}

// Serving reports whether calls can go to the route's sidecar now.
func (r Route) Serving() bool { return r.Addr != "" && (r.State == "open" || r.State == "moving") }

func (r Route) same(o Route) bool { return r.Term == o.Term && r.Node == o.Node && r.Addr == o.Addr }

// Router sends each shard's calls to the sidecar that owns it. It follows
// the master's routing feed (MasterFleetService.WatchShards) through
// whichever master is primary, keeps one connection per sidecar, and when
// a call finds the shard fenced, moved or its owner unreachable, waits for
// the feed to name the next owner instead of polling.
//
//	r, err := client.NewRouter([]string{"m1:7500", "m2:7500", "m3:7500"})
//	defer r.Close()
//	ack, err := r.Append(ctx, "orders-3", op) // to the owner, wherever it is
//
// A call is sent again to the next owner only when nothing of it was
// written (the shard was not open there, fenced before the request was
// admitted, or the sidecar could not be reached at all); an Append whose
// outcome is unknown returns its error, as Client.Append does.
type Router struct {
	masters *Masters
	fleet   func(addr string) masterv1connect.MasterFleetServiceClient
	opts    []Option

	mu      sync.Mutex
	routes  map[string]Route
	synced  bool
	feedErr error
	changed chan struct{}
	clients map[string]*Client
	closed  bool

	cancel context.CancelFunc
	done   chan struct{}
}

// RouterOption configures a Router.
type RouterOption func(*routerConfig)

type routerConfig struct {
	hc      *http.Client
	token   string
	sidecar []Option
}

// WithMasterHTTPClient reaches the masters with hc (its TLS trust and
// client certificate).
func WithMasterHTTPClient(hc *http.Client) RouterOption {
	return func(c *routerConfig) { c.hc = hc }
}

// WithMasterToken sends token as the bearer token of every master call.
func WithMasterToken(token string) RouterOption { return func(c *routerConfig) { c.token = token } }

// WithSidecarOptions configures the clients of the sidecars (token, TLS,
// linger, batch bounds).
func WithSidecarOptions(opts ...Option) RouterOption {
	return func(c *routerConfig) { c.sidecar = append(c.sidecar, opts...) }
}

// NewRouter follows the routing feed of the cluster whose masters are at
// masters (HOST:PORT or http(s) URLs; every master, or any that can name
// the primary).
func NewRouter(masters []string, opts ...RouterOption) (*Router, error) {
	var cfg routerConfig
	for _, o := range opts {
		o(&cfg)
	}
	if len(masters) == 0 {
		return nil, errors.New("shardfence router: no master address")
	}
	bases := make([]string, len(masters))
	for i, m := range masters {
		b, err := masterURL(m)
		if err != nil {
			return nil, err
		}
		bases[i] = b
	}
	hc := cfg.hc
	if hc == nil {
		hc = &http.Client{}
	}
	var copts []connect.ClientOption
	if cfg.token != "" {
		copts = append(copts, connect.WithInterceptors(httpauth.BearerToken(cfg.token)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Router{
		masters: NewMasters(hc, bases, copts...),
		fleet: func(addr string) masterv1connect.MasterFleetServiceClient {
			return masterv1connect.NewMasterFleetServiceClient(hc, addr, copts...)
		},
		opts: cfg.sidecar, routes: map[string]Route{}, changed: make(chan struct{}), clients: map[string]*Client{},
		cancel: cancel, done: make(chan struct{}),
	}
	go r.run(ctx)
	return r, nil
}

func masterURL(addr string) (string, error) {
	a := strings.TrimRight(strings.TrimSpace(addr), "/")
	switch {
	case a == "":
		return "", errors.New("shardfence router: empty master address")
	case strings.HasPrefix(a, "http://"), strings.HasPrefix(a, "https://"):
		return a, nil
	case strings.Contains(a, "://"):
		return "", fmt.Errorf("shardfence router: master address %q: use HOST:PORT or http(s)://HOST:PORT", a)
	}
	return "http://" + a, nil
}

// Close stops following the feed and closes every sidecar connection.
func (r *Router) Close() error {
	r.cancel()
	<-r.done
	r.mu.Lock()
	r.closed = true
	clients := r.clients
	r.clients = map[string]*Client{}
	r.mu.Unlock()
	var errs []error
	for _, c := range clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// run follows the feed of whichever master is primary until Close.
func (r *Router) run(ctx context.Context) {
	defer close(r.done)
	failures := 0
	for ctx.Err() == nil {
		p, _, ok := r.masters.Find(ctx, time.Second)
		var err error
		if !ok {
			err = errors.New("no master is primary or knows the primary (an election may be under way)")
		} else {
			var got bool
			got, err = r.follow(ctx, p.Addr)
			if got {
				failures = 0
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.feedErr = err
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(feedRetry.Delay(failures + 1)):
		}
		failures++
	}
}

// follow reads the feed of the master at addr until it ends; got says
// whether a message came.
func (r *Router) follow(ctx context.Context, addr string) (bool, error) {
	st, err := r.fleet(addr).WatchShards(ctx, connect.NewRequest(&masterv1.WatchShardsRequest{}))
	if err != nil {
		return false, err
	}
	defer st.Close()
	got := false
	for st.Receive() {
		got = true
		r.apply(st.Msg())
	}
	if err := st.Err(); err != nil {
		return got, fmt.Errorf("routing feed of %s: %w", addr, err)
	}
	return got, fmt.Errorf("routing feed of %s ended", addr)
}

func (r *Router) apply(m *masterv1.WatchShardsResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.GetSnapshot() {
		r.routes = map[string]Route{}
	}
	for _, rt := range m.GetRoutes() {
		if rt.GetRemoved() {
			delete(r.routes, rt.GetShard())
			continue
		}
		r.routes[rt.GetShard()] = Route{Shard: rt.GetShard(), Term: rt.GetTerm(), Node: rt.GetNode(), Addr: rt.GetAddr(), AppAddr: rt.GetAppAddr(), State: rt.GetState()}
	}
	// A snapshot in parts is whole with its last part: until then a
	// shard not yet listed is not known to be absent.
	r.synced = !m.GetMore()
	r.feedErr = nil
	close(r.changed)
	r.changed = make(chan struct{})
}

// Routes returns the routing table as last received.
func (r *Router) Routes() map[string]Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Route, len(r.routes))
	for k, v := range r.routes {
		out[k] = v
	}
	return out
}

// Route returns where shard is served, waiting until the feed names an
// owner that serves it.
func (r *Router) Route(ctx context.Context, shard string) (Route, error) {
	return r.await(ctx, shard, nil)
}

// await waits until the feed names a serving route of shard other than
// the one a call just failed on (f.route), or, when the feed still names
// that one after f's wait, returns it to be tried again: a call that
// failed with nothing done (a reset connection, a sidecar that did not
// answer) does not prove the owner lost the shard, and the feed names the
// next owner as soon as there is one.
func (r *Router) await(ctx context.Context, shard string, f *retryPace) (Route, error) {
	var again <-chan time.Time
	if f != nil && f.route.Term != 0 {
		t := time.NewTimer(f.wait)
		defer t.Stop()
		again = t.C
	}
	for {
		r.mu.Lock()
		rt, ok := r.routes[shard]
		wake, feedErr, synced, closed := r.changed, r.feedErr, r.synced, r.closed
		r.mu.Unlock()
		if closed {
			return Route{}, errors.New("shardfence router: closed")
		}
		if ok && rt.Serving() && (again == nil || !rt.same(f.route)) {
			return rt, nil
		}
		select {
		case <-wake:
		case <-again:
			again = nil
		case <-ctx.Done():
			why := "no owner serves it yet"
			switch {
			case !synced && feedErr != nil:
				why = "the routing feed is not reachable: " + feedErr.Error()
			case !ok && synced:
				why = "the master's table does not hold it"
			case ok:
				why = fmt.Sprintf("its route is %s on %q at term %d", rt.State, rt.Node, rt.Term)
			}
			return Route{}, fmt.Errorf("shardfence router: shard %q: %w (%s)", shard, ctx.Err(), why)
		}
	}
}

// retryPace is how long a caller waits for the feed to name another owner
// before trying again the one its last call failed on: 50 ms after the
// first failure, doubling with each failure on the same route up to 2 s
// (sameOwnerRetry).
type retryPace struct {
	route    Route
	failures int
	wait     time.Duration
}

var (
	// sameOwnerRetry paces the retries on one route: minRetryWait
	// doubling up to maxRetryWait.
	sameOwnerRetry = backoff.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	// feedRetry paces following the masters' feed again after it ended.
	feedRetry = backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second}
)

// failed records a call that failed on rt with nothing done.
func (f *retryPace) failed(rt Route) {
	if f.route.Term == 0 || !rt.same(f.route) {
		f.route, f.failures = rt, 0
	}
	f.failures++
	f.wait = sameOwnerRetry.Delay(f.failures)
}

// Client returns the client of the sidecar at addr (one per sidecar).
func (r *Router) Client(addr string) (*Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("shardfence router: closed")
	}
	if c := r.clients[addr]; c != nil {
		return c, nil
	}
	c, err := New(addr, r.opts...)
	if err != nil {
		return nil, err
	}
	r.clients[addr] = c
	return c, nil
}

// Append appends ops to shard on its owner (see Client.Append for what an
// acknowledgement and an error mean). When the owner it tried refused the
// call with nothing written (the shard moved, was fenced, or the sidecar
// could not be reached), it waits for the next owner and sends it there;
// while the feed still names the same owner, it tries that one again after
// a pause (50 ms, doubling up to 2 s).
func (r *Router) Append(ctx context.Context, shard string, ops ...[]byte) (Ack, error) {
	var pace retryPace
	for {
		var ack Ack
		call, err := r.atOwner(ctx, "Append", shard, &pace, func(ctx context.Context, c *Client, rt Route) (err error) {
			ack, err = c.ShardAt(shard, rt.Term).Append(ctx, ops...)
			return err
		})
		switch {
		case err != nil:
			return Ack{}, err
		case call.err == nil:
			return ack, nil
		case call.moved && !IsOutcomeUnknown(call.err):
			// The feed named another owner while the call could not
			// reach this one: nothing was sent, send it there.
			pace.failed(call.rt)
			continue
		case !movedOn(call.err) || ctx.Err() != nil:
			return ack, call.err
		case Reason(call.err) == ReasonReplaying:
			// Same owner, still replaying: a moment.
			if err := clock.Sleep(ctx, clock.System(), 20*time.Millisecond); err != nil {
				return Ack{}, &Error{Op: "Append", Shard: shard, Code: connect.CodeOf(err), Err: err}
			}
		default:
			pace.failed(call.rt)
		}
	}
}

// Barrier proves the shard's owner still holds it (Client.Barrier),
// waiting for the next owner when the one the feed named lost it (or
// could not be reached; the same owner is tried again after a pause while
// the feed still names it, as Append does).
func (r *Router) Barrier(ctx context.Context, shard string) (BarrierResult, Route, error) {
	var pace retryPace
	for {
		var res BarrierResult
		call, err := r.atOwner(ctx, "Barrier", shard, &pace, func(ctx context.Context, c *Client, rt Route) (err error) {
			res, err = c.Barrier(ctx, shard, rt.Term)
			return err
		})
		if err != nil {
			return BarrierResult{}, call.rt, err
		}
		if call.err == nil || (!call.moved && !movedOn(call.err)) || ctx.Err() != nil {
			return res, call.rt, call.err
		}
		pace.failed(call.rt)
	}
}

// ownerCall is what came of a call atOwner made on a shard's owner.
type ownerCall struct {
	rt  Route // the owner called
	err error // the call's
	// moved: the feed named another owner while the call ran (its
	// context ended with ErrMoved).
	moved bool
}

// atOwner waits for the owner the feed names for shard (await, paced by
// pace) and makes call on it, under WhileRouted. An error of its own is
// final for the caller: no owner was named before ctx ended (an *Error of
// op), or the owner's address takes no client.
func (r *Router) atOwner(ctx context.Context, op, shard string, pace *retryPace, call func(ctx context.Context, c *Client, rt Route) error) (ownerCall, error) {
	rt, err := r.await(ctx, shard, pace)
	if err != nil {
		return ownerCall{}, &Error{Op: op, Shard: shard, Code: connect.CodeOf(err), Err: err}
	}
	c, err := r.Client(rt.Addr)
	if err != nil {
		return ownerCall{rt: rt}, err
	}
	actx, stop := r.WhileRouted(ctx, shard, rt)
	defer stop()
	err = call(actx, c, rt)
	return ownerCall{rt: rt, err: err, moved: context.Cause(actx) == ErrMoved}, nil
}

// Read calls fn with the ops of shard's lineage from fromSeq on, from its
// owner, after a barrier there: what it delivers is the lineage as of a
// point after the call started (a linearizable read of the log), never a
// deposed owner's view. It follows the shard to the next owner, resuming
// after the last batch delivered.
func (r *Router) Read(ctx context.Context, shard string, fromSeq, maxOps int64, fn func(Batch) error) error {
	next := fromSeq
	delivered := int64(0)
	for {
		_, rt, err := r.Barrier(ctx, shard)
		if err != nil {
			return err
		}
		c, err := r.Client(rt.Addr)
		if err != nil {
			return err
		}
		left := int64(0)
		if maxOps > 0 {
			left = maxOps - delivered
			if left <= 0 {
				return nil
			}
		}
		err = c.Read(ctx, shard, next, left, func(b Batch) error {
			next = b.FirstSeqNo + int64(len(b.Ops))
			delivered += int64(len(b.Ops))
			return fn(b)
		})
		if err == nil || !movedOn(err) || ctx.Err() != nil {
			return err
		}
	}
}

// ErrMoved is the cause of a WhileRouted context that ended because the
// feed named another owner.
var ErrMoved = errors.New("the shard's route changed")

// WhileRouted returns a context that ends when ctx does or when the feed
// names another owner of shard than rt (or drops the shard), with
// context.Cause ErrMoved: a call stuck on an owner that cannot answer (a
// frozen process) gives up for the next one. Cancel it when the call is
// done.
func (r *Router) WhileRouted(ctx context.Context, shard string, rt Route) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			r.mu.Lock()
			cur, ok := r.routes[shard]
			wake := r.changed
			r.mu.Unlock()
			if !ok || !cur.same(rt) {
				cancel(ErrMoved)
				return
			}
			select {
			case <-wake:
			case <-actx.Done():
				return
			}
		}
	}()
	return actx, func() { cancel(nil) }
}

// movedOn reports whether err says the call reached nobody or was refused
// with nothing written because the shard is not served there (any more):
// the next owner may take it.
func movedOn(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.OutcomeUnknown {
		return false
	}
	switch e.Reason {
	case ReasonFenced, ReasonHandedOff, ReasonHandingOff, ReasonNotOpen, ReasonClosed, ReasonWrongTerm, ReasonReplaying:
		return true
	case "":
		return notSent(e.Err) || e.Code == connect.CodeUnavailable
	}
	return false
}
