package sim

import (
	"fmt"
	"sort"
	"time"
)

// The invariants, as pure functions of what the run observed. The driver
// (run.go) gathers the observations; nothing here touches a process.

// Row is one shard of the primary master's table.
type Row struct {
	Node  string
	Term  int64
	Alloc string
	State string // master.ShardOpen, ...
	// Durable: the log acknowledged the row (a row the master recorded
	// and lost in a failover is no move).
	Durable bool
}

// Held is one shard a sidecar holds, as its Shards() reports it.
type Held struct {
	Node   string
	Term   int64
	Alloc  string
	State  string // sidecar.ShardState's name
	Fenced bool
}

// Acked is one acknowledged append.
type Acked struct {
	Op        string
	Term, Seq int64
}

// checkPrimaries: at most one master is primary per master term.
// primaries maps a term to the first master seen primary at it.
func checkPrimaries(primaries map[int64]string, name string, term int64) error {
	if prev, ok := primaries[term]; ok && prev != name {
		return fmt.Errorf("two master primaries at term %d: %s and %s (ha.Node.Run's claim must fence the other)", term, prev, name)
	}
	primaries[term] = name
	return nil
}

// checkTableTerms: the table never names an owner that lost the shard's
// term: no sidecar holds a shard open at a term above the table's (only
// an assignment the master made durable may be opened, and every such
// one is in the table of every later master).
func checkTableTerms(table map[string]Row, held []Held, shard string) error {
	row, ok := table[shard]
	for _, h := range held {
		if h.State != "open" || h.Fenced {
			continue
		}
		// No drain or move runs in the simulation, so no handoff shares
		// a term between two nodes either. A row without a node (the
		// owner went offline) names nobody.
		if !ok || h.Term > row.Term || (h.Term == row.Term && row.Node != "" && h.Node != row.Node) {
			return fmt.Errorf("shard %s: the master's table names %s at term %d, but %s holds it open at term %d (an assignment the table lost: master.(*fleet).publish told a node before the log acknowledged?)",
				shard, row.Node, row.Term, h.Node, h.Term)
		}
	}
	return nil
}

// checkAcks: two acknowledged ops never share a sequence number (one
// lineage: at most one sidecar acknowledges a position, whatever its
// term), and every acknowledged op is in the final read at its sequence
// number.
func checkAcks(shard string, acks []Acked, final map[int64]string, read bool) error {
	bySeq := map[int64]Acked{}
	for _, a := range acks {
		if b, ok := bySeq[a.Seq]; ok && b.Op != a.Op {
			return fmt.Errorf("shard %s: seq %d acknowledged twice: %q at term %d and %q at term %d (two sidecars acknowledged one position)", shard, a.Seq, b.Op, b.Term, a.Op, a.Term)
		}
		bySeq[a.Seq] = a
		if !read {
			continue
		}
		if got, ok := final[a.Seq]; !ok || got != a.Op {
			return fmt.Errorf("shard %s: acknowledged op %q (term %d, seq %d) lost: the final read has %q there", shard, a.Op, a.Term, a.Seq, got)
		}
	}
	return nil
}

// checkAck adds a to the positions acknowledged so far (bySeq), and fails
// if another op was acknowledged at a's position.
func checkAck(shard string, bySeq map[int64]Acked, a Acked) error {
	if b, ok := bySeq[a.Seq]; ok && b.Op != a.Op {
		return fmt.Errorf("shard %s: seq %d acknowledged twice: %q at term %d and %q at term %d (two sidecars acknowledged one position)", shard, a.Seq, b.Op, b.Term, a.Op, a.Term)
	}
	bySeq[a.Seq] = a
	return nil
}

// checkSettled: at the end of the quiet period every shard is open on a
// live node, in the table and on the sidecar, and every shard a sidecar
// holds open is the table's.
func checkSettled(shards []string, table map[string]Row, held map[string][]Held, live map[string]bool) error {
	for _, s := range shards {
		row, ok := table[s]
		switch {
		case !ok:
			return fmt.Errorf("shard %s: not in the master's table", s)
		case row.State != "open":
			return fmt.Errorf("shard %s: the table shows it %q on %s at term %d after the quiet period, not open (did its owner report it to this master? agent.(*Agent).session1 resets the reports)", s, row.State, row.Node, row.Term)
		case !live[row.Node]:
			return fmt.Errorf("shard %s: the table names %s, which is not running", s, row.Node)
		}
		found := false
		for _, h := range held[row.Node] {
			if h.Term == row.Term && h.Alloc == row.Alloc && h.State == "open" && !h.Fenced {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("shard %s: the table names %s at term %d, which does not hold it open (it holds %+v)", s, row.Node, row.Term, held[row.Node])
		}
	}
	nodes := make([]string, 0, len(held))
	for n := range held {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for _, h := range held[n] {
			row, ok := table[shardOf(h)]
			if h.State == "open" && !h.Fenced && (!ok || row.Node != n || row.Term != h.Term) {
				return fmt.Errorf("sidecar %s holds shard %s open at term %d, but the table names %s at term %d", n, shardOf(h), h.Term, row.Node, row.Term)
			}
		}
	}
	return nil
}

// shardOf is the shard a Held row is about (stored in Alloc's prefix by
// the driver as "shard/alloc").
func shardOf(h Held) string {
	for i := 0; i < len(h.Alloc); i++ {
		if h.Alloc[i] == '/' {
			return h.Alloc[:i]
		}
	}
	return h.Alloc
}

// Move is a change of a shard's owner in the table.
type Move struct {
	At       time.Duration
	Shard    string
	From, To string
	Term     int64
	By       string // the primary master whose table showed it
}

// checkMoves: a shard moves only off a node a fault took out of reach (a
// crash, a pause, a partition or a store fault of that node) long enough
// for the master to act (ttl: the active plus suspicion TTLs; a store
// fault counts at any length, since a failed open is reported); and each
// such fault moves each shard at most once (no flapping).
func checkMoves(moves []Move, faults []Fault, ttl time.Duration) error {
	used := map[string]bool{}
	for _, m := range moves {
		ok := false
		for i, f := range faults {
			key := fmt.Sprintf("%d/%s", i, m.Shard)
			if used[key] || !faultExcuses(f, m, ttl) {
				continue
			}
			used[key], ok = true, true
			break
		}
		if !ok {
			return fmt.Errorf("shard %s moved from %s to %s (term %d) at t=%v with no fault of %s to explain it (or more moves than faults: flapping)",
				m.Shard, m.From, m.To, m.Term, m.At.Round(time.Millisecond), m.From)
		}
	}
	return nil
}

// faultExcuses says whether f can explain m: f hit m.From before m, and
// kept it away from the master long enough.
func faultExcuses(f Fault, m Move, ttl time.Duration) bool {
	if f.At > m.At {
		return false
	}
	if f.Kind == Pause && isMaster(f.A) {
		// A paused master's timers still run here (a real pause stops
		// them, and the liveness monitor then gives every node back
		// the time it did not observe): its monitor hears no pings and
		// may move shards itself. The moves of another master are not
		// excused.
		return m.By == f.A
	}
	hits := f.A == m.From || (f.Kind == Partition && f.B == m.From) || (f.Kind == Partition && f.B == "" && isMaster(f.A))
	if !hits {
		return false
	}
	switch f.Kind {
	case Crash:
		return true
	case StoreStall, StoreErrors:
		return true
	default:
		return f.Dur >= ttl/2
	}
}
