package sim

import (
	"fmt"
	"math/rand/v2"
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
	for i, f := range p.Faults {
		fmt.Fprintf(&b, "  fault %d: %v\n", i, f)
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
		if f.Kind == Partition && rng.IntN(2) == 0 {
			for f.B = procs[rng.IntN(len(procs))]; f.B == f.A; f.B = procs[rng.IntN(len(procs))] {
			}
		}
		p.Faults = append(p.Faults, f)
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
	p.End = p.end(s)
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
