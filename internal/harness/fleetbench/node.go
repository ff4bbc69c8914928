package fleetbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/rpcerr"
	"github.com/shardfence/shardfence/internal/tick"
)

// simNode is a sidecar node without a sidecar: it speaks to the master as
// sidecar/agent does (RegisterNode, Ping every interval, WatchAssignments,
// ReportShard), over its own HTTP client (one connection pool per node,
// as each sidecar process has), and reports every shard it is assigned
// open at once instead of opening it.
type simNode struct {
	name    string
	addr    string // the API address it registers (nothing serves there)
	store   string
	masters []string
	hc      *http.Client
	finder  *client.Masters
	pings   *atomic.Int64 // answered pings, every node's
	stats   *stats

	mu       sync.Mutex
	session  string
	lastPing time.Time // when the last answered ping was sent
	active   time.Duration
	interval time.Duration // the ping interval the last registration named
	suspect  time.Duration
	master   string // the master it registered with last
	reg      bool
	desired  map[string]*masterv1.NodeAssignment
	reported map[string]string // shard -> term/allocation reported open
	kick     chan struct{}
}

// stats count what went wrong, every node's.
type stats struct {
	pingErrs, remounts, sessions atomic.Int64
	mu                           sync.Mutex
	lastErr                      string
}

func (s *stats) fail(err error) {
	s.pingErrs.Add(1)
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
}

func newSimNode(name, store string, masters []string, pings *atomic.Int64, st *stats) *simNode {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	hc := &http.Client{Transport: tr}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &simNode{name: name, addr: "http://" + name + ".invalid:7400", store: store, masters: masters, hc: hc,
		finder: client.NewMasters(hc, masters), pings: pings, stats: st, session: hex.EncodeToString(b),
		desired: map[string]*masterv1.NodeAssignment{}, reported: map[string]string{}, kick: make(chan struct{}, 1)}
}

// defaultInterval paces the search for a primary before a master named
// the ping interval (sidecar/agent's value).
const defaultInterval = 250 * time.Millisecond

func (n *simNode) lastPingAt() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastPing
}

// ttls are the active and suspicion TTLs the master named.
func (n *simNode) ttls() (time.Duration, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.active, n.suspect
}

// run registers and follows the master until ctx ends; registered is
// closed after the first registration.
func (n *simNode) run(ctx context.Context, registered chan<- struct{}) {
	once := sync.Once{}
	go n.reportLoop(ctx)
	rr := 0
	for ctx.Err() == nil {
		url := n.masters[rr%len(n.masters)]
		rr++
		if len(n.masters) > 1 {
			n.mu.Lock()
			timeout := min(max(n.interval, defaultInterval), time.Second)
			n.mu.Unlock()
			if p, _, ok := n.finder.Find(ctx, timeout); ok {
				url = p.Addr
			}
		}
		err := n.session1(ctx, url, func() { once.Do(func() { close(registered) }) })
		n.mu.Lock()
		n.reg = false
		n.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		// The agent's pace: the last ping interval, a moment to register
		// again.
		n.mu.Lock()
		wait := max(n.interval, defaultInterval)
		n.mu.Unlock()
		if errors.Is(err, errReregister) {
			wait = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

var errReregister = errors.New("the master asks the node to register again")

func (n *simNode) session1(ctx context.Context, url string, registered func()) error {
	fc := masterv1connect.NewMasterFleetServiceClient(n.hc, url)
	pc := masterv1connect.NewMasterServiceClient(n.hc, url)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	res, err := fc.RegisterNode(rctx, connect.NewRequest(&masterv1.RegisterNodeRequest{
		Node: n.name, Addr: n.addr, Store: n.store, Fencing: true, Session: n.session,
	}))
	cancel()
	if err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return fmt.Errorf("%w: %v", errReregister, err)
		}
		return err
	}
	interval := time.Duration(res.Msg.GetPingIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = defaultInterval
	}
	activeTTL := time.Duration(res.Msg.GetActiveTtlMs()) * time.Millisecond
	n.mu.Lock()
	n.reg, n.master = true, url
	n.active, n.suspect = activeTTL, time.Duration(res.Msg.GetSuspicionTtlMs())*time.Millisecond
	n.interval = interval
	// A new master shows the shards as assigned until it hears again.
	clear(n.reported)
	n.mu.Unlock()
	registered()
	n.stats.sessions.Add(1)
	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- n.pingLoop(ctx, pc, url, res.Msg.GetClientId(), interval, activeTTL) }()
	go func() { errc <- n.watch(ctx, fc) }()
	return <-errc
}

// pingLoop is sidecar/agent's: leave a master that says it is not the
// primary at once, one that does not answer once a primary is confirmed
// elsewhere or it has been silent for an active TTL.
func (n *simNode) pingLoop(ctx context.Context, pc masterv1connect.MasterServiceClient, url, clientID string, interval, activeTTL time.Duration) error {
	lastOK := time.Now()
	for {
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, max(interval, 500*time.Millisecond))
		res, err := pc.Ping(cctx, connect.NewRequest(&masterv1.PingRequest{ClientId: clientID}))
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && isNotPrimary(err):
			return err
		case err != nil:
			n.stats.fail(err)
			if time.Since(lastOK) >= max(activeTTL, 4*interval) || n.elsewhere(ctx, url, min(max(interval, defaultInterval), time.Second)) {
				return err
			}
		case res.Msg.GetStatus() == masterv1.PingStatus_PING_STATUS_NEED_REMOUNT:
			n.stats.remounts.Add(1)
			return errReregister
		default:
			lastOK = time.Now()
			n.pings.Add(1)
			n.mu.Lock()
			n.lastPing = sent
			n.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func (n *simNode) elsewhere(ctx context.Context, url string, timeout time.Duration) bool {
	if len(n.masters) < 2 {
		return false
	}
	p, _, ok := n.finder.Find(ctx, timeout)
	return ok && p.Confirmed && p.Addr != url
}

func (n *simNode) watch(ctx context.Context, fc masterv1connect.MasterFleetServiceClient) error {
	st, err := fc.WatchAssignments(ctx, connect.NewRequest(&masterv1.WatchAssignmentsRequest{Node: n.name, Session: n.session}))
	if err != nil {
		return err
	}
	defer st.Close()
	for st.Receive() {
		set := map[string]*masterv1.NodeAssignment{}
		for _, a := range st.Msg().GetAssignments() {
			set[a.GetShard()] = a
		}
		n.mu.Lock()
		n.desired = set
		n.mu.Unlock()
		tick.Kick(n.kick)
	}
	if err := st.Err(); err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return errReregister
		}
		return err
	}
	return errors.New("the master ended the assignment stream")
}

// reportLoop reports every assigned shard open once per (term,
// allocation), as the agent does after an open, and retries what failed.
func (n *simNode) reportLoop(ctx context.Context) {
	tick.Every(ctx, 200*time.Millisecond, n.kick, func() { n.report(ctx) })
}

// report reports the assigned shards not reported yet at their (term,
// allocation); what fails waits for the next tick.
func (n *simNode) report(ctx context.Context) {
	n.mu.Lock()
	if !n.reg {
		n.mu.Unlock()
		return
	}
	url := n.master
	var todo []*masterv1.NodeAssignment
	for name, a := range n.desired {
		if a.GetAdoptAllocation() != "" || a.GetHandoffNode() != "" {
			continue // no drain or move runs in this bench
		}
		if n.reported[name] != key(a) {
			todo = append(todo, a)
		}
	}
	n.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].GetShard() < todo[j].GetShard() })
	fc := masterv1connect.NewMasterFleetServiceClient(n.hc, url)
	for _, a := range todo {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := fc.ReportShard(cctx, connect.NewRequest(&masterv1.ReportShardRequest{Node: n.name, Session: n.session,
			Shard: a.GetShard(), Term: a.GetTerm(), Allocation: a.GetAllocation(), Report: masterv1.ShardReport_SHARD_REPORT_OPEN}))
		cancel()
		if err != nil {
			break // the ticker retries
		}
		n.mu.Lock()
		if n.master == url {
			n.reported[a.GetShard()] = key(a)
		}
		n.mu.Unlock()
	}
}

func key(a *masterv1.NodeAssignment) string {
	return fmt.Sprintf("%d/%s", a.GetTerm(), a.GetAllocation())
}

// isNotPrimary: the master answered that another one serves.
func isNotPrimary(err error) bool {
	if connect.CodeOf(err) != connect.CodeUnavailable {
		return false
	}
	d, _ := rpcerr.Detail[*masterv1.ErrorDetail](err)
	switch d.GetReason() {
	case "NOT_PRIMARY", "FENCED", "LOG_FAILED":
		return true
	}
	return false
}
