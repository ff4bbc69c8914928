// Package liveness is the master's client liveness state machine: one
// Record per client incarnation, going Active -> Suspected -> Offline on
// two steady-clock TTLs, judged by monitor passes (Table.Pass) and kept
// alive by signals (Table.Signal). It decides; it does no I/O, logs
// nothing and knows nothing of what a client owns. Package master drives
// it (Ping, mounts, the monitor, offboarding, metrics) and re-exports its
// names: ClientState, ClientLivenessRecord, LivenessConfig, LivenessPass,
// ClientLiveness.
package liveness

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/master/internal/steadytime"
)

// ErrClientOffline: the client's incarnation went offline and is being
// offboarded (package master's ErrClientOffline).
var ErrClientOffline = errors.New("client offline")

// State is a client incarnation's liveness.
type State uint32

// Liveness states (Active -> Suspected -> Offline). The zero value means
// no record: the master does not know the client (or forgot it after its
// offboarding completed).
const (
	// Active: the incarnation's resources may take new work.
	Active State = iota + 1
	// Suspected: its active TTL ran out without a liveness signal. Its
	// resources are retained, but take no new allocation, descriptor or
	// shard; a liveness signal makes it Active again, with nothing
	// cleaned up.
	Suspected
	// Offline: its suspicion TTL ran out too. Terminal for the
	// incarnation: it is being offboarded, and until that completes the
	// record is a barrier to Mount, ReMount and RegisterNode of the
	// client (Ping answers NEED_REMOUNT).
	Offline
)

func (s State) String() string {
	switch s {
	case 0:
		return "unknown"
	case Active:
		return "active"
	case Suspected:
		return "suspected"
	case Offline:
		return "offline"
	}
	return fmt.Sprintf("ClientState(%d)", uint32(s))
}

// Record is the liveness of one client incarnation. An incarnation starts
// with the client's first successful mount (or node registration) the
// master knows of, or, after a promotion or restart, with the restore; it
// ends when its offboarding completes. Resources keep the record that
// created them (a segment its mounting incarnation, a node its registering
// one), so a later incarnation of the same client id never makes them
// serve again.
//
// Times are steady-clock readings of the master's Clock: a liveness
// window is never measured on the wall clock, and it never travels to
// another process (a restored client starts a fresh window).
type Record struct {
	client      string
	incarnation uint64
	restored    bool
	state       atomic.Uint32

	// Guarded by Table.mu.
	lastSignal  steadytime.Time // the last Ping or successful mount
	suspectedAt steadytime.Time // when the master committed Active -> Suspected
	offlineAt   steadytime.Time // when it committed Suspected -> Offline
	recoveries  uint64          // Suspected -> Active transitions
	offboarding func() string   // an Offline record's job, described for status
}

// ClientID is the client the record belongs to.
func (r *Record) ClientID() string { return r.client }

// Incarnation is the number this master gave the incarnation: unique and
// increasing across all its clients, process-local (a promoted master
// numbers afresh).
func (r *Record) Incarnation() uint64 { return r.incarnation }

// State is the incarnation's liveness; a nil record is unknown (0).
func (r *Record) State() State {
	if r == nil {
		return 0
	}
	return State(r.state.Load())
}

// Restored reports whether the incarnation was rebuilt by a promotion or
// restart rather than started by a mount.
func (r *Record) Restored() bool { return r.restored }

// Table holds the liveness record of every known client incarnation and
// judges them. It is process-local: nothing of it is logged, and a
// promoted or restarted master rebuilds it (Restore).
type Table struct {
	cfg Config
	now func() steadytime.Time

	mu       sync.Mutex
	records  map[string]*Record // current incarnation per client
	nextInc  uint64
	lastPass steadytime.Time // the last monitor pass; 0 before the first
	stalls   uint64
	// unheard: the records were restored (a promotion or restart) and no
	// client has signalled since. Until one does, restored windows do
	// not run: a master that hears from nobody cannot tell dead clients
	// from its own isolation (elected while cut off from the nodes, it
	// would otherwise move every shard the moment the cut heals).
	unheard bool
}

// New returns an empty table judging by cfg (with its defaults filled) on
// the steady readings now returns.
func New(cfg Config, now func() steadytime.Time) *Table {
	return &Table{cfg: cfg, now: now, records: map[string]*Record{}}
}

// Config returns the effective liveness configuration.
func (l *Table) Config() Config { return l.cfg }

// Record returns the client's current incarnation, nil if none.
func (l *Table) Record(client string) *Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records[client]
}

func (l *Table) newRecordLocked(client string, now steadytime.Time, restored bool) *Record {
	l.nextInc++
	r := &Record{client: client, incarnation: l.nextInc, restored: restored, lastSignal: now}
	r.state.Store(uint32(Active))
	l.records[client] = r
	return r
}

// Recovery is a Suspected -> Active transition a signal committed, as the
// log reports it: taken under the table's lock, written by the caller
// once it holds no lock.
type Recovery struct {
	Client       string
	Incarnation  uint64
	SinceSignal  time.Duration // since the signal before this one
	SuspectedFor time.Duration // since the monitor committed it Suspected
}

// Signal is a liveness signal (a Ping, or a successful mount when mount
// is set). A Suspected incarnation recovers with nothing cleaned up. An
// unknown client gets a new incarnation only from a mount; an Offline one
// never does until its offboarding completed. It returns the client's
// current record (nil for a Ping from an unknown client), the recovery
// the signal committed (nil if none) and whether the signal was refused
// by the Offline barrier (ErrClientOffline).
func (l *Table) Signal(client string, mount bool) (r *Record, rc *Recovery, err error) {
	now := l.now()
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
	case Offline:
		return r, nil, fmt.Errorf("%w: incarnation %d went offline %v ago and is still being offboarded", ErrClientOffline, r.incarnation, steadytime.ToDuration(now-r.offlineAt).Round(time.Millisecond))
	case Suspected:
		rc = &Recovery{Client: r.client, Incarnation: r.incarnation,
			SinceSignal: steadytime.ToDuration(now - r.lastSignal), SuspectedFor: steadytime.ToDuration(now - r.suspectedAt)}
		l.setLocked(r, Active, now)
		r.recoveries++
	}
	r.lastSignal = max(r.lastSignal, now)
	return r, rc, nil
}

// heardLocked notes a signal at now. The first after a restore starts
// every restored window that has not run yet: each restored client gets a
// whole active TTL from the first moment the master is known to be
// reachable. The caller holds l.mu.
func (l *Table) heardLocked(now steadytime.Time) {
	if !l.unheard {
		return
	}
	l.unheard = false
	for _, r := range l.records {
		if r.restored && r.State() == Active {
			r.lastSignal = max(r.lastSignal, now)
		}
	}
}

// Held reports whether r is an active incarnation that signalled within
// hold, and how long ago it last did.
func (l *Table) Held(r *Record, hold time.Duration) (quiet time.Duration, ok bool) {
	if r == nil || r.State() != Active {
		return 0, false
	}
	now := l.now()
	l.mu.Lock()
	quiet = steadytime.ToDuration(now - r.lastSignal)
	l.mu.Unlock()
	return quiet, quiet < hold
}

// setLocked commits a transition. The caller holds l.mu.
func (l *Table) setLocked(r *Record, to State, now steadytime.Time) {
	switch to {
	case Suspected:
		r.suspectedAt = now
	case Offline:
		r.offlineAt = now
	}
	r.state.Store(uint32(to))
}

// GoOffline commits r Offline at now, if it is still the client's record
// and Suspected (a signal may have recovered it since the monitor judged
// it). prepare is called, under the same lock a signal takes, with how
// long the client had been silent and Suspected; it returns the job's
// description for Snapshot. GoOffline reports whether it committed.
func (l *Table) GoOffline(r *Record, now steadytime.Time, prepare func(sinceSignal, suspectedFor time.Duration) (describe func() string)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[r.client] != r || r.State() != Suspected {
		return false
	}
	describe := prepare(steadytime.ToDuration(now-r.lastSignal), steadytime.ToDuration(now-r.suspectedAt))
	l.setLocked(r, Offline, now)
	r.offboarding = describe
	return true
}

// Pass is what one monitor pass did.
type Pass struct {
	// Stalled: the gap since the previous pass was longer than
	// StallAfter, and Unobserved of it was not counted against anyone.
	Stalled    bool
	Unobserved time.Duration
	// Suspected are the records this pass committed Suspected; Offline
	// those whose suspicion window ran out, for which the pass prepared
	// an offboarding (nil entries are gone: a signal recovered them in
	// between).
	Suspected []*Record
	Offline   []*Record

	// sinceSignal is, for each of Suspected, how long it had been silent
	// when the pass judged it (for the log).
	sinceSignal []time.Duration
}

// SinceSignal is how long Suspected[i] had been silent when the pass
// judged it.
func (p *Pass) SinceSignal(i int) time.Duration { return p.sinceSignal[i] }

// Pass judges every record at now. A Suspected record's window runs from
// the moment this monitor committed it Suspected, never from when its
// active TTL ran out, so a late pass never shortens it. If the monitor
// itself was not observing (a gap past StallAfter since its last pass:
// the master was paused or starved), the unobserved part of the gap is
// added to every window that was running then: a client keeps, after the
// stall, the window it had left when the master last looked. The
// Suspected -> Offline transition is committed by GoOffline, which
// re-checks the record under the same lock a signal takes.
func (l *Table) Pass(now steadytime.Time) Pass {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p Pass
	if l.lastPass != 0 {
		gap := steadytime.ToDuration(now - l.lastPass)
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
				if r.State() == Suspected {
					r.suspectedAt = min(r.suspectedAt.Add(p.Unobserved), now)
				}
			}
		}
	}
	l.lastPass = now
	for _, r := range l.records {
		switch r.State() {
		case Active:
			if l.unheard && r.restored {
				// Nobody reached this master since it restored its
				// records: a window runs only once one did.
				r.lastSignal = now
				continue
			}
			if steadytime.ToDuration(now-r.lastSignal) >= l.cfg.ActiveTTL {
				l.setLocked(r, Suspected, now)
				p.Suspected = append(p.Suspected, r)
			}
		case Suspected:
			if steadytime.ToDuration(now-r.suspectedAt) >= l.cfg.SuspicionTTL {
				p.Offline = append(p.Offline, r)
			}
		}
	}
	byClient := func(rs []*Record) {
		sort.Slice(rs, func(i, j int) bool { return rs[i].client < rs[j].client })
	}
	byClient(p.Suspected)
	byClient(p.Offline)
	for _, r := range p.Suspected {
		p.sinceSignal = append(p.sinceSignal, steadytime.ToDuration(now-r.lastSignal))
	}
	return p
}

// Forget removes r once its offboarding completed; a later mount starts a
// new incarnation.
func (l *Table) Forget(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[r.client] == r {
		delete(l.records, r.client)
	}
}

// Restore starts a fresh Active incarnation for every client in ids that
// has no record (after a promotion or restart): the old master's windows
// are not carried over, so a restored client gets a whole active TTL to
// ping or remount, and none of those windows runs until some client
// signals (see Table.unheard). It returns how many it started.
func (l *Table) Restore(ids []string) int {
	now := l.now()
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

// Replace starts a new incarnation for a client whose process restarted
// (a node registering with a new session while its old incarnation is
// still Active or Suspected): the old record ends without offboarding,
// since the new process takes its place at once. If old is no longer
// the client's live record, it returns the current one unchanged.
func (l *Table) Replace(old *Record) *Record {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[old.client] != old || old.State() == Offline {
		return l.records[old.client]
	}
	old.state.Store(uint32(Offline))
	old.offlineAt = now
	return l.newRecordLocked(old.client, now, false)
}

// Status is a point-in-time view of one record, for status.
type Status struct {
	Client      string
	Incarnation uint64
	State       State
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
func (l *Table) Snapshot() []Status {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Status, 0, len(l.records))
	for _, r := range l.records {
		c := Status{Client: r.client, Incarnation: r.incarnation, State: r.State(), Restored: r.restored,
			SinceSignal: steadytime.ToDuration(now - r.lastSignal), Recoveries: r.recoveries}
		switch c.State {
		case Active:
			c.InState = c.SinceSignal
		case Suspected:
			c.InState = steadytime.ToDuration(now - r.suspectedAt)
		case Offline:
			c.InState = steadytime.ToDuration(now - r.offlineAt)
			if r.offboarding != nil {
				c.Offboarding = r.offboarding()
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client < out[j].Client })
	return out
}

// Counts returns how many records are in each state (indexed by State)
// and how many monitor stalls were seen so far, for metrics.
func (l *Table) Counts() (states [4]int, stalls uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		states[r.State()]++
	}
	return states, l.stalls
}
