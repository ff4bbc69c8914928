package ha

import (
	"math/rand/v2"
	"time"
)

// The election: which master claims the operation log when the primary
// stops. docs/PROTOCOL.md section 10 ("Election") has the argument; in
// short:
//
//   - The claim is the arbiter. A standby that decides to take over claims
//     the log at exactly one above the highest term it has seen, with the
//     same recovery.Open a promote runs: the fence key's create-if-absent
//     lets one claimant per term win, and a claimant that finds a higher
//     term already there stands down. A timer only decides when to try.
//   - The primary proves it is alive through the log itself: it appends a
//     leader entry (master.OpLeader) at least every renewal interval, one
//     third of the election timeout, so every generation is a renewal and
//     a busy log needs no extra write. A standby sees a new generation (or
//     a new term) as a sign of life.
//   - The primary's leadership lease: an append sent at steady time s and
//     acknowledged lets the primary answer until s + timeout - timeout/10.
//     A standby claims only after timeout (plus a random share) without a
//     sign of life, counted from when it saw the last one, which is after
//     the write it saw was sent. With steady clocks whose rates differ by
//     less than 5%, the primary has stopped answering by the time any
//     standby may claim; if its clock lies, the store fences it anyway.
//
// Elector is the standby's side: pure bookkeeping over what the standby
// read, so tests and the protocol checker (verify/) drive it with plain
// numbers on any clock.
type Elector struct {
	// own is this master's election timeout; 0: it never claims by
	// itself (only a promote makes it primary).
	own time.Duration
	// announced is the primary's, from its newest leader entry, when one
	// was read (announcedSet): the standby waits the longer of the two,
	// and not at all when the primary keeps no lease (announced 0).
	announced    time.Duration
	announcedSet bool
	rnd          *rand.Rand

	// term is the highest term of the log seen (fence keys, seal
	// markers, generations applied).
	term int64
	// life is the steady time of the last sign of the primary's life: a
	// new generation applied, a new term seen, or the standby's own start.
	life   int64
	jitter time.Duration
}

// NewElector returns the bookkeeping of a standby whose election timeout
// is own (0: it never claims by itself), started at steady time now; seed
// draws its random shares.
func NewElector(own time.Duration, seed uint64, now int64) *Elector {
	e := &Elector{own: own, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	e.Alive(now)
	return e
}

// Timeout is how long the standby waits without a sign of life; 0 when it
// must not claim by itself.
func (e *Elector) Timeout() time.Duration {
	if e.own <= 0 || (e.announcedSet && e.announced <= 0) {
		return 0
	}
	if e.announcedSet {
		return max(e.own, e.announced)
	}
	return e.own
}

// Alive records a sign of the primary's life at now and draws a new
// random share (Raft's randomised timeouts: two standbys that saw the same
// last generation do not claim in lockstep round after round).
func (e *Elector) Alive(now int64) {
	e.life = now
	if t := e.Timeout(); t > 0 {
		e.jitter = time.Duration(e.rnd.Int64N(int64(t)/electionJitterDivisor + 1))
	} else {
		e.jitter = 0
	}
}

// electionJitterDivisor: the random share is at most a fifth of the
// timeout, which keeps a failover within timeout + 1 s at the default
// timeout while still splitting two standbys' claims by tens of ms.
const electionJitterDivisor = 5

// SawTerm records the terms of the log seen in a listing or a lineage: a
// term above the known one is a new primary's claim, a sign of life.
func (e *Elector) SawTerm(term int64, now int64) bool {
	if term <= e.term {
		return false
	}
	e.term = term
	e.Alive(now)
	return true
}

// Term is the highest term of the log seen.
func (e *Elector) Term() int64 { return e.term }

// PrimaryTimeout records the election timeout the primary announced.
func (e *Elector) PrimaryTimeout(d time.Duration) {
	e.announced, e.announcedSet = max(d, 0), true
}

// Until is how long until the standby may claim: <= 0 means now; the
// second result is false when it never claims by itself.
func (e *Elector) Until(now int64) (time.Duration, bool) {
	t := e.Timeout()
	if t <= 0 {
		return 0, false
	}
	return time.Duration(e.life + int64(t+e.jitter) - now), true
}

// LeaseFor is how long an acknowledged append, counted from when it was
// sent, lets a primary with election timeout t answer requests: t less
// the drift margin. 0 (no lease: the primary answers until fenced) when
// elections are off.
func LeaseFor(t time.Duration) time.Duration {
	if t <= 0 {
		return 0
	}
	return t - t/driftDivisor
}

// QuietUntil is the rule of Node.quietUntil, pure for tests and the
// protocol checker: the steady time until which a new primary that
// claimed at election timeout t answers nothing (0: it answers at once).
// observed is the last generation the standby had read when it claimed
// (-1: it tailed nothing), life its last sign of the primary's life,
// restoreGen the restore point's generation, sweptAt the claim's sweep,
// now the time it asks.
func QuietUntil(t time.Duration, observed, life, restoreGen, sweptAt, now int64) int64 {
	if t <= 0 || observed < 0 {
		return 0
	}
	wait := int64(LeaseFor(t) + t/driftDivisor)
	until := life + wait
	if restoreGen > observed {
		until = max(until, sweptAt+wait)
	}
	if until <= now {
		return 0
	}
	return until
}

// Life is the steady time of the last sign of the primary's life.
func (e *Elector) Life() int64 { return e.life }

// driftDivisor: the primary keeps a tenth of the timeout in hand, which
// covers steady clocks whose rates are within 5% of real time: the lease
// lasts at most 0.9t/0.95 = 0.947t of real time after the write was sent,
// the standby's wait at least t/1.05 = 0.952t after it saw the write.
const driftDivisor = 10

// RenewEvery is how often a primary appends its leader entry: a third of
// the election timeout, so two renewals can fail or be slow before the
// lease runs out; with elections off, every 10 s (standbys still learn
// where the primary serves).
func RenewEvery(t time.Duration) time.Duration {
	if t <= 0 {
		return 10 * time.Second
	}
	return max(t/3, 10*time.Millisecond)
}
