// Package agent makes a sidecar a client of the master: it registers the
// sidecar as a node, pings it, follows the node's shard assignments
// (MasterFleetService.WatchAssignments) and carries them out on the
// sidecar: it opens a shard it gained with the protocol's recovery
// (claim, seal, restore), closes one it lost, hands a shard off when a
// drain moves it and adopts one a drain moves here, and reports each
// outcome to the master.
//
// The agent never decides ownership: the master's table, made durable
// before any node is told, does, and the store fences whoever lost. A
// sidecar cut off from the master keeps its shards (the store fences it if
// a successor took them); once it reaches the master again it learns what
// it lost and closes those.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/defaults"
	"github.com/shardfence/shardfence/internal/testhooks"
	"github.com/shardfence/shardfence/internal/tick"
	"github.com/shardfence/shardfence/sidecar"
)

// Options configure an Agent.
type Options struct {
	// Server is the sidecar the agent drives.
	Server *sidecar.Server
	// Node is the node's name at the master (the sidecar's --node).
	Node string
	// Addr is the URL of the sidecar's API, as others reach it.
	Addr string
	// AppAddr is the URL of the application next to the sidecar, as its
	// clients reach it (optional): the routing feed publishes it.
	AppAddr string
	// Store is the sidecar's store URL, credentials redacted: the master
	// moves shards only between nodes of the same store.
	Store string
	// Masters are the base URLs of the master and its standbys; the agent
	// registers with whichever is primary (every master names it), and
	// follows a new one within a ping interval of its election.
	Masters []string
	// HTTPClient and ClientOptions reach the master (TLS, bearer token).
	HTTPClient    *http.Client
	ClientOptions []connect.ClientOption
	// RetryBase and RetryMax bound the backoff of a failed open, adoption
	// or master call. Defaults 100 ms and 5 s.
	RetryBase, RetryMax time.Duration
	// CloseTimeout bounds the close of a shard the master moved elsewhere:
	// the writer syncs what it queued for at most this long, then abandons
	// the syncs still in progress (their appends are not acknowledged; a
	// successor fenced them in any case). Without a bound, a store that
	// stalls a moved shard's last sync would keep it open here. Default 10 s.
	CloseTimeout time.Duration
	Logger       *slog.Logger
}

// Agent is one sidecar's membership in the fleet.
type Agent struct {
	opts    Options
	session string
	log     *slog.Logger
	masters *client.Masters
	// heldLogged is when a refusal of the node's name was last logged
	// (only Run's goroutine touches it).
	heldLogged time.Time

	mu     sync.Mutex
	master string // the base URL of the master in use
	rr     int    // the next configured address to try when no primary is known
	// avoid is an address that just answered it is not the primary: the
	// next pick does not take the masters' word for it.
	avoid   string
	clients map[string]*masterClients
	// interval is the ping interval the last registration asked for.
	interval time.Duration
	managed  map[string]*managedShard
	desired  map[string]*masterv1.NodeAssignment
	kick     chan struct{}
	status   Status
}

// managedShard is what the agent knows of a shard it holds for the master.
type managedShard struct {
	busy      bool
	notBefore time.Time
	failures  int
	// reported is the last report sent for (term, allocation, kind).
	reported string
	// handoff is the context this source's StartHandoff returned.
	handoff []byte
}

// Status is the agent's view, for logs and tests.
type Status struct {
	Master      string
	Registered  bool
	Incarnation uint64
	LastPing    time.Time
	LastErr     string
}

// New returns an agent; Run does the work.
func New(opts Options) (*Agent, error) {
	switch {
	case opts.Server == nil:
		return nil, errors.New("agent: no sidecar")
	case opts.Node == "":
		return nil, errors.New("agent: the sidecar needs a --node name to register with the master")
	case len(opts.Masters) == 0:
		return nil, errors.New("agent: no master address")
	case opts.Addr == "":
		return nil, errors.New("agent: no address of the sidecar's API to register")
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	defaults.Positive(&opts.RetryBase, 100*time.Millisecond)
	defaults.Positive(&opts.RetryMax, 5*time.Second)
	defaults.Positive(&opts.CloseTimeout, 10*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, session: hex.EncodeToString(b), log: opts.Logger.With("node", opts.Node),
		masters: client.NewMasters(opts.HTTPClient, opts.Masters, opts.ClientOptions...), clients: map[string]*masterClients{},
		master: opts.Masters[0], interval: defaultInterval,
		managed: map[string]*managedShard{}, desired: map[string]*masterv1.NodeAssignment{}, kick: make(chan struct{}, 1)}
	return a, nil
}

// defaultInterval paces the search for the primary before a master told
// the node its ping interval.
const defaultInterval = 250 * time.Millisecond

// masterClients are the API clients of one master.
type masterClients struct {
	fleet masterv1connect.MasterFleetServiceClient
	ping  masterv1connect.MasterServiceClient
}

func (a *Agent) clientsOf(url string) *masterClients {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clients[url]
	if c == nil {
		c = &masterClients{
			fleet: masterv1connect.NewMasterFleetServiceClient(a.opts.HTTPClient, url, a.opts.ClientOptions...),
			ping:  masterv1connect.NewMasterServiceClient(a.opts.HTTPClient, url, a.opts.ClientOptions...),
		}
		a.clients[url] = c
	}
	return c
}

// Status returns the agent's view.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

func (a *Agent) setErr(err error) {
	a.mu.Lock()
	a.status.LastErr = err.Error()
	a.mu.Unlock()
}

// Run registers with the master and follows it until ctx ends.
//
// Which master: the one that answers it is the primary (every master,
// standby or fenced, names the primary it knows of; see client.Masters).
// While none does (an election is under way, or the masters are out of
// reach) the agent asks again every ping interval, trying the configured
// addresses in turn, so it registers with a newly elected primary within
// about a ping interval of its election: a promoted master gives every
// node a whole active TTL, and the node must reach it within that TTL or
// lose its shards.
func (a *Agent) Run(ctx context.Context) error {
	go a.reconcileLoop(ctx)
	retry := backoff.Policy{Initial: a.opts.RetryBase, Max: a.opts.RetryMax}
	refusals := 0 // sessions refused in a row since the last registration
	for ctx.Err() == nil {
		url := a.pick(ctx)
		registered, err := a.session1(ctx, url)
		if ctx.Err() != nil {
			return nil
		}
		a.setErr(err)
		a.mu.Lock()
		a.status.Registered = false
		pace := a.interval
		a.mu.Unlock()
		e := afterSession(err, registered)
		if e.Msg != "" && (!e.Throttle || time.Since(a.heldLogged) >= 30*time.Second) {
			if e.Throttle {
				a.heldLogged = time.Now()
			}
			a.log.Log(ctx, e.Level, e.Msg, "master", url, "err", err)
		}
		if e.Avoid {
			a.mu.Lock()
			a.avoid = url
			a.mu.Unlock()
		}
		var wait time.Duration
		switch e.Wait {
		case waitBackoff:
			refusals++
			wait = retry.Delay(refusals)
		case waitPace:
			wait = pace
		case waitRetryBase:
			wait = a.opts.RetryBase
		case waitNone:
			refusals = 0
		}
		if testhooks.NoBackoffReset.Load() {
			// The bug before e0ab631 (test-only): every session's end
			// waits the back-off, which doubles and is never reset by a
			// registration.
			refusals++
			wait = retry.Delay(refusals)
			if errors.Is(err, errReregister) {
				refusals = 0
			}
		}
		if clock.Sleep(ctx, clock.System(), wait) != nil {
			return nil
		}
	}
	return nil
}

// sessionWait is how long Run waits before the next session.
type sessionWait int

const (
	// waitNone: the node was registered; look for the primary at once,
	// and the refusals start over.
	waitNone sessionWait = iota
	// waitBackoff: a refusal (a configuration error); it counts, and the
	// wait is the back-off of the refusals in a row.
	waitBackoff
	// waitPace: one ping interval.
	waitPace
	// waitRetryBase: a moment (Options.RetryBase).
	waitRetryBase
)

// sessionEnd is what Run does once a session with a master ended.
type sessionEnd struct {
	Wait sessionWait
	// Avoid: do not take the masters' word for this address at the next
	// pick.
	Avoid bool
	// Msg, at Level, is logged ("" : nothing); Throttle logs it at most
	// every half minute.
	Msg      string
	Level    slog.Level
	Throttle bool
}

// afterSession decides what follows the end of a session with a master,
// on err; registered says whether the session got as far as registering.
func afterSession(err error, registered bool) sessionEnd {
	switch code := connect.CodeOf(err); {
	case code == connect.CodeUnauthenticated, code == connect.CodePermissionDenied:
		// A configuration error, not a lost master: it goes on trying
		// (the master's token may be the one that changes) but says so,
		// backing off.
		return sessionEnd{Wait: waitBackoff, Level: slog.LevelError,
			Msg: "the master refused this sidecar's credentials (check --master-token-file and the client certificate); trying again"}
	case tlsRefused(err):
		return sessionEnd{Wait: waitBackoff, Level: slog.LevelError,
			Msg: "the TLS handshake with the master failed (check --master-ca-cert and --master-client-cert/--master-client-key); trying again"}
	case reasonOf(err) == "NODE_HELD":
		// Another live process registered this --node name: a
		// configuration error (two sidecars with one name) or the
		// previous process of this one, not yet silent for the master's
		// hold. Ask again every ping interval; the first refusal and then
		// one every half minute are logged.
		return sessionEnd{Wait: waitPace, Level: slog.LevelError, Throttle: true,
			Msg: "the master refused this sidecar's --node name: another live process holds it (a second sidecar with the same --node, or this one's previous process that has not been silent long enough); trying again"}
	case registered && errors.Is(err, errReregister):
		// The master forgot this incarnation (it went offline while
		// paused or cut off, or the master is new): not a lost master.
		return sessionEnd{Wait: waitNone, Level: slog.LevelInfo, Msg: "the master asks this node to register again"}
	case registered:
		// It was registered: look for the primary at once.
		return sessionEnd{Wait: waitNone, Level: slog.LevelWarn, Msg: "lost the master; looking for the primary"}
	case errors.Is(err, errReregister):
		// Still being offboarded after it went offline: a moment.
		return sessionEnd{Wait: waitRetryBase}
	case isNotPrimary(err):
		return sessionEnd{Wait: waitPace, Avoid: true, Level: slog.LevelInfo, Msg: "that master is not the primary; looking for the primary"}
	}
	// Not that one next time unless the masters name it when it timed
	// out: a paused or cut-off master costs a whole call timeout per try,
	// and a new primary gives this node only its TTLs to come back. (A
	// refused connection costs nothing to try again.)
	return sessionEnd{Wait: waitPace, Avoid: connect.CodeOf(err) == connect.CodeDeadlineExceeded,
		Level: slog.LevelWarn, Msg: "the master did not answer; looking for the primary"}
}

// tlsRefused: the TLS handshake failed (a certificate the master wants,
// or one this node does not trust): a configuration error.
func tlsRefused(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "tls: ") || strings.Contains(err.Error(), "x509: "))
}

// isNotPrimary: the master answered that another one serves (a standby,
// a fenced or stepped-down primary, or one still opening its log).
func isNotPrimary(err error) bool {
	if connect.CodeOf(err) != connect.CodeUnavailable {
		return false
	}
	switch reasonOf(err) {
	case "NOT_PRIMARY", "FENCED", "LOG_FAILED":
		return true
	}
	return false
}

// reasonOf is the reason of the master's error detail in err, "" if it
// has none.
func reasonOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*masterv1.ErrorDetail); ok {
				return ed.GetReason()
			}
		}
	}
	return ""
}

// pick returns the master to register with: the primary the masters name,
// else the next configured address.
func (a *Agent) pick(ctx context.Context) string {
	a.mu.Lock()
	timeout := min(max(a.interval, defaultInterval), time.Second)
	a.mu.Unlock()
	p, _, ok := a.masters.Find(ctx, timeout)
	a.mu.Lock()
	defer a.mu.Unlock()
	avoid := a.avoid
	a.avoid = ""
	if ok && p.Addr != avoid {
		return p.Addr
	}
	url := a.opts.Masters[a.rr%len(a.opts.Masters)]
	a.rr++
	if url == avoid && len(a.opts.Masters) > 1 {
		url = a.opts.Masters[a.rr%len(a.opts.Masters)]
		a.rr++
	}
	return url
}

// elsewhere reports whether the masters confirm a primary at another
// address than url, so a session with url should end now.
func (a *Agent) elsewhere(ctx context.Context, url string, timeout time.Duration) bool {
	p, _, ok := a.masters.Find(ctx, timeout)
	return ok && p.Confirmed && p.Addr != url
}

// errReregister: the master no longer knows this incarnation (it went
// offline and was offboarded, or a new master has not seen it): register
// again at once.
var errReregister = errors.New("the master asks the node to register again")

// session1 is one registration with the master at url: ping and watch
// until either fails. registered says whether it got that far.
func (a *Agent) session1(ctx context.Context, url string) (registered bool, err error) {
	c := a.clientsOf(url)
	a.mu.Lock()
	a.master = url
	timeout := max(a.interval, time.Second)
	a.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	res, err := c.fleet.RegisterNode(rctx, connect.NewRequest(&masterv1.RegisterNodeRequest{
		Node: a.opts.Node, Addr: a.opts.Addr, AppAddr: a.opts.AppAddr, Store: a.opts.Store, Fencing: a.opts.Server.FencingAvailable(), Session: a.session,
	}))
	cancel()
	if err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			// Still being offboarded after it went offline: wait.
			return false, fmt.Errorf("%w: %v", errReregister, err)
		}
		return false, fmt.Errorf("register with %s: %w", url, err)
	}
	interval := time.Duration(res.Msg.GetPingIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = defaultInterval
	}
	a.mu.Lock()
	a.status.Master, a.status.Registered, a.status.Incarnation = url, true, res.Msg.GetIncarnation()
	a.interval = interval
	// A master that did not hear this node's reports (a newly elected
	// one, or one that restarted) shows its shards as assigned until it
	// does: report every shard again.
	if !testhooks.ForgetReportsOnNewMaster.Load() {
		for _, m := range a.managed {
			m.reported = ""
		}
	}
	a.mu.Unlock()
	a.wake()
	a.log.Info("registered with the master", "master", url, "incarnation", res.Msg.GetIncarnation(),
		"active_ttl_ms", res.Msg.GetActiveTtlMs(), "suspicion_ttl_ms", res.Msg.GetSuspicionTtlMs())
	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() {
		errc <- a.pingLoop(ctx, c.ping, url, res.Msg.GetClientId(), interval, time.Duration(res.Msg.GetActiveTtlMs())*time.Millisecond)
	}()
	go func() { errc <- a.watch(ctx, c.fleet) }()
	return true, <-errc
}

// pingLoop pings every interval. NEED_REMOUNT means the master forgot the
// incarnation: register again. A master that answers it is not the
// primary is left at once; one that does not answer is left as soon as
// the masters confirm a primary elsewhere, and in any case once it has
// not answered for an active TTL (it would have judged this node by then).
func (a *Agent) pingLoop(ctx context.Context, pc masterv1connect.MasterServiceClient, url, clientID string, interval, activeTTL time.Duration) error {
	lastOK := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(interval, 500*time.Millisecond))
		res, err := pc.Ping(cctx, connect.NewRequest(&masterv1.PingRequest{ClientId: clientID}))
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && isNotPrimary(err):
			return fmt.Errorf("ping: %w", err)
		case err != nil:
			if time.Since(lastOK) >= max(activeTTL, 4*interval) || a.elsewhere(ctx, url, min(max(interval, defaultInterval), time.Second)) {
				return fmt.Errorf("ping: %w", err)
			}
		case res.Msg.GetStatus() == masterv1.PingStatus_PING_STATUS_NEED_REMOUNT:
			return fmt.Errorf("%w: ping answered NEED_REMOUNT", errReregister)
		default:
			lastOK = time.Now()
			a.mu.Lock()
			a.status.LastPing = lastOK
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// watch follows the node's assignments.
func (a *Agent) watch(ctx context.Context, fc masterv1connect.MasterFleetServiceClient) error {
	st, err := fc.WatchAssignments(ctx, connect.NewRequest(&masterv1.WatchAssignmentsRequest{Node: a.opts.Node, Session: a.session}))
	if err != nil {
		return err
	}
	defer st.Close()
	for st.Receive() {
		set := map[string]*masterv1.NodeAssignment{}
		for _, as := range st.Msg().GetAssignments() {
			set[as.GetShard()] = as
		}
		a.mu.Lock()
		for name, d := range set {
			// A handoff the master cancelled (a drain's or a move's
			// target failed) shows the shard as assigned until its owner
			// reports it again: a source that never started the handoff
			// reports it open once more.
			if prev := a.desired[name]; prev.GetHandoffAllocation() != "" && d.GetHandoffAllocation() == "" {
				if m := a.managed[name]; m != nil {
					m.reported = ""
				}
			}
		}
		a.desired = set
		a.mu.Unlock()
		a.wake()
	}
	err = st.Err()
	if err == nil {
		return errors.New("the master ended the assignment stream")
	}
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return fmt.Errorf("%w: %v", errReregister, err)
	}
	return fmt.Errorf("watch assignments: %w", err)
}

func (a *Agent) wake() {
	tick.Kick(a.kick)
}

// reconcileLoop carries out the desired set whenever it changes, and
// retries what failed.
func (a *Agent) reconcileLoop(ctx context.Context) {
	tick.Every(ctx, 200*time.Millisecond, a.kick, func() { a.reconcile(ctx) })
}

// reconcile compares the desired set with the sidecar's shards (plan) and
// starts each action it returns, at most one per shard (none on a shard
// whose last action is still running).
func (a *Agent) reconcile(ctx context.Context) {
	local := map[string]sidecar.ShardStatus{}
	for _, st := range a.opts.Server.Shards() {
		local[st.Shard] = st
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.status.Registered {
		return
	}
	for name := range a.desired {
		if a.managed[name] == nil {
			a.managed[name] = &managedShard{}
		}
	}
	views := make(map[string]shardView, len(a.managed))
	for name, m := range a.managed {
		st, here := local[name]
		views[name] = shardView{Desired: a.desired[name], Here: here, Local: st,
			Reported: m.reported, Handoff: m.handoff, Busy: m.busy, NotBefore: m.notBefore}
	}
	for _, x := range plan(time.Now(), views) {
		m := a.managed[x.Shard]
		if x.Kind == actForget {
			delete(a.managed, x.Shard)
			continue
		}
		a.log.Debug("shard action", "shard", x.Shard, "action", x.Kind.String(), "term", x.Term, "why", x.Why)
		m.busy = true
		go func() {
			err := a.do(ctx, x, m)
			a.mu.Lock()
			m.busy = false
			if err != nil {
				m.failures++
				m.notBefore = time.Now().Add(backoff.Policy{Initial: a.opts.RetryBase, Max: a.opts.RetryMax}.Delay(m.failures))
			} else {
				m.failures, m.notBefore = 0, time.Time{}
			}
			a.mu.Unlock()
			a.wake()
		}()
	}
}

// do carries out one action of plan; m is the shard's bookkeeping, which
// it updates under a.mu.
func (a *Agent) do(ctx context.Context, x action, m *managedShard) error {
	switch x.Kind {
	case actClose:
		return a.closeMoved(ctx, x)
	case actReport:
		if err := a.report(ctx, x.Term, x.Shard, x.Alloc, x.Report, nil, x.Context); err != nil {
			return err
		}
		a.mu.Lock()
		m.reported = reportKey(x.Term, x.Alloc, x.Report)
		a.mu.Unlock()
		return nil
	case actFail:
		a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_FAILED, x.Err, nil)
		return x.Err
	case actAdopt:
		st, err := a.opts.Server.AdoptHandoff(ctx, x.Context, x.Settings)
		if err != nil {
			a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_FAILED, err, nil)
			return err
		}
		a.log.Info("adopted a shard a drain or a move sent here", "shard", x.Shard, "term", st.Term)
		return a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_OPEN, nil, nil)
	case actHandOff:
		raw, err := a.opts.Server.StartHandoff(ctx, x.Shard, x.Target, x.TargetNode)
		if err != nil {
			return err
		}
		a.mu.Lock()
		m.handoff = raw
		a.mu.Unlock()
		a.log.Info("handed a shard off for a drain or a move", "shard", x.Shard, "term", x.Term, "target_node", x.TargetNode)
		return a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_HANDED_OFF, nil, raw)
	case actAbort:
		resumed, err := a.opts.Server.AbortHandoff(ctx, x.Context)
		if err != nil {
			return err
		}
		a.mu.Lock()
		m.handoff = nil
		a.mu.Unlock()
		kind := masterv1.ShardReport_SHARD_REPORT_RESUMED
		if !resumed {
			kind = masterv1.ShardReport_SHARD_REPORT_STOOD_DOWN
		}
		return a.report(ctx, x.Term, x.Shard, x.Alloc, kind, nil, nil)
	case actOpen:
		start := time.Now()
		if _, err := a.opts.Server.OpenWith(ctx, x.Shard, x.Term, x.Alloc, x.Settings, sidecar.OpenOptions{Warm: x.Warm}, nil); err != nil {
			a.log.Warn("open of an assigned shard failed", "shard", x.Shard, "term", x.Term, "err", err)
			a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_FAILED, err, nil)
			return err
		}
		a.log.Info("opened an assigned shard", "shard", x.Shard, "term", x.Term, "allocation", x.Alloc, "duration_ms", time.Since(start).Milliseconds())
		return a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_OPEN, nil, nil)
	}
	return fmt.Errorf("agent: unknown action %v", x.Kind)
}

// closeMoved closes a shard the master moved elsewhere and reports it
// closed. Until now the store fenced it if a successor took it.
func (a *Agent) closeMoved(ctx context.Context, x action) error {
	srv := a.opts.Server
	cctx, cancel := context.WithTimeout(ctx, a.opts.CloseTimeout)
	_, err := srv.Close(cctx, x.Shard)
	cancel()
	if err != nil && !errors.Is(err, sidecar.ErrShardNotOpen) && !hosts(srv, x.Shard) {
		// Closed, its last syncs abandoned at the bound.
		a.log.Warn("closing a shard the master moved elsewhere abandoned its syncs in progress; none of their appends was acknowledged", "shard", x.Shard, "term", x.Term, "err", err)
		err = nil
	}
	if err == nil || errors.Is(err, sidecar.ErrShardNotOpen) {
		a.log.Info("closed a shard the master moved elsewhere", "shard", x.Shard, "term", x.Term, "state", x.State)
		a.report(ctx, x.Term, x.Shard, x.Alloc, masterv1.ShardReport_SHARD_REPORT_CLOSED, nil, nil)
		return nil
	}
	return err
}

// report tells the master what the node did with a shard.
func (a *Agent) report(ctx context.Context, term int64, name, alloc string, kind masterv1.ShardReport, cause error, handoff []byte) error {
	req := &masterv1.ReportShardRequest{Node: a.opts.Node, Session: a.session, Shard: name, Term: term, Allocation: alloc, Report: kind, HandoffContext: handoff}
	if cause != nil {
		req.Error = cause.Error()
		req.Reason = sidecar.Reason(cause)
		req.SuccessorTerm, _ = fence.SuccessorTerm(cause)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a.mu.Lock()
	url := a.master
	a.mu.Unlock()
	_, err := a.clientsOf(url).fleet.ReportShard(cctx, connect.NewRequest(req))
	if err != nil {
		return fmt.Errorf("report %s of shard %s: %w", kind, name, err)
	}
	return nil
}

// hosts reports whether the sidecar still holds the shard in any state.
func hosts(srv *sidecar.Server, name string) bool {
	for _, st := range srv.Shards() {
		if st.Shard == name {
			return true
		}
	}
	return false
}
