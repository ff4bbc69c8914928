package master

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ClientState is a client incarnation's liveness.
type ClientState uint32

// Liveness states (Active -> Suspected -> Offline). The zero value means
// no record: the master does not know the client (or forgot it after its
// offboarding completed).
const (
	// ClientActive: the incarnation's resources may take new work.
	ClientActive ClientState = iota + 1
	// ClientSuspected: its active TTL ran out without a liveness signal.
	// Its resources are retained, but take no new allocation, descriptor
	// or shard; a liveness signal makes it Active again, with nothing
	// cleaned up.
	ClientSuspected
	// ClientOffline: its suspicion TTL ran out too. Terminal for the
	// incarnation: it is being offboarded, and until that completes the
	// record is a barrier to Mount, ReMount and RegisterNode of the
	// client (Ping answers NEED_REMOUNT).
	ClientOffline
)

func (s ClientState) String() string {
	switch s {
	case 0:
		return "unknown"
	case ClientActive:
		return "active"
	case ClientSuspected:
		return "suspected"
	case ClientOffline:
		return "offline"
	}
	return fmt.Sprintf("ClientState(%d)", uint32(s))
}

// ClientLivenessRecord is the liveness of one client incarnation. An
// incarnation starts with the client's first successful mount (or node
// registration) the master knows of, or, after a promotion or restart,
// with the restore; it ends when its offboarding completes. Resources
// keep the record that created them (a segment its mounting incarnation,
// a node its registering one), so a later incarnation of the same client
// id never makes them serve again.
//
// Times are steady-clock readings of the master's Clock: a liveness
// window is never measured on the wall clock, and it never travels to
// another process (a restored client starts a fresh window).
type ClientLivenessRecord struct {
	client      string
	incarnation uint64
	restored    bool
	state       atomic.Uint32

	// Guarded by Liveness.mu.
	lastSignal  SteadyTime // the last Ping or successful mount
	suspectedAt SteadyTime // when the master committed Active -> Suspected
	offlineAt   SteadyTime // when it committed Suspected -> Offline
	recoveries  uint64     // Suspected -> Active transitions
	session     string     // a node's process session, "" for memory clients
	job         *ClientOffboardingJob
}

// ClientID is the client the record belongs to.
func (r *ClientLivenessRecord) ClientID() string { return r.client }

// Incarnation is the number this master gave the incarnation: unique and
// increasing across all its clients, process-local (a promoted master
// numbers afresh).
func (r *ClientLivenessRecord) Incarnation() uint64 { return r.incarnation }

// State is the incarnation's liveness; a nil record is unknown (0).
func (r *ClientLivenessRecord) State() ClientState {
	if r == nil {
		return 0
	}
	return ClientState(r.state.Load())
}

// Restored reports whether the incarnation was rebuilt by a promotion or
// restart rather than started by a mount.
func (r *ClientLivenessRecord) Restored() bool { return r.restored }

// LivenessConfig are the liveness TTLs and the monitor's pace.
type LivenessConfig struct {
	// ActiveTTL: an Active client with no liveness signal for this long
	// becomes Suspected (client_active_ttl_sec, default 10 s).
	ActiveTTL time.Duration
	// SuspicionTTL: a Suspected client becomes Offline this long after
	// the master committed it Suspected (client_suspicion_ttl_sec,
	// default 20 s).
	SuspicionTTL time.Duration
	// MonitorInterval is how often the monitor judges the records.
	// Default: a tenth of the shorter TTL, within 10 ms..1 s.
	MonitorInterval time.Duration
	// StallAfter: a gap this long between two monitor passes means the
	// monitor itself was not observing (the process was paused, starved
	// or its clock stopped); the gap is not counted against any client.
	// Default three monitor intervals.
	StallAfter time.Duration
}

// Default liveness TTLs (the seed's client_active_ttl_sec and
// client_suspicion_ttl_sec).
const (
	DefaultClientActiveTTL    = 10 * time.Second
	DefaultClientSuspicionTTL = 20 * time.Second
)

func (c LivenessConfig) withDefaults() LivenessConfig {
	if c.ActiveTTL == 0 {
		c.ActiveTTL = DefaultClientActiveTTL
	}
	if c.SuspicionTTL == 0 {
		c.SuspicionTTL = DefaultClientSuspicionTTL
	}
	if c.MonitorInterval == 0 {
		c.MonitorInterval = min(max(min(c.ActiveTTL, c.SuspicionTTL)/10, 10*time.Millisecond), time.Second)
	}
	if c.StallAfter == 0 {
		c.StallAfter = 3 * c.MonitorInterval
	}
	return c
}

// Bounds of LivenessConfig.MonitorInterval.
const (
	MinMonitorInterval = 10 * time.Millisecond
	MaxMonitorInterval = time.Second
)

func (c LivenessConfig) validate() error {
	switch {
	case c.ActiveTTL < 10*time.Millisecond || c.ActiveTTL > 24*time.Hour:
		return fmt.Errorf("%w: client active TTL %v is outside 10ms..24h", ErrInvalidArgument, c.ActiveTTL)
	case c.SuspicionTTL < 10*time.Millisecond || c.SuspicionTTL > 24*time.Hour:
		return fmt.Errorf("%w: client suspicion TTL %v is outside 10ms..24h", ErrInvalidArgument, c.SuspicionTTL)
	case c.MonitorInterval < MinMonitorInterval || c.MonitorInterval > MaxMonitorInterval:
		// Faster only burns a core (1ns was accepted); slower judges
		// clients late.
		return fmt.Errorf("%w: liveness monitor interval %v is outside %v..%v", ErrInvalidArgument, c.MonitorInterval, MinMonitorInterval, MaxMonitorInterval)
	case c.MonitorInterval > c.ActiveTTL:
		return fmt.Errorf("%w: liveness monitor interval %v must be at most the active TTL %v", ErrInvalidArgument, c.MonitorInterval, c.ActiveTTL)
	case c.StallAfter <= c.MonitorInterval:
		return fmt.Errorf("%w: liveness stall threshold %v must exceed the monitor interval %v", ErrInvalidArgument, c.StallAfter, c.MonitorInterval)
	}
	return nil
}

// LivenessTTLFlags are the TTL settings as an operator gave them: nil
// means not given.
type LivenessTTLFlags struct {
	Active    *time.Duration // client_active_ttl_sec, --client-active-ttl
	Legacy    *time.Duration // client_live_ttl_sec, --client_ttl (deprecated aliases of Active)
	Suspicion *time.Duration // client_suspicion_ttl_sec, --client-suspicion-ttl
}

// ResolveLivenessTTLs applies the compatibility rules: the active TTL is
// the explicit one, else the deprecated alias, else 10 s; the suspicion
// TTL is the explicit one, else, when an active or legacy TTL was given,
// the resolved active TTL (so an operator who only ever set
// client_live_ttl_sec keeps a window close to the one they chose), else
// 20 s. warnings say what the operator should change.
func ResolveLivenessTTLs(f LivenessTTLFlags) (active, suspicion time.Duration, warnings []string) {
	active = DefaultClientActiveTTL
	switch {
	case f.Active != nil:
		active = *f.Active
		if f.Legacy != nil && *f.Legacy != *f.Active {
			warnings = append(warnings, fmt.Sprintf("the deprecated client_live_ttl_sec/--client_ttl (%v) is ignored: client_active_ttl_sec (%v) is set", *f.Legacy, *f.Active))
		}
	case f.Legacy != nil:
		active = *f.Legacy
		warnings = append(warnings, "client_live_ttl_sec/--client_ttl is deprecated: use client_active_ttl_sec (--client-active-ttl)")
	}
	switch {
	case f.Suspicion != nil:
		suspicion = *f.Suspicion
	case f.Active != nil || f.Legacy != nil:
		suspicion = active
	default:
		suspicion = DefaultClientSuspicionTTL
	}
	return active, suspicion, warnings
}

// Liveness holds the liveness record of every known client incarnation
// and judges them. It is process-local: nothing of it is logged, and a
// promoted or restarted master rebuilds it (RestoreLiveness).
type Liveness struct {
	cfg   LivenessConfig
	clock Clock

	mu       sync.Mutex
	records  map[string]*ClientLivenessRecord // current incarnation per client
	nextInc  uint64
	lastPass SteadyTime // the last monitor pass; 0 before the first
	stalls   uint64
	// unheard: the records were restored (a promotion or restart) and no
	// client has signalled since. Until one does, restored windows do
	// not run: a master that hears from nobody cannot tell dead clients
	// from its own isolation (elected while cut off from the nodes, it
	// would otherwise move every shard the moment the cut heals).
	unheard bool
}

func newLiveness(cfg LivenessConfig, clock Clock) *Liveness {
	return &Liveness{cfg: cfg, clock: clock, records: map[string]*ClientLivenessRecord{}}
}

// Record returns the client's current incarnation, nil if none.
func (l *Liveness) Record(client string) *ClientLivenessRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records[client]
}

// ClientState returns the liveness of client's current incarnation (0:
// unknown).
func (l *Liveness) ClientState(client string) ClientState { return l.Record(client).State() }

func (l *Liveness) newRecordLocked(client string, now SteadyTime, restored bool) *ClientLivenessRecord {
	l.nextInc++
	r := &ClientLivenessRecord{client: client, incarnation: l.nextInc, restored: restored, lastSignal: now}
	r.state.Store(uint32(ClientActive))
	l.records[client] = r
	return r
}

// livenessRecovery is a Suspected -> Active transition a signal
// committed, as the log reports it: taken under the liveness lock,
// written (noteRecovery) once the caller holds no lock.
type livenessRecovery struct {
	client       string
	incarnation  uint64
	sinceSignal  time.Duration // since the signal before this one
	suspectedFor time.Duration // since the monitor committed it Suspected
}

// signal is a liveness signal (a Ping, or a successful mount when mount
// is set). A Suspected incarnation recovers with nothing cleaned up. An
// unknown client gets a new incarnation only from a mount; an Offline one
// never does until its offboarding completed. It returns the client's
// current record (nil for a Ping from an unknown client), the recovery
// the signal committed (nil if none) and whether the signal was refused
// by the Offline barrier.
func (l *Liveness) signal(client string, mount bool) (r *ClientLivenessRecord, rc *livenessRecovery, err error) {
	now := l.clock.Steady()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.heardLocked(now)
	r = l.records[client]
	switch {
	case r == nil && mount:
		return l.newRecordLocked(client, now, false), nil, nil
	case r == nil:
		return nil, nil, nil
	}
	switch r.State() {
	case ClientOffline:
		return r, nil, fmt.Errorf("%w: incarnation %d went offline %v ago and is still being offboarded", ErrClientOffline, r.incarnation, toDuration(now-r.offlineAt).Round(time.Millisecond))
	case ClientSuspected:
		rc = &livenessRecovery{client: r.client, incarnation: r.incarnation,
			sinceSignal: toDuration(now - r.lastSignal), suspectedFor: toDuration(now - r.suspectedAt)}
		l.setLocked(r, ClientActive, now)
		r.recoveries++
	}
	r.lastSignal = max(r.lastSignal, now)
	return r, rc, nil
}

// heardLocked notes a signal at now. The first after a restore starts
// every restored window that has not run yet: each restored client gets a
// whole active TTL from the first moment the master is known to be
// reachable. The caller holds l.mu.
func (l *Liveness) heardLocked(now SteadyTime) {
	if !l.unheard {
		return
	}
	l.unheard = false
	for _, r := range l.records {
		if r.restored && r.State() == ClientActive {
			r.lastSignal = max(r.lastSignal, now)
		}
	}
}

// noteRecovery counts and logs a recovery a signal committed (nothing for
// nil). The caller holds no lock: the log is I/O.
func (m *Master) noteRecovery(rc *livenessRecovery) {
	if rc == nil {
		return
	}
	m.metrics.clientTransitions.WithLabelValues("suspected", "active").Inc()
	m.log.Info("client active again: a liveness signal came within its suspicion window, nothing was cleaned up",
		"client", rc.client, "incarnation", rc.incarnation, "since_signal", rc.sinceSignal.Round(time.Millisecond),
		"suspected_for", rc.suspectedFor.Round(time.Millisecond), "client_suspicion_ttl", m.live.cfg.SuspicionTTL)
}

// held reports whether r is an active incarnation that signalled within
// hold, and how long ago it last did.
func (l *Liveness) held(r *ClientLivenessRecord, hold time.Duration) (quiet time.Duration, ok bool) {
	if r == nil || r.State() != ClientActive {
		return 0, false
	}
	now := l.clock.Steady()
	l.mu.Lock()
	quiet = toDuration(now - r.lastSignal)
	l.mu.Unlock()
	return quiet, quiet < hold
}

// setLocked commits a transition. The caller holds l.mu.
func (l *Liveness) setLocked(r *ClientLivenessRecord, to ClientState, now SteadyTime) {
	switch to {
	case ClientSuspected:
		r.suspectedAt = now
	case ClientOffline:
		r.offlineAt = now
	}
	r.state.Store(uint32(to))
}

// LivenessPass is what one monitor pass did.
type LivenessPass struct {
	// Stalled: the gap since the previous pass was longer than
	// StallAfter, and Unobserved of it was not counted against anyone.
	Stalled    bool
	Unobserved time.Duration
	// Suspected are the records this pass committed Suspected; Offline
	// those whose suspicion window ran out, for which the pass prepared
	// an offboarding (nil entries are gone: a signal recovered them in
	// between).
	Suspected []*ClientLivenessRecord
	Offline   []*ClientLivenessRecord

	// sinceSignal is, for each of Suspected, how long it had been silent
	// when the pass judged it (for the log).
	sinceSignal []time.Duration
}

// pass judges every record at now. A Suspected record's window runs from
// the moment this monitor committed it Suspected, never from when its
// active TTL ran out, so a late pass never shortens it. If the monitor
// itself was not observing (a gap past StallAfter since its last pass:
// the master was paused or starved), the unobserved part of the gap is
// added to every window that was running then: a client keeps, after the
// stall, the window it had left when the master last looked. The
// Suspected -> Offline transition is committed by
// PrepareClientOffboarding, which re-checks the record under the same
// lock a signal takes.
func (l *Liveness) pass(now SteadyTime) LivenessPass {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p LivenessPass
	if l.lastPass != 0 {
		gap := toDuration(now - l.lastPass)
		if gap > l.cfg.StallAfter {
			p.Stalled = true
			p.Unobserved = gap - l.cfg.MonitorInterval
			l.stalls++
			// Every window, including one a signal restarted between
			// the last pass and the stall, moves by the unobserved time;
			// none past now (a signal that came in while only the
			// monitor was starved gets a whole window from now).
			for _, r := range l.records {
				r.lastSignal = min(r.lastSignal.Add(p.Unobserved), now)
				if r.State() == ClientSuspected {
					r.suspectedAt = min(r.suspectedAt.Add(p.Unobserved), now)
				}
			}
		}
	}
	l.lastPass = now
	for _, r := range l.records {
		switch r.State() {
		case ClientActive:
			if l.unheard && r.restored {
				// Nobody reached this master since it restored its
				// records: a window runs only once one did.
				r.lastSignal = now
				continue
			}
			if toDuration(now-r.lastSignal) >= l.cfg.ActiveTTL {
				l.setLocked(r, ClientSuspected, now)
				p.Suspected = append(p.Suspected, r)
			}
		case ClientSuspected:
			if toDuration(now-r.suspectedAt) >= l.cfg.SuspicionTTL {
				p.Offline = append(p.Offline, r)
			}
		}
	}
	byClient := func(rs []*ClientLivenessRecord) {
		sort.Slice(rs, func(i, j int) bool { return rs[i].client < rs[j].client })
	}
	byClient(p.Suspected)
	byClient(p.Offline)
	for _, r := range p.Suspected {
		p.sinceSignal = append(p.sinceSignal, toDuration(now-r.lastSignal))
	}
	return p
}

// forget removes r once its offboarding completed; a later mount starts a
// new incarnation.
func (l *Liveness) forget(r *ClientLivenessRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[r.client] == r {
		delete(l.records, r.client)
	}
}

// restore starts a fresh Active incarnation for every client in ids that
// has no record (after a promotion or restart): the old master's windows
// are not carried over, so a restored client gets a whole active TTL to
// ping or remount.
func (l *Liveness) restore(ids []string) int {
	now := l.clock.Steady()
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		if l.records[id] == nil {
			l.newRecordLocked(id, now, true)
			n++
		}
	}
	if n > 0 {
		l.unheard = true
	}
	return n
}

// replace starts a new incarnation for a client whose process restarted
// (a node registering with a new session while its old incarnation is
// still Active or Suspected): the old record ends without offboarding,
// since the new process takes its place at once.
func (l *Liveness) replace(old *ClientLivenessRecord) *ClientLivenessRecord {
	now := l.clock.Steady()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[old.client] != old || old.State() == ClientOffline {
		return l.records[old.client]
	}
	old.state.Store(uint32(ClientOffline))
	old.offlineAt = now
	return l.newRecordLocked(old.client, now, false)
}

// ClientLiveness is a point-in-time view of one record, for status.
type ClientLiveness struct {
	Client      string
	Incarnation uint64
	State       ClientState
	Restored    bool
	// SinceSignal is the time since the last liveness signal; InState the
	// time since the current state was committed (since the signal for
	// Active).
	SinceSignal time.Duration
	InState     time.Duration
	Recoveries  uint64
	// Offboarding describes an Offline record's job, "" otherwise.
	Offboarding string
}

// Snapshot lists every record, by client.
func (l *Liveness) Snapshot() []ClientLiveness {
	now := l.clock.Steady()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ClientLiveness, 0, len(l.records))
	for _, r := range l.records {
		c := ClientLiveness{Client: r.client, Incarnation: r.incarnation, State: r.State(), Restored: r.restored,
			SinceSignal: toDuration(now - r.lastSignal), Recoveries: r.recoveries}
		switch c.State {
		case ClientActive:
			c.InState = c.SinceSignal
		case ClientSuspected:
			c.InState = toDuration(now - r.suspectedAt)
		case ClientOffline:
			c.InState = toDuration(now - r.offlineAt)
			if r.job != nil {
				c.Offboarding = r.job.describe()
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client < out[j].Client })
	return out
}

// Config returns the effective liveness configuration.
func (l *Liveness) Config() LivenessConfig { return l.cfg }

// counts returns how many records are in each state and the transitions
// committed so far, for metrics.
func (l *Liveness) counts() (states [4]int, stalls uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		states[r.State()]++
	}
	return states, l.stalls
}

// RunLiveness runs the liveness monitor until ctx ends: every monitor
// interval it judges the records, prepares the offboarding of every
// client that went Offline (which isolates it at once) and hands the job
// to the offboarding executor, and tells the fleet which nodes went
// Suspected. The asynchronous executor drains when ctx ends. Only a
// primary runs it: a standby judges nobody.
func (m *Master) RunLiveness(ctx context.Context) {
	t := time.NewTicker(m.live.cfg.MonitorInterval)
	defer t.Stop()
	exec := m.offboarding
	stopped := make(chan struct{})
	if exec.async {
		go func() {
			defer close(stopped)
			exec.run(ctx)
		}()
	} else {
		close(stopped)
	}
	for {
		select {
		case <-ctx.Done():
			<-stopped
			return
		case <-t.C:
			m.CheckLiveness(ctx)
		}
	}
}

// CheckLiveness is one monitor pass at the clock's current steady time:
// it commits the transitions that are due, prepares and submits the
// offboarding of every client that went Offline, retries synchronous
// jobs that failed before, and starts the takeovers of shards whose
// owner went Suspected. Tests call it directly with a fake clock.
func (m *Master) CheckLiveness(ctx context.Context) LivenessPass {
	p := m.live.pass(m.clock.Steady())
	if p.Stalled {
		m.metrics.livenessStalls.Inc()
		m.log.Warn("the liveness monitor did not observe for a while (the master was paused or starved); that time is not counted against any client",
			"unobserved", p.Unobserved.Round(time.Millisecond))
	}
	cfg := m.live.cfg
	for i, r := range p.Suspected {
		m.metrics.clientTransitions.WithLabelValues("active", "suspected").Inc()
		m.log.Warn("client suspected: no liveness signal within its active TTL; it goes offline and is offboarded unless it signals within its suspicion TTL",
			"client", r.client, "incarnation", r.incarnation, "since_signal", p.sinceSignal[i].Round(time.Millisecond),
			"client_active_ttl", cfg.ActiveTTL, "client_suspicion_ttl", cfg.SuspicionTTL)
		m.fleet.ownerSuspected(ctx, r)
	}
	for _, r := range p.Offline {
		if job := m.PrepareClientOffboarding(r); job != nil {
			m.metrics.clientTransitions.WithLabelValues("suspected", "offline").Inc()
			m.log.Warn("client offline: no liveness signal within its suspicion TTL; offboarding it",
				"client", r.client, "incarnation", r.incarnation, "since_signal", job.sinceSignal.Round(time.Millisecond),
				"suspected_for", job.suspectedFor.Round(time.Millisecond), "client_suspicion_ttl", cfg.SuspicionTTL)
			m.offboarding.submit(ctx, job)
		}
	}
	m.offboarding.retrySync(ctx)
	m.fleet.placePending(ctx)
	states, _ := m.live.counts()
	for s := ClientActive; s <= ClientOffline; s++ {
		m.metrics.clients.WithLabelValues(s.String()).Set(float64(states[s]))
	}
	return p
}

// RestoreLiveness starts a fresh Active incarnation, with a whole active
// TTL, for every client the restored state names (segment owners and
// registered sidecar nodes), and rebinds their resources to it. A
// promoted or restarted master calls it before it serves; remount
// readiness still follows the ReMount protocol (Ping answers NEED_REMOUNT
// while a segment awaits its remount).
func (m *Master) RestoreLiveness() int {
	m.topo.Lock()
	defer m.topo.Unlock()
	seen := map[string]bool{}
	var ids []string
	for _, s := range m.segments {
		if !seen[s.client.id] {
			seen[s.client.id] = true
			ids = append(ids, s.client.id)
		}
	}
	for _, id := range m.fleet.nodeClients() {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	n := m.live.restore(ids)
	for _, s := range m.segments {
		if s.owner.Load() == nil {
			s.owner.Store(m.live.Record(s.client.id))
		}
	}
	m.fleet.rebindOwners()
	return n
}

// Liveness returns the master's liveness records.
func (m *Master) Liveness() *Liveness { return m.live }

// PingStatus is what Ping tells a client.
type PingStatus uint8

// Ping answers.
const (
	PingOK PingStatus = iota + 1
	// PingNeedRemount: the master does not know the client, its
	// incarnation went offline, or it knows its segments only from before
	// a failover; the client must (re)mount, or a node register again.
	PingNeedRemount
)

// Ping is a client's liveness signal. A Suspected client that pings is
// Active again, with nothing cleaned up; an unknown or Offline one is told
// NEED_REMOUNT (Offline is a remount barrier until its offboarding
// completed). The remount-readiness check follows, unchanged: a client
// with a segment awaiting its remount after a failover is told
// NEED_REMOUNT too; a registered sidecar node, which mounts nothing, is
// ready once registered.
func (m *Master) Ping(ctx context.Context, clientID string) (PingStatus, error) {
	if err := ctx.Err(); err != nil {
		return 0, &Error{Op: "Ping", Client: clientID, Err: err}
	}
	if clientID == "" {
		return 0, &Error{Op: "Ping", Err: fmt.Errorf("%w: empty client id", ErrInvalidArgument), Hint: "pass the client's id"}
	}
	rec, recovery, err := m.live.signal(clientID, false)
	m.noteRecovery(recovery)
	if rec == nil || err != nil {
		return PingNeedRemount, nil
	}
	m.topo.RLock()
	defer m.topo.RUnlock()
	serving := false
	for _, s := range m.segments {
		if s.client.id != clientID {
			continue
		}
		if s.state == segmentAwaitingRemount {
			return PingNeedRemount, nil
		}
		serving = true
	}
	if !serving && !m.fleet.registered(clientID, rec) {
		return PingNeedRemount, nil
	}
	return PingOK, nil
}
