package master

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/shardfence/shardfence/internal/tick"
	"github.com/shardfence/shardfence/master/internal/liveness"
)

// The liveness state machine is package master/internal/liveness; this
// file re-exports its names and drives it: the monitor (RunLiveness,
// CheckLiveness), the signals (Ping; mounts and node registrations in
// segment.go and fleet.go), the restore after a failover, and the logs
// and metrics of every transition.

// ClientState is a client incarnation's liveness.
type ClientState = liveness.State

// Liveness states (Active -> Suspected -> Offline). The zero value means
// no record: the master does not know the client (or forgot it after its
// offboarding completed).
const (
	// ClientActive: the incarnation's resources may take new work.
	ClientActive = liveness.Active
	// ClientSuspected: its active TTL ran out without a liveness signal.
	// Its resources are retained, but take no new allocation, descriptor
	// or shard; a liveness signal makes it Active again, with nothing
	// cleaned up.
	ClientSuspected = liveness.Suspected
	// ClientOffline: its suspicion TTL ran out too. Terminal for the
	// incarnation: it is being offboarded, and until that completes the
	// record is a barrier to Mount, ReMount and RegisterNode of the
	// client (Ping answers NEED_REMOUNT).
	ClientOffline = liveness.Offline
)

// ClientLivenessRecord is the liveness of one client incarnation. An
// incarnation starts with the client's first successful mount (or node
// registration) the master knows of, or, after a promotion or restart,
// with the restore; it ends when its offboarding completes. Resources
// keep the record that created them (a segment its mounting incarnation,
// a node its registering one), so a later incarnation of the same client
// id never makes them serve again. Its times are steady-clock readings
// of the master's Clock, never carried to another process.
type ClientLivenessRecord = liveness.Record

// LivenessConfig are the liveness TTLs and the monitor's pace
// (ActiveTTL, SuspicionTTL, MonitorInterval, StallAfter).
type LivenessConfig = liveness.Config

// Default liveness TTLs (the seed's client_active_ttl_sec and
// client_suspicion_ttl_sec).
const (
	DefaultClientActiveTTL    = liveness.DefaultActiveTTL
	DefaultClientSuspicionTTL = liveness.DefaultSuspicionTTL
)

// Bounds of LivenessConfig.MonitorInterval.
const (
	MinMonitorInterval = liveness.MinMonitorInterval
	MaxMonitorInterval = liveness.MaxMonitorInterval
)

// LivenessTTLFlags are the TTL settings as an operator gave them: nil
// means not given.
type LivenessTTLFlags = liveness.TTLFlags

// ResolveLivenessTTLs applies the compatibility rules: the active TTL is
// the explicit one, else the deprecated alias, else 10 s; the suspicion
// TTL is the explicit one, else, when an active or legacy TTL was given,
// the resolved active TTL, else 20 s. warnings say what the operator
// should change.
func ResolveLivenessTTLs(f LivenessTTLFlags) (active, suspicion time.Duration, warnings []string) {
	return liveness.ResolveTTLs(f)
}

// LivenessPass is what one monitor pass did: whether the monitor had
// stalled, the records it committed Suspected and those whose suspicion
// window ran out.
type LivenessPass = liveness.Pass

// ClientLiveness is a point-in-time view of one record, for status.
type ClientLiveness = liveness.Status

// livenessRecovery is a Suspected -> Active transition a signal
// committed, written to the log by noteRecovery.
type livenessRecovery = liveness.Recovery

// Liveness holds the liveness record of every known client incarnation.
// It is process-local: nothing of it is logged, and a promoted or
// restarted master rebuilds it (RestoreLiveness). Its exported methods
// only read; the master alone signals, judges and forgets.
type Liveness struct {
	t   *liveness.Table
	cfg LivenessConfig
}

func newLiveness(cfg LivenessConfig, clock Clock) *Liveness {
	return &Liveness{t: liveness.New(cfg, clock.Steady), cfg: cfg}
}

// Record returns the client's current incarnation, nil if none.
func (l *Liveness) Record(client string) *ClientLivenessRecord { return l.t.Record(client) }

// ClientState returns the liveness of client's current incarnation (0:
// unknown).
func (l *Liveness) ClientState(client string) ClientState { return l.Record(client).State() }

// Snapshot lists every record, by client.
func (l *Liveness) Snapshot() []ClientLiveness { return l.t.Snapshot() }

// Config returns the effective liveness configuration.
func (l *Liveness) Config() LivenessConfig { return l.cfg }

func (l *Liveness) signal(client string, mount bool) (*ClientLivenessRecord, *livenessRecovery, error) {
	return l.t.Signal(client, mount)
}

func (l *Liveness) held(r *ClientLivenessRecord, hold time.Duration) (time.Duration, bool) {
	return l.t.Held(r, hold)
}

func (l *Liveness) replace(old *ClientLivenessRecord) *ClientLivenessRecord { return l.t.Replace(old) }

// noteRecovery counts and logs a recovery a signal committed (nothing for
// nil). The caller holds no lock: the log is I/O.
func (m *Master) noteRecovery(rc *livenessRecovery) {
	if rc == nil {
		return
	}
	m.metrics.clientTransitions.WithLabelValues("suspected", "active").Inc()
	m.log.Info("client active again: a liveness signal came within its suspicion window, nothing was cleaned up",
		"client", rc.Client, "incarnation", rc.Incarnation, "since_signal", rc.SinceSignal.Round(time.Millisecond),
		"suspected_for", rc.SuspectedFor.Round(time.Millisecond), "client_suspicion_ttl", m.live.cfg.SuspicionTTL)
}

// RunLiveness runs the liveness monitor until ctx ends: every monitor
// interval it judges the records, prepares the offboarding of every
// client that went Offline (which isolates it at once) and hands the job
// to the offboarding executor, and tells the fleet which nodes went
// Suspected. The asynchronous executor drains when ctx ends. Only a
// primary runs it: a standby judges nobody.
func (m *Master) RunLiveness(ctx context.Context) {
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
	tick.Every(ctx, m.live.cfg.MonitorInterval, nil, func() { m.CheckLiveness(ctx) })
	<-stopped
}

// CheckLiveness is one monitor pass at the clock's current steady time:
// it commits the transitions that are due, prepares and submits the
// offboarding of every client that went Offline, retries synchronous
// jobs that failed before, and starts the takeovers of shards whose
// owner went Suspected. Tests call it directly with a fake clock.
func (m *Master) CheckLiveness(ctx context.Context) LivenessPass {
	p := m.live.t.Pass(m.clock.Steady())
	if p.Stalled {
		m.metrics.livenessStalls.Inc()
		m.log.Warn("the liveness monitor did not observe for a while (the master was paused or starved); that time is not counted against any client",
			"unobserved", p.Unobserved.Round(time.Millisecond))
	}
	cfg := m.live.cfg
	for i, r := range p.Suspected {
		m.metrics.clientTransitions.WithLabelValues("active", "suspected").Inc()
		m.log.Warn("client suspected: no liveness signal within its active TTL; it goes offline and is offboarded unless it signals within its suspicion TTL",
			"client", r.ClientID(), "incarnation", r.Incarnation(), "since_signal", p.SinceSignal(i).Round(time.Millisecond),
			"client_active_ttl", cfg.ActiveTTL, "client_suspicion_ttl", cfg.SuspicionTTL)
		m.fleet.ownerSuspected(ctx, r)
	}
	for _, r := range p.Offline {
		if job := m.PrepareClientOffboarding(r); job != nil {
			m.metrics.clientTransitions.WithLabelValues("suspected", "offline").Inc()
			m.log.Warn("client offline: no liveness signal within its suspicion TTL; offboarding it",
				"client", r.ClientID(), "incarnation", r.Incarnation(), "since_signal", job.sinceSignal.Round(time.Millisecond),
				"suspected_for", job.suspectedFor.Round(time.Millisecond), "client_suspicion_ttl", cfg.SuspicionTTL)
			m.offboarding.submit(ctx, job)
		}
	}
	m.offboarding.retrySync(ctx)
	m.fleet.placePending(ctx)
	states, _ := m.live.t.Counts()
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
	n := m.live.t.Restore(ids)
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
