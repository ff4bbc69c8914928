package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind uint8

// The faults a plan injects.
const (
	// Crash stops a process (its memory is lost, the store keeps what it
	// wrote); it restarts after Dur as a new incarnation.
	Crash Kind = iota
	// Pause freezes a process for Dur: the network holds its messages in
	// both directions and its store requests hang (a zombie: its timers
	// still fire, and it resumes with what it believed).
	Pause
	// Partition cuts the links between A and B (B "": every other
	// process) for Dur; calls across hang and streams break.
	Partition
	// StoreStall makes A's store requests hang for Dur.
	StoreStall
	// StoreErrors makes some of A's store requests fail (unavailable, or
	// applied with the response lost) for Dur.
	StoreErrors
)

var kindNames = [...]string{"crash", "pause", "partition", "store-stall", "store-errors"}

func (k Kind) String() string { return kindNames[k] }

// Fault is one fault of a plan.
type Fault struct {
	ID   int // its place in the seed's plan, kept by shrinking
	Kind Kind
	At   time.Duration // from the start of the run
	Dur  time.Duration
	A, B string // the processes (B only for a partition; "" is all)
}

// End is when the fault heals (a crashed process restarts).
func (f Fault) End() time.Duration { return f.At + f.Dur }

func (f Fault) String() string {
	who := f.A
	if f.Kind == Partition {
		b := f.B
		if b == "" {
			b = "everyone"
		}
		who = f.A + " | " + b
	}
	return fmt.Sprintf("t=%v %s %s for %v", f.At, f.Kind, who, f.Dur)
}

// Plan is what one seed does: the faults, in time order, and when the run
// ends (a quiet period after the last fault healed).
type Plan struct {
	Seed   uint64
	Faults []Fault
	End    time.Duration
}

func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan of seed %d (%d faults, ends at t=%v):\n", p.Seed, len(p.Faults), p.End)
	for _, f := range p.Faults {
		fmt.Fprintf(&b, "  fault %d: %v\n", f.ID, f)
	}
	return b.String()
}

// Shape is the cluster a plan is drawn for and the timing of a run.
type Shape struct {
	Masters, Sidecars, Shards int
	// Warmup is fault-free time for the cluster to form; faults start in
	// the Window after it; Quiet follows the last heal.
	Warmup, Window, Quiet time.Duration
	MaxFaults             int
	// MaxDur bounds a fault's duration.
	MaxDur time.Duration
	// Takeover is when the master acts on a node it lost (the active plus
	// the suspicion TTL): a third of the faults after the first are drawn
	// to start within a second before another fault's start plus it, when
	// the master is moving shards (faults that meet are where the bugs
	// are; uniform times would rarely make them meet).
	Takeover time.Duration
}

func (s Shape) masterNames() []string  { return names("m", s.Masters) }
func (s Shape) sidecarNames() []string { return names("s", s.Sidecars) }

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// NewPlan draws the faults of seed. It is a pure function of its inputs.
func NewPlan(seed uint64, s Shape) Plan {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	procs := append(s.masterNames(), s.sidecarNames()...)
	n := 1 + rng.IntN(s.MaxFaults)
	p := Plan{Seed: seed}
	for range n {
		f := Fault{
			Kind: Kind(rng.IntN(len(kindNames))),
			At:   s.Warmup + randDur(rng, 0, s.Window),
			Dur:  randDur(rng, 200*time.Millisecond, s.MaxDur),
			A:    procs[rng.IntN(len(procs))],
		}
		if len(p.Faults) > 0 && s.Takeover > 0 && rng.IntN(3) == 0 {
			// Meet a takeover: half of these hit a master (the first
			// one half of that time: the primary, unless a failover
			// came before).
			prev := p.Faults[rng.IntN(len(p.Faults))]
			f.At = max(0, prev.At+s.Takeover-randDur(rng, 0, time.Second))
			if rng.IntN(2) == 0 {
				// A master meets the store through its log only: half
				// of its faults here stall that log.
				f.A = procs[rng.IntN(s.Masters)]
				if rng.IntN(2) == 0 {
					f.Kind = StoreStall
				}
			}
		}
		if f.Kind == Partition && rng.IntN(2) == 0 {
			for f.B = procs[rng.IntN(len(procs))]; f.B == f.A; f.B = procs[rng.IntN(len(procs))] {
			}
		}
		p.Faults = append(p.Faults, f)
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
	for i := range p.Faults {
		p.Faults[i].ID = i
	}
	p.End = p.end(s)
	return p
}

// Keep returns the plan with only the faults whose IDs are in ids.
func (p Plan) Keep(ids []int, s Shape) Plan {
	q := Plan{Seed: p.Seed}
	for _, f := range p.Faults {
		if slices.Contains(ids, f.ID) {
			q.Faults = append(q.Faults, f)
		}
	}
	q.End = q.end(s)
	return q
}

// IDs lists the plan's fault IDs.
func (p Plan) IDs() []int {
	out := make([]int, len(p.Faults))
	for i, f := range p.Faults {
		out[i] = f.ID
	}
	return out
}

// Shrink drops the faults of a failing plan one at a time, keeping every
// drop after which fails still says the run fails, until no single fault
// can go: a plan with the fewest faults this simple delta finds.
func Shrink(p Plan, s Shape, fails func(Plan) bool) Plan {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(p.Faults); i++ {
			if q := p.Without(i, s); fails(q) {
				p, changed = q, true
				i--
			}
		}
	}
	return p
}

// end is the last heal plus the quiet period.
func (p Plan) end(s Shape) time.Duration {
	last := s.Warmup
	for _, f := range p.Faults {
		last = max(last, f.End())
	}
	return last + s.Quiet
}

// Without returns the plan without fault i (for shrinking).
func (p Plan) Without(i int, s Shape) Plan {
	q := Plan{Seed: p.Seed}
	q.Faults = append(append([]Fault(nil), p.Faults[:i]...), p.Faults[i+1:]...)
	q.End = q.end(s)
	return q
}

// randDur is uniform in [lo, hi), rounded to the millisecond.
func randDur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return (lo + time.Duration(rng.Int64N(int64(hi-lo)))).Round(time.Millisecond)
}
