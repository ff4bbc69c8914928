package master

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/testhooks"
	"github.com/shardfence/shardfence/master/internal/fleetplan"
)

// Sidecar nodes are clients of the master like the memory clients: a node
// registers (a liveness signal, as a mount is), pings under the client id
// NodeClientID(name), and goes Active -> Suspected -> Offline on the same
// TTLs. The fleet is the shard assignment table over those nodes: which
// node owns which shard at which term and allocation, with the settings it
// opens it with. Every change of the table is recorded to the operation
// log and shown to a node (WatchAssignments) only once the log
// acknowledged it, so a node is never told about an assignment a
// successor master would not know. A takeover records term+1 with a new
// allocation; the new owner's claim then fences the old one in the store.

// NodeClientPrefix starts the client id of every sidecar node.
const NodeClientPrefix = "node:"

// NodeClientID is the client id a sidecar node pings with.
func NodeClientID(name string) string { return NodeClientPrefix + name }

// Shard states, as ListShards reports them.
const (
	ShardAssigned   = fleetplan.StateAssigned   // told (or about to be), not confirmed open
	ShardOpen       = fleetplan.StateOpen       // the owner reported it open at the term
	ShardFailed     = fleetplan.StateFailed     // the owner could not open it (reason)
	ShardFenced     = fleetplan.StateFenced     // a term the master did not grant took it
	ShardMoving     = fleetplan.StateMoving     // a drain's or a move's handoff is under way
	ShardUnassigned = fleetplan.StateUnassigned // no owner (reason)
)

// ValidateNodeName checks a sidecar node name: 1 to 128 characters of
// A-Z a-z 0-9 . _ -, not starting with '.' or '-'.
func ValidateNodeName(name string) error { return fleetplan.ValidateName("node name", name) }

// ValidateShardName checks a shard id with the sidecar's rule (1 to 128
// characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-').
func ValidateShardName(name string) error { return fleetplan.ValidateName("shard id", name) }

// node is one sidecar node. rec is its durable description (replaced
// whole, never changed in place); the rest is process-local.
type node struct {
	rec     *masterv1.NodeRecord
	owner   atomic.Pointer[ClientLivenessRecord]
	session string
	// notify is closed (and replaced) when something published concerns
	// the node; its watch streams wait on it.
	notify chan struct{}
	// heldLogged is when a refusal of a second process for this name
	// was last logged (ErrNodeHeld): once, then every half minute.
	heldLogged time.Time
}

// Owner implements Resource: the node's registering incarnation.
func (n *node) Owner() *ClientLivenessRecord { return n.owner.Load() }

// Serviceable implements Resource: registered and not draining. The
// caller holds the fleet's lock.
func (n *node) Serviceable() bool { return n.rec != nil && !n.rec.GetDraining() }

// shardEntry is one row of the table: the newest recorded assignment
// (cur), the newest durable one (pub, what nodes are told), and the
// status the owner last reported.
type shardEntry struct {
	cur, pub       *masterv1.ShardAssignment
	curVer, pubVer uint64
	state, reason  string
	adoptCtx       []byte // the handoff context a drain's source reported
	staleGrants    int
	avoid          string // the owner that lost the shard: placed there last
	// pubNodes are the nodes byNode files the entry under (pub's node and
	// handoff node), loadNodes the nodes load counts it for (cur's).
	pubNodes, loadNodes [2]string
}

type fleet struct {
	m *Master

	mu      sync.Mutex
	nodes   map[string]*node
	shards  map[string]*shardEntry
	version uint64
	// byNode files every entry under the nodes its published assignment
	// names (owner, handoff target), so a node's assignments are found
	// without a scan of the table; load counts the shards each node owns
	// or is receiving as recorded (cur), and names are the nodes' names
	// in order. All three follow every change (indexLocked), so a pick
	// or a node's watch costs its own shards, not the table.
	byNode map[string]map[*shardEntry]struct{}
	load   map[string]int
	names  []string
	// routesWake is closed (and replaced) when a route may have changed:
	// the routing feeds (WatchShards) wait on it.
	routesWake chan struct{}
}

func newFleet(m *Master) *fleet {
	return &fleet{m: m, nodes: map[string]*node{}, shards: map[string]*shardEntry{}, routesWake: make(chan struct{}),
		byNode: map[string]map[*shardEntry]struct{}{}, load: map[string]int{}}
}

func (f *fleet) nodeLocked(name string) *node {
	n := f.nodes[name]
	if n == nil {
		n = &node{notify: make(chan struct{})}
		f.nodes[name] = n
		f.names = nil
	}
	return n
}

// sortedNamesLocked lists the nodes' names in order.
func (f *fleet) sortedNamesLocked() []string {
	if f.names == nil {
		f.names = make([]string, 0, len(f.nodes))
		for name := range f.nodes {
			f.names = append(f.names, name)
		}
		sort.Strings(f.names)
	}
	return f.names
}

// indexLocked brings byNode and load up to date with e's assignments
// (after any change of e.cur or e.pub, also one made in place); gone
// takes e out of both (it leaves the table).
func (f *fleet) indexLocked(e *shardEntry, gone bool) {
	for _, n := range e.pubNodes {
		if set := f.byNode[n]; n != "" && set != nil {
			delete(set, e)
			if len(set) == 0 {
				delete(f.byNode, n)
			}
		}
	}
	for _, n := range e.loadNodes {
		if n != "" {
			if f.load[n]--; f.load[n] <= 0 {
				delete(f.load, n)
			}
		}
	}
	e.pubNodes, e.loadNodes = [2]string{}, [2]string{}
	if gone {
		return
	}
	if p := e.pub; p != nil && !p.GetRemoved() {
		e.pubNodes = [2]string{p.GetNode(), p.GetHandoffNode()}
	}
	if c := e.cur; c != nil {
		if !c.GetRemoved() {
			e.loadNodes[0] = c.GetNode()
		}
		e.loadNodes[1] = c.GetHandoffNode()
	}
	for _, n := range e.pubNodes {
		if n != "" {
			set := f.byNode[n]
			if set == nil {
				set = map[*shardEntry]struct{}{}
				f.byNode[n] = set
			}
			set[e] = struct{}{}
		}
	}
	for _, n := range e.loadNodes {
		if n != "" {
			f.load[n]++
		}
	}
}

// notifyLocked wakes the watch streams of the named nodes, and the
// routing feeds.
func (f *fleet) notifyLocked(names ...string) {
	f.routesChangedLocked()
	for _, name := range names {
		if name == "" {
			continue
		}
		if n := f.nodes[name]; n != nil {
			close(n.notify)
			n.notify = make(chan struct{})
		}
	}
}

// change is an assignment recorded and waiting for the log.
type change struct {
	shard string
	ver   uint64
	a     *masterv1.ShardAssignment
	t     Ticket
}

// setLocked records a as the shard's newest assignment. The caller holds
// topo shared (a snapshot's freeze is exclusive) and f.mu.
func (f *fleet) setLocked(e *shardEntry, a *masterv1.ShardAssignment) change {
	f.version++
	e.cur, e.curVer = a, f.version
	f.indexLocked(e, false)
	t := f.m.record(&Op{Kind: OpAssignShard, Shard: a})
	return change{shard: a.GetShard(), ver: f.version, a: a, t: t}
}

// publish makes changes visible to the nodes once the log holds them, in
// a goroutine (a change is published whatever its caller does). done is
// closed after, with the log's error if it failed.
func (f *fleet) publish(changes []change) <-chan error {
	done := make(chan error, 1)
	if len(changes) == 0 {
		done <- nil
		return done
	}
	apply := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range changes {
			e := f.shards[c.shard]
			if e == nil || e.pubVer >= c.ver {
				continue
			}
			old := e.pub
			e.pub, e.pubVer = c.a, c.ver
			f.notifyLocked(old.GetNode(), old.GetHandoffNode(), c.a.GetNode(), c.a.GetHandoffNode())
			gone := c.a.GetRemoved() && e.curVer == c.ver
			f.indexLocked(e, gone)
			if gone {
				delete(f.shards, c.shard)
			}
		}
	}
	last := changes[len(changes)-1].t
	if last == nil {
		apply()
		done <- nil
		return done
	}
	if testhooks.PublishBeforeDurable.Load() {
		apply() // the bug the simulation must find (test-only)
	}
	go func() {
		// The log acknowledges a prefix: the last ticket durable means
		// every earlier one is.
		err := last.Wait(context.Background())
		if err == nil {
			apply()
		}
		done <- err
	}()
	return done
}

// wait waits for a publish, or ctx.
func wait(ctx context.Context, op string, done <-chan error) error {
	select {
	case err := <-done:
		if err != nil {
			return durable(ctx, &Error{Op: op}, failedTicket{err})
		}
		return nil
	case <-ctx.Done():
		return &Error{Op: op, Err: ctx.Err(), Hint: "the change was recorded and is on its way to the operation log, its outcome unknown: list the shards before retrying"}
	}
}

type failedTicket struct{ err error }

func (t failedTicket) Wait(context.Context) error { return t.err }

func clone(a *masterv1.ShardAssignment) *masterv1.ShardAssignment {
	return proto.Clone(a).(*masterv1.ShardAssignment)
}

func newAllocation(node string, term int64) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s.t%d.%s", node, term, hex.EncodeToString(b))
}

// NodeRegistration is what a sidecar node registers with.
type NodeRegistration struct {
	Name string
	Addr string
	// AppAddr is the application's URL next to the sidecar (optional).
	AppAddr string
	Store   string
	Fencing bool
	Session string
}

// NodeRegistered is the master's answer to a registration.
type NodeRegistered struct {
	ClientID     string
	Incarnation  uint64
	ActiveTTL    time.Duration
	SuspicionTTL time.Duration
	PingInterval time.Duration
}

// RegisterNode starts or continues a sidecar node's incarnation. It is a
// liveness signal like a mount: a node still being offboarded is refused
// (ErrClientOffline) until that completes, and a node whose process
// restarted (a new session while its incarnation is live) gets a new
// incarnation at once. The node's description is logged when it changed.
func (m *Master) RegisterNode(ctx context.Context, reg NodeRegistration) (NodeRegistered, error) {
	fail := func(err error, hint string) (NodeRegistered, error) {
		return NodeRegistered{}, &Error{Op: "RegisterNode", Client: NodeClientID(reg.Name), Err: err, Hint: hint}
	}
	if hint, err := fleetplan.CheckRegistration(fleetplan.Registration{Name: reg.Name, Addr: reg.Addr, AppAddr: reg.AppAddr,
		Store: reg.Store, Session: reg.Session}); err != nil {
		return fail(err, hint)
	}
	if err := ctx.Err(); err != nil {
		return fail(err, "")
	}
	// The store URL is shown by `master nodes` and written to the log in
	// the store: never with credentials, whatever the node sent (a
	// sidecar sends it redacted; redacting again changes nothing).
	reg.Store = blobstore.Redact(reg.Store)
	f := m.fleet
	id := NodeClientID(reg.Name)
	m.topo.RLock()
	f.mu.Lock()
	if n := f.nodes[reg.Name]; n != nil && n.session != "" && n.session != reg.Session {
		if quiet, held := m.live.held(n.owner.Load(), nodeHold(m.live.cfg)); held {
			logIt := time.Since(n.heldLogged) >= 30*time.Second
			if logIt {
				n.heldLogged = time.Now()
			}
			holder := n.rec.GetAddr()
			f.mu.Unlock()
			m.topo.RUnlock()
			if logIt {
				// "node" is this master's own name in its logs: the
				// sidecar is named by its client id.
				m.log.Warn("refused a second process for a live node's name (logged once every half minute while it asks)", "client", echo.Clip(NodeClientID(reg.Name)),
					"addr", echo.Clip(reg.Addr), "holder_addr", holder, "holder_last_signal_ms", quiet.Milliseconds())
			}
			return fail(fmt.Errorf("%w: node %q is held by a live process (serving %q, heard from %v ago)",
				ErrNodeHeld, reg.Name, holder, quiet.Round(time.Millisecond)),
				"is a second sidecar running with the same --node? stop it or give it its own name; a restarted sidecar is let in once the old process has been silent for "+nodeHold(m.live.cfg).String())
		}
	}
	rec, recovery, err := m.live.signal(id, true)
	if err != nil {
		f.mu.Unlock()
		m.topo.RUnlock()
		return fail(err, "the node went offline and its shards are being moved; register again once that completes (Ping answers NEED_REMOUNT until then)")
	}
	n := f.nodeLocked(reg.Name)
	if n.session != "" && n.session != reg.Session && n.owner.Load() == rec {
		// The process restarted: its shards are not open in the new one,
		// which reopens them (a term that already wrote is raised when
		// the node reports it).
		rec = m.live.replace(rec)
	}
	n.session = reg.Session
	n.owner.Store(rec)
	want := &masterv1.NodeRecord{Name: reg.Name, Addr: reg.Addr, AppAddr: reg.AppAddr, Store: reg.Store, Fencing: reg.Fencing, Draining: n.rec.GetDraining()}
	var t Ticket
	if n.rec == nil || !proto.Equal(n.rec, want) {
		n.rec = want
		t = m.record(&Op{Kind: OpNode, Node: want})
	}
	f.notifyLocked(reg.Name) // a watch of the old session ends
	f.mu.Unlock()
	m.topo.RUnlock()
	m.noteRecovery(recovery)
	if err := durable(ctx, &Error{Op: "RegisterNode", Client: id}, t); err != nil {
		return NodeRegistered{}, err
	}
	cfg := m.live.cfg
	return NodeRegistered{ClientID: id, Incarnation: rec.Incarnation(), ActiveTTL: cfg.ActiveTTL, SuspicionTTL: cfg.SuspicionTTL,
		PingInterval: nodePingInterval(cfg)}, nil
}

// nodePingInterval is how often a node pings: a quarter of the active
// TTL, at most a second.
func nodePingInterval(cfg LivenessConfig) time.Duration {
	return max(min(cfg.ActiveTTL/4, time.Second), 5*time.Millisecond)
}

// nodeHold is how long a node's name stays with the process that holds
// it after that process last signalled: three ping intervals. A second
// process registering the name within it is refused (ErrNodeHeld), so
// two processes started with one --node name cannot take the name from
// each other in turn; a restarted process waits at most this long.
func nodeHold(cfg LivenessConfig) time.Duration { return 3 * nodePingInterval(cfg) }

// NodeAssignment is one shard a node must hold, hand off or adopt.
type NodeAssignment = masterv1.NodeAssignment

// WatchAssignments calls send with the node's assignments as published
// (durable), then again after every published change that concerns the
// node, until ctx ends, send fails or the node's incarnation (its session)
// ends; then it returns why. A shard missing from a set is not the
// node's.
func (m *Master) WatchAssignments(ctx context.Context, name, session string, send func(list []*NodeAssignment, version uint64) error) error {
	fail := func(err error, hint string) error {
		return &Error{Op: "WatchAssignments", Client: NodeClientID(name), Err: err, Hint: hint}
	}
	f := m.fleet
	for {
		f.mu.Lock()
		n := f.nodes[name]
		if n == nil || n.session != session || n.owner.Load().State() == 0 {
			f.mu.Unlock()
			return fail(fmt.Errorf("%w: session %.64q of node %q is not registered (the node was offboarded, or another process took its name)", ErrClientOffline, session, name), "register the node again")
		}
		rec := n.owner.Load()
		list := f.assignmentsLocked(name)
		ver := f.version
		wake := n.notify
		f.mu.Unlock()
		if err := send(list, ver); err != nil {
			return err
		}
		if rec.State() == ClientOffline && len(list) == 0 {
			// Told it holds nothing: the incarnation is over.
			return fail(fmt.Errorf("%w: node %q went offline", ErrClientOffline, name), "register the node again")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}

// assignmentsLocked lists what the published table asks of node name.
func (f *fleet) assignmentsLocked(name string) []*NodeAssignment {
	var out []*NodeAssignment
	for e := range f.byNode[name] {
		if a := fleetplan.ForNode(e.pub, name, e.adoptCtx); a != nil {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

// ShardReportKind is what a node says it did with a shard.
type ShardReportKind = masterv1.ShardReport

// ShardReport is a node's report on one shard.
type ShardReport struct {
	Node, Session     string
	Shard, Allocation string
	Term              int64
	Kind              ShardReportKind
	Reason, Err       string
	SuccessorTerm     int64
	HandoffContext    []byte
}

// ReportShard takes a node's report on a shard. A report of a session
// that is not the node's current one is refused (ErrClientOffline). A
// stale grant (the shard's stored terms are above the assignment's) raises
// the term above them, durably, and tells the node again; a drain's
// handoff moves on (source handed off: the target is told to adopt; target
// open: the target owns the shard) or is cancelled (the target failed: the
// source is told to take the shard back).
func (m *Master) ReportShard(ctx context.Context, r ShardReport) error {
	fail := func(err error, hint string) error {
		return &Error{Op: "ReportShard", Client: NodeClientID(r.Node), Err: err, Hint: hint}
	}
	if err := ValidateShardName(r.Shard); err != nil {
		return fail(err, "")
	}
	if err := fleetplan.CheckReportFields(len(r.HandoffContext), len(r.Err), len(r.Reason), len(r.Allocation)); err != nil {
		return fail(err, "")
	}
	f := m.fleet
	m.topo.RLock()
	f.mu.Lock()
	n := f.nodes[r.Node]
	if n == nil || n.session != r.Session || !m.eligibility.ShouldRetain(n) {
		// An offline incarnation's word changes nothing: its shards are
		// being moved, or were.
		f.mu.Unlock()
		m.topo.RUnlock()
		return fail(fmt.Errorf("%w: session %.64q of node %q is not a live incarnation", ErrClientOffline, r.Session, r.Node), "register the node again")
	}
	var changes []change
	e := f.shards[r.Shard]
	if e != nil {
		changes = f.reportLocked(e, r)
		f.routesChangedLocked()
	}
	f.mu.Unlock()
	m.topo.RUnlock()
	return wait(ctx, "ReportShard", f.publish(changes))
}

// reportLocked applies a report to its row (fleetplan.OnReport decides).
func (f *fleet) reportLocked(e *shardEntry, r ShardReport) []change {
	c := e.cur
	step := fleetplan.OnReport(c, e.staleGrants, fleetplan.Report{Node: r.Node, Allocation: r.Allocation, Term: r.Term, Kind: r.Kind,
		Reason: r.Reason, SuccessorTerm: r.SuccessorTerm, HasContext: len(r.HandoffContext) > 0})
	switch step {
	case fleetplan.StepAdopted:
		a := clone(c)
		a.Node, a.Allocation, a.HandoffNode, a.HandoffAllocation, a.Reason = c.GetHandoffNode(), c.GetHandoffAllocation(), "", "", ""
		e.state, e.reason, e.adoptCtx, e.staleGrants = ShardOpen, "", nil, 0
		f.m.log.Info("shard handed off", "shard", c.GetShard(), "term", c.GetTerm(), "from", c.GetNode(), "to", a.GetNode())
		return []change{f.setLocked(e, a)}
	case fleetplan.StepOpen:
		e.state, e.reason, e.staleGrants = ShardOpen, "", 0
		if c.GetHandoffNode() != "" {
			e.state = ShardMoving
		}
	case fleetplan.StepResumed:
		e.state, e.reason = ShardOpen, ""
	case fleetplan.StepCancelHandoff:
		return f.cancelHandoffLocked(e, fmt.Sprintf("handoff to %s failed: %s", r.Node, clip(r.Err)))
	case fleetplan.StepGiveUp:
		e.staleGrants++
		e.state, e.reason = ShardFailed, fmt.Sprintf("gave up after %d raised terms: %s", fleetplan.MaxStaleGrants, clip(r.Err))
	case fleetplan.StepRaiseTerm:
		e.staleGrants++
		a := clone(c)
		a.Term = fleetplan.RaisedTerm(c, r.SuccessorTerm)
		a.Allocation = newAllocation(c.GetNode(), a.Term)
		e.state, e.reason = ShardAssigned, fmt.Sprintf("raised to term %d: %s", a.Term, r.Reason)
		return []change{f.setLocked(e, a)}
	case fleetplan.StepFailed:
		e.state, e.reason = ShardFailed, clip(r.Err)
	case fleetplan.StepFenced:
		e.state, e.reason = ShardFenced, fmt.Sprintf("fenced by term %d, which this master did not grant: %s", r.SuccessorTerm, clip(r.Err))
	case fleetplan.StepHandedOff:
		e.adoptCtx = append([]byte(nil), r.HandoffContext...)
		e.state = ShardMoving
		f.notifyLocked(c.GetHandoffNode())
	case fleetplan.StepStoodDown:
		// The target wrote: the term can no longer be continued by
		// either; move on at a higher term.
		return f.takeoverLocked(e, "", "the source stood down after an aborted handoff")
	case fleetplan.StepClosed:
		e.state = ShardAssigned
	}
	return nil
}

func clip(s string) string {
	if len(s) > 512 {
		return s[:512] + "..."
	}
	return s
}

// cancelHandoffLocked ends a drain's handoff without moving the shard.
func (f *fleet) cancelHandoffLocked(e *shardEntry, why string) []change {
	a := clone(e.cur)
	a.HandoffNode, a.HandoffAllocation, a.Reason = "", "", why
	e.adoptCtx = nil
	e.state, e.reason = ShardAssigned, why
	return []change{f.setLocked(e, a)}
}

// load counts the shards a node owns or is receiving.
// The map is the fleet's own (indexLocked keeps it): read it only.
func (f *fleet) loadLocked() map[string]int { return f.load }

// pickLocked chooses the node a shard goes to (fleetplan.Pick): one
// that eligibility serves, of the shard's store, able to run its
// fencing, other than exclude, least loaded; the node that last lost the
// shard only if no other fits. nil and the reason when none does.
func (f *fleet) pickLocked(e *shardEntry, exclude string) (*node, string) {
	name, why := fleetplan.Pick(f.sortedNamesLocked(), f.candidateLocked, f.loadLocked(), fleetplan.WantOf(e.cur, exclude, e.avoid))
	if name == "" {
		return nil, why
	}
	return f.nodes[name], ""
}

// candidateLocked describes node name for a placement.
func (f *fleet) candidateLocked(name string) fleetplan.Candidate {
	n := f.nodes[name]
	c := fleetplan.Candidate{Name: name, Store: n.rec.GetStore(), Fencing: n.rec.GetFencing()}
	if !f.m.eligibility.CanServe(n) {
		c.NotServing = nodeState(n)
	}
	return c
}

func nodeState(n *node) string {
	if n.rec.GetDraining() {
		return "is draining"
	}
	if s := n.owner.Load().State(); s != 0 {
		return "is " + s.String()
	}
	return "is not registered"
}

// takeoverLocked moves a shard to a live node at a higher term with a new
// allocation (the new owner's claim fences the old one in the store). With
// no node to take it, the shard is left unassigned, durably, with the
// reason (and placed once a node can take it). exclude is the node that
// lost it.
func (f *fleet) takeoverLocked(e *shardEntry, exclude, why string) []change {
	c := e.cur
	if exclude != "" {
		e.avoid = exclude
	}
	n, reason := f.pickLocked(e, exclude)
	a := clone(c)
	a.HandoffNode, a.HandoffAllocation = "", ""
	e.adoptCtx, e.staleGrants = nil, 0
	if n == nil {
		if c.GetNode() == "" && c.GetHandoffNode() == "" {
			e.reason = why + "; " + reason
			return nil // already unassigned: nothing to record
		}
		a.Node, a.Reason = "", why+"; "+reason
		e.state, e.reason = ShardUnassigned, a.Reason
		f.m.log.Warn("shard left unassigned", "shard", c.GetShard(), "term", c.GetTerm(), "why", a.Reason)
		return []change{f.setLocked(e, a)}
	}
	a.Term = c.GetTerm() + 1
	a.Node = n.rec.GetName()
	a.Allocation = newAllocation(a.Node, a.Term)
	a.Reason = why
	e.state, e.reason = ShardAssigned, why
	f.m.metrics.takeovers.Inc()
	f.m.log.Info("shard taken over", "shard", c.GetShard(), "from", c.GetNode(), "term", c.GetTerm(), "to", a.Node, "new_term", a.Term, "why", why)
	return []change{f.setLocked(e, a)}
}

// ownerSuspected moves the shards of a node that just went Suspected and
// asked for an early takeover, and cancels handoffs that targeted it.
func (f *fleet) ownerSuspected(ctx context.Context, r *ClientLivenessRecord) {
	if changes, ok := f.nodeLost(r, false); ok {
		f.monitorWait(ctx, "TakeOver", f.publish(changes))
	}
}

// offboardNode is the fleet's step of an offboarding: every shard the
// node owned moves to a live node at a higher term (auto_restore) or is
// left unassigned with the reason, and handoffs to it are cancelled, all
// durably before the job goes on.
func (f *fleet) offboardNode(ctx context.Context, r *ClientLivenessRecord) error {
	if changes, ok := f.nodeLost(r, true); ok {
		return wait(ctx, "OffboardNode", f.publish(changes))
	}
	return nil
}

// nodeLost records what the node of r going Suspected (or Offline) does
// to the shard rows that name it (fleetplan.OnSuspected, OnOffline); not
// ok when r is not a node's.
func (f *fleet) nodeLost(r *ClientLivenessRecord, offline bool) (changes []change, ok bool) {
	name, ok := strings.CutPrefix(r.ClientID(), NodeClientPrefix)
	if !ok {
		return nil, false
	}
	decide, went, takeover := fleetplan.OnSuspected, "suspected", "suspected (takeover at suspected)"
	if offline {
		decide, went, takeover = fleetplan.OnOffline, "offline", "offline"
	}
	f.m.topo.RLock()
	defer f.m.topo.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.sortedOfLocked(name) {
		switch decide(e.cur, name) {
		case fleetplan.LostTakeOver:
			changes = append(changes, f.takeoverLocked(e, name, fmt.Sprintf("node %s went %s", name, takeover))...)
		case fleetplan.LostUnassign:
			a := clone(e.cur)
			a.Node, a.HandoffNode, a.HandoffAllocation = "", "", ""
			a.Reason = fleetplan.OfflineReason(name)
			e.state, e.reason, e.adoptCtx = ShardUnassigned, a.Reason, nil
			changes = append(changes, f.setLocked(e, a))
		case fleetplan.LostCancelHandoff:
			changes = append(changes, f.cancelHandoffLocked(e, fmt.Sprintf("handoff target %s went %s", name, went))...)
		}
	}
	return changes, true
}

// placePending is the fleet's part of every monitor pass: unassigned
// auto-restore shards go to a node that can take them, shards of
// draining nodes start their handoff, and shards whose owner is Suspected
// and that asked for an early takeover move (when no node could take them
// at the transition).
func (f *fleet) placePending(ctx context.Context) {
	f.m.topo.RLock()
	f.mu.Lock()
	var changes []change
	for _, e := range f.sortedWhereLocked(f.pendingLocked) {
		c := e.cur
		switch f.pendingStepLocked(e) {
		case fleetplan.PendingPlace:
			if n, _ := f.pickLocked(e, ""); n != nil {
				changes = append(changes, f.takeoverLocked(e, "", "placing an unassigned shard")...)
			}
		case fleetplan.PendingStartHandoff:
			changes = append(changes, f.startHandoffLocked(e)...)
		case fleetplan.PendingTakeOver:
			changes = append(changes, f.takeoverLocked(e, c.GetNode(), fmt.Sprintf("node %s is suspected (takeover at suspected)", c.GetNode()))...)
		}
	}
	f.mu.Unlock()
	f.m.topo.RUnlock()
	f.monitorWait(ctx, "PlaceShards", f.publish(changes))
}

// monitorWait is how the liveness monitor waits for the changes a pass
// made to be published: at most one monitor interval. A change is
// published (told to nodes and the routing feed) only once the log holds
// it, whether or not the pass waited; a pass that waited for a slow log
// would stop judging every other client meanwhile, and the next pass
// would take the wait for a stall of the master and stretch every
// window by it (a node went offline 40 s after it was suspected instead
// of 20 s). The pass decides from the recorded table, so the next one
// does not make the same change twice.
func (f *fleet) monitorWait(ctx context.Context, op string, done <-chan error) {
	bound := f.m.live.cfg.MonitorInterval
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			f.m.log.Warn("the liveness monitor's change did not reach the operation log", "op", op, "err", err)
		}
	case <-ctx.Done():
	case <-t.C:
		f.m.metrics.livenessLogWaits.Inc()
		f.m.log.Warn("the operation log has not acknowledged the liveness monitor's change within a monitor interval; the monitor goes on, and the change is published once the log holds it",
			"op", op, "waited", bound)
		go func() {
			if err := <-done; err != nil {
				f.m.log.Warn("the liveness monitor's change did not reach the operation log", "op", op, "err", err)
			}
		}()
	}
}

// pendingLocked reports whether placePending may act on e: an unassigned
// auto-restore shard, or one whose owner is draining or suspected. The
// pass sorts only these, not the table.
func (f *fleet) pendingLocked(e *shardEntry) bool {
	return f.pendingStepLocked(e) != fleetplan.PendingNothing
}

// pendingStepLocked is what the monitor's pass does with e
// (fleetplan.PendingStep).
func (f *fleet) pendingStepLocked(e *shardEntry) fleetplan.Pending {
	var o fleetplan.Owner
	if n := f.nodes[e.cur.GetNode()]; n != nil && e.cur.GetNode() != "" {
		o = fleetplan.Owner{Known: true, Draining: n.rec.GetDraining(), Suspected: n.owner.Load().State() == ClientSuspected}
	}
	return fleetplan.PendingStep(e.cur, o)
}

// sortedOfLocked lists the entries whose recorded assignment names node
// (owner or handoff target), in shard order.
func (f *fleet) sortedOfLocked(node string) []*shardEntry {
	return f.sortedWhereLocked(func(e *shardEntry) bool {
		return e.cur.GetNode() == node || e.cur.GetHandoffNode() == node
	})
}

// sortedWhereLocked lists the entries keep accepts, in shard order.
func (f *fleet) sortedWhereLocked(keep func(*shardEntry) bool) []*shardEntry {
	var out []*shardEntry
	for _, e := range f.shards {
		if keep(e) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cur.GetShard() < out[j].cur.GetShard() })
	return out
}

func (f *fleet) sortedLocked() []*shardEntry {
	out := make([]*shardEntry, 0, len(f.shards))
	for _, e := range f.shards {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cur.GetShard() < out[j].cur.GetShard() })
	return out
}

// startHandoffLocked records a drain's handoff of the shard to a node
// that can take it (same term, new allocation there).
func (f *fleet) startHandoffLocked(e *shardEntry) []change {
	c := e.cur
	if why := fleetplan.HandoffBlocked(c); why != "" {
		e.reason = why
		return nil
	}
	n, reason := f.pickLocked(e, c.GetNode())
	if n == nil {
		e.reason = "drain waiting: " + reason
		return nil
	}
	return []change{f.handoffLocked(e, n, fmt.Sprintf("handing off to %s", n.rec.GetName()))}
}

// handoffLocked records the handoff of the shard to node n: same term, a
// new allocation there. The owner hands off, n adopts and then owns the
// shard; a cancelled handoff leaves it with the owner (cancelHandoffLocked).
func (f *fleet) handoffLocked(e *shardEntry, n *node, why string) change {
	a := clone(e.cur)
	a.HandoffNode = n.rec.GetName()
	a.HandoffAllocation = newAllocation(a.HandoffNode, a.GetTerm())
	a.Reason = ""
	e.state, e.reason, e.adoptCtx = ShardMoving, why, nil
	return f.setLocked(e, a)
}

// AssignRequest puts a shard in the table.
type AssignRequest struct {
	Shard string
	// Node to open it on; "" lets the master choose an Active node.
	Node string
	// Term to open at; 0 means 1.
	Term int64
	// Settings are what the owner opens the shard with (zero fields take
	// the sidecar's defaults).
	Settings            *sidecarv1.ShardSettings
	AutoRestore         bool
	TakeoverAtSuspected bool
	// Warm: the owner opens the shard warm (every takeover too).
	Warm bool
}

// AssignShard puts a shard in the table and returns once the assignment is
// durable (the node is told then). auto_restore is refused for a shard
// that cannot be fenced: an unfenced shard, or a node whose store did not
// pass the precondition probe.
func (m *Master) AssignShard(ctx context.Context, req AssignRequest) (ShardInfo, error) {
	fail := func(err error, hint string) (ShardInfo, error) {
		return ShardInfo{}, &Error{Op: "AssignShard", Shard: req.Shard, Err: err, Hint: hint}
	}
	if hint, err := fleetplan.CheckAssign(fleetplan.Assign{Shard: req.Shard, Node: req.Node, Term: req.Term, Settings: req.Settings,
		AutoRestore: req.AutoRestore, TakeoverAtSuspected: req.TakeoverAtSuspected}); err != nil {
		return fail(err, hint)
	}
	settings := req.Settings
	fenced := !settings.GetFencingDisabled()
	f := m.fleet
	m.topo.RLock()
	f.mu.Lock()
	e := &shardEntry{cur: &masterv1.ShardAssignment{Shard: req.Shard, Settings: settings, AutoRestore: req.AutoRestore, TakeoverAtSuspected: req.TakeoverAtSuspected, Warm: req.Warm}}
	n, refused := f.assignTargetLocked(e, req.Node, fenced)
	if refused != nil {
		f.mu.Unlock()
		m.topo.RUnlock()
		return ShardInfo{}, fleetRefusal("AssignShard", req.Shard, refused)
	}
	a := e.cur
	a.Node = n.rec.GetName()
	a.Store = n.rec.GetStore()
	a.Term = max(req.Term, 1)
	a.Allocation = newAllocation(a.Node, a.Term)
	e.state = ShardAssigned
	if old := f.shards[req.Shard]; old != nil {
		f.indexLocked(old, true) // a removed row whose removal is on its way to the log
	}
	f.shards[req.Shard] = e
	ch := f.setLocked(e, a)
	f.mu.Unlock()
	m.topo.RUnlock()
	if err := wait(ctx, "AssignShard", f.publish([]change{ch})); err != nil {
		return ShardInfo{}, err
	}
	return m.ShardInfo(req.Shard)
}

// assignTargetLocked is the node a new row e goes to: the node named,
// or the one pickLocked chooses; refused when the table holds the shard
// or no node can take it.
func (f *fleet) assignTargetLocked(e *shardEntry, name string, fenced bool) (*node, *fleetplan.Refusal) {
	if old := f.shards[e.cur.GetShard()]; old != nil {
		if r := fleetplan.Occupied(old.cur); r != nil {
			return nil, r
		}
	}
	if name != "" {
		if r := fleetplan.CheckAssignTarget(name, f.targetLocked(name), fenced); r != nil {
			return nil, r
		}
		return f.nodes[name], nil
	}
	n, reason := f.pickLocked(e, "")
	if n == nil {
		return nil, &fleetplan.Refusal{Kind: fleetplan.NotEligible, Detail: reason, Hint: "start a sidecar with --master, or wait for one to register"}
	}
	return n, nil
}

// UnassignShard takes a shard out of the table, durably; its owner then
// closes it (the term stays claimed in the store).
func (m *Master) UnassignShard(ctx context.Context, shard string) error {
	f := m.fleet
	m.topo.RLock()
	f.mu.Lock()
	e := f.shards[shard]
	if e == nil || e.cur.GetRemoved() {
		f.mu.Unlock()
		m.topo.RUnlock()
		return &Error{Op: "UnassignShard", Shard: shard, Err: ErrShardNotAssigned, Hint: "list the shards with shardfence master shards"}
	}
	a := clone(e.cur)
	a.Removed = true
	ch := f.setLocked(e, a)
	f.mu.Unlock()
	m.topo.RUnlock()
	return wait(ctx, "UnassignShard", f.publish([]change{ch}))
}

// DrainNode marks a node draining (durably: it takes no shard) and starts
// moving its shards off with the source-performed handoff, same term. It
// returns how many shards are moving and how many wait for a target (the
// monitor retries those). undo ends the drain.
func (m *Master) DrainNode(ctx context.Context, name string, undo bool) (moving, waiting int, err error) {
	if err := ValidateNodeName(name); err != nil {
		return 0, 0, &Error{Op: "DrainNode", Client: NodeClientID(name), Err: err}
	}
	f := m.fleet
	m.topo.RLock()
	f.mu.Lock()
	n := f.nodes[name]
	if n == nil || n.rec == nil {
		f.mu.Unlock()
		m.topo.RUnlock()
		return 0, 0, &Error{Op: "DrainNode", Client: NodeClientID(name), Err: fmt.Errorf("%w: node %q is not registered", ErrNodeNotEligible, name), Hint: "list the nodes with shardfence master nodes"}
	}
	var t Ticket
	if n.rec.GetDraining() == undo {
		rec := proto.Clone(n.rec).(*masterv1.NodeRecord)
		rec.Draining = !undo
		n.rec = rec
		t = m.record(&Op{Kind: OpNode, Node: rec})
	}
	var changes []change
	if !undo {
		for _, e := range f.sortedLocked() {
			switch fleetplan.DrainStep(e.cur, name) {
			case fleetplan.DrainNothing:
				continue
			case fleetplan.DrainUnderWay:
				moving++
				continue
			}
			ch := f.startHandoffLocked(e)
			if len(ch) == 0 {
				waiting++
			} else {
				moving++
			}
			changes = append(changes, ch...)
		}
	}
	f.mu.Unlock()
	m.topo.RUnlock()
	if err := durable(ctx, &Error{Op: "DrainNode", Client: NodeClientID(name)}, t); err != nil {
		return 0, 0, err
	}
	return moving, waiting, wait(ctx, "DrainNode", f.publish(changes))
}

// MoveShard moves an open shard from its owner to node with the drain's
// handoff: same term, a new allocation on node; the owner hands off, node
// adopts and owns the shard once it reports it open (the row shows moving
// until then). If node cannot adopt, goes suspected or offline, the
// handoff is cancelled and the shard stays with (or returns to) its owner,
// as a drain's does; nothing retries the move. Refused, with nothing
// recorded: a shard not in the table (ErrShardNotAssigned), not open
// (ErrShardNotOpen), already moving (ErrShardMoving), or already on node
// (ErrShardAssigned); a node not registered, not active, draining, of
// another store or without fencing (ErrNodeNotEligible).
func (m *Master) MoveShard(ctx context.Context, shard, node string) (ShardInfo, error) {
	if err := ValidateShardName(shard); err != nil {
		return ShardInfo{}, &Error{Op: "MoveShard", Shard: shard, Err: err}
	}
	if err := ValidateNodeName(node); err != nil {
		return ShardInfo{}, &Error{Op: "MoveShard", Shard: shard, Err: err}
	}
	f := m.fleet
	m.topo.RLock()
	f.mu.Lock()
	ch, err := f.moveLocked(shard, node)
	f.mu.Unlock()
	m.topo.RUnlock()
	if err != nil {
		return ShardInfo{}, err
	}
	if err := wait(ctx, "MoveShard", f.publish([]change{ch})); err != nil {
		return ShardInfo{}, err
	}
	return m.ShardInfo(shard)
}

// moveLocked checks a move (fleetplan.CheckMove) and records its
// handoff.
func (f *fleet) moveLocked(shard, node string) (change, error) {
	e := f.shards[shard]
	mv := fleetplan.Move{To: node, Target: f.targetLocked(node)}
	if e != nil && !e.cur.GetRemoved() {
		mv.Row, mv.State = e.cur, e.state
		if owner := f.nodes[e.cur.GetNode()]; owner == nil {
			mv.OwnerState = "is not registered"
		} else if st := owner.owner.Load().State(); st != ClientActive {
			mv.OwnerState = "is " + st.String()
		}
	}
	if r := fleetplan.CheckMove(mv); r != nil {
		return change{}, fleetRefusal("MoveShard", shard, r)
	}
	c := e.cur
	f.m.log.Info("moving shard", "shard", shard, "term", c.GetTerm(), "from", c.GetNode(), "to", node)
	return f.handoffLocked(e, f.nodes[node], fmt.Sprintf("moving to %s (master move)", node)), nil
}

// targetLocked describes node name as a named target, nil when it is not
// registered.
func (f *fleet) targetLocked(name string) *fleetplan.Candidate {
	if n := f.nodes[name]; n == nil || n.rec == nil {
		return nil
	}
	c := f.candidateLocked(name)
	return &c
}

// refusalSentinel is the sentinel of each kind of refusal.
var refusalSentinel = map[fleetplan.Kind]error{
	fleetplan.NotAssigned: ErrShardNotAssigned,
	fleetplan.Moving:      ErrShardMoving,
	fleetplan.NotOpen:     ErrShardNotOpen,
	fleetplan.Assigned:    ErrShardAssigned,
	fleetplan.Invalid:     ErrInvalidArgument,
	fleetplan.NotEligible: ErrNodeNotEligible,
}

// fleetRefusal is the master's error for a refused request on shard.
func fleetRefusal(op, shard string, r *fleetplan.Refusal) error {
	err := refusalSentinel[r.Kind]
	if r.Detail != "" {
		err = fmt.Errorf("%w: %s", err, r.Detail)
	}
	return &Error{Op: op, Shard: shard, Err: err, Hint: r.Hint}
}

// NodeInfo is one node, for status.
type NodeInfo struct {
	Name, Addr, Store string
	Fencing, Draining bool
	State             ClientState
	SinceSignal       time.Duration // -1 when unknown
	Incarnation       uint64
	Shards            int
	Offboarding       string
}

// Nodes lists the registered nodes with their liveness.
func (m *Master) Nodes() []NodeInfo {
	live := map[string]ClientLiveness{}
	for _, c := range m.live.Snapshot() {
		live[c.Client] = c
	}
	f := m.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	load := f.loadLocked()
	out := make([]NodeInfo, 0, len(f.nodes))
	for name, n := range f.nodes {
		if n.rec == nil {
			continue
		}
		ni := NodeInfo{Name: name, Addr: n.rec.GetAddr(), Store: n.rec.GetStore(), Fencing: n.rec.GetFencing(), Draining: n.rec.GetDraining(),
			SinceSignal: -1, Shards: load[name]}
		if c, ok := live[NodeClientID(name)]; ok && n.owner.Load() != nil && n.owner.Load().Incarnation() == c.Incarnation {
			ni.State, ni.SinceSignal, ni.Incarnation, ni.Offboarding = c.State, c.SinceSignal, c.Incarnation, c.Offboarding
		}
		out = append(out, ni)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ShardInfo is one row of the table, for status.
type ShardInfo struct {
	Assignment *masterv1.ShardAssignment
	Addr       string
	State      string
	Reason     string
	OwnerState ClientState
	Durable    bool
}

// Shards lists the table, newest recorded rows.
func (m *Master) Shards() []ShardInfo {
	f := m.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ShardInfo, 0, len(f.shards))
	for _, e := range f.sortedLocked() {
		if !e.cur.GetRemoved() {
			out = append(out, f.infoLocked(e))
		}
	}
	return out
}

// ShardInfo returns one row.
func (m *Master) ShardInfo(shard string) (ShardInfo, error) {
	f := m.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.shards[shard]
	if e == nil || e.cur.GetRemoved() {
		return ShardInfo{}, &Error{Op: "ShardInfo", Shard: shard, Err: ErrShardNotAssigned}
	}
	return f.infoLocked(e), nil
}

func (f *fleet) infoLocked(e *shardEntry) ShardInfo {
	si := ShardInfo{Assignment: clone(e.cur), State: e.state, Reason: e.reason, Durable: e.pubVer == e.curVer}
	if si.State == "" {
		si.State = ShardAssigned
	}
	if e.cur.GetNode() == "" {
		si.State = ShardUnassigned
	}
	if si.Reason == "" {
		si.Reason = e.cur.GetReason()
	}
	if n := f.nodes[e.cur.GetNode()]; n != nil {
		si.Addr = n.rec.GetAddr()
		si.OwnerState = n.owner.Load().State()
	}
	return si
}

// registered reports whether client is a node registered by rec.
func (f *fleet) registered(client string, rec *ClientLivenessRecord) bool {
	name, ok := strings.CutPrefix(client, NodeClientPrefix)
	if !ok {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[name]
	return n != nil && n.rec != nil && n.owner.Load() == rec
}

// nodeClients lists the client ids of the registered nodes.
func (f *fleet) nodeClients() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name, n := range f.nodes {
		if n.rec != nil {
			out = append(out, NodeClientID(name))
		}
	}
	return out
}

// rebindOwners points every node at its client's current incarnation
// (after RestoreLiveness).
func (f *fleet) rebindOwners() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, n := range f.nodes {
		if n.owner.Load() == nil {
			n.owner.Store(f.m.live.Record(NodeClientID(name)))
		}
	}
}

// replay applies a logged fleet change (a standby, a restart's replay):
// the row becomes durable as recorded, nobody is told.
func (f *fleet) replay(op *Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op.Kind {
	case OpNode:
		n := f.nodeLocked(op.Node.GetName())
		n.rec = op.Node
	case OpAssignShard:
		a := op.Shard
		if a.GetRemoved() {
			if e := f.shards[a.GetShard()]; e != nil {
				f.indexLocked(e, true)
			}
			delete(f.shards, a.GetShard())
			return
		}
		f.version++
		e := f.shards[a.GetShard()]
		if e == nil {
			e = &shardEntry{}
			f.shards[a.GetShard()] = e
		}
		e.cur, e.pub, e.curVer, e.pubVer = a, a, f.version, f.version
		e.state, e.reason = ShardAssigned, ""
		f.indexLocked(e, false)
	}
}

// freezeLocked copies the table for a complete snapshot. The caller holds
// topo exclusively, so no change is in flight.
func (f *fleet) freeze() ([]*masterv1.NodeRecord, []*masterv1.ShardAssignment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var nodes []*masterv1.NodeRecord
	for _, n := range f.nodes {
		if n.rec != nil {
			nodes = append(nodes, n.rec)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].GetName() < nodes[j].GetName() })
	shards := make([]*masterv1.ShardAssignment, 0, len(f.shards))
	for _, e := range f.sortedLocked() {
		if !e.cur.GetRemoved() {
			shards = append(shards, e.cur)
		}
	}
	return nodes, shards
}

// install loads a restored table (a complete snapshot).
func (f *fleet) install(nodes []*masterv1.NodeRecord, shards []*masterv1.ShardAssignment) {
	for _, n := range nodes {
		f.replay(&Op{Kind: OpNode, Node: n})
	}
	for _, a := range shards {
		f.replay(&Op{Kind: OpAssignShard, Shard: a})
	}
}
