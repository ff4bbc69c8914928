package seal

import (
	"fmt"
	"math"
	"sort"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// Range is what one term contributes to a lineage: generations From..To
// (empty when To < From). A term's history begins after its own marker's
// restore gen and ends where the next marker on the chain cut it.
type Range struct {
	Term int64
	From int64
	To   int64 // math.MaxInt64 for the newest term while it still writes
}

// Lineage is the history a term inherits: the marker chain and the
// generations each term on it contributes.
type Lineage struct {
	// Chain holds the markers followed, newest first.
	Chain []Marker
	// Ranges are the terms' generations, oldest first, contiguous.
	Ranges []Range
	// Complete: the chain reaches the shard's first term. A chain cut
	// short (older markers collected) is usable only above a checkpoint.
	Complete bool
}

// ChainFrom follows the markers back from term top: each marker names the
// marker of the term it restored from. It stops at the shard's first term
// (complete) or at a marker that is not in markers (collected).
func ChainFrom(markers map[int64]Marker, top int64) (chain []Marker, complete bool) {
	t := top
	for t > 0 {
		m, ok := markers[t]
		if !ok {
			return chain, false
		}
		chain = append(chain, m)
		t = m.Restore.Term
	}
	return chain, true
}

// LineageOf turns a chain (newest first) into ranges. tip is the last
// generation of the newest term; OpenTip leaves it open. A chain whose cuts
// go backwards is corrupt: a later marker can only restore from at or above
// where the earlier one began.
func LineageOf(shard string, chain []Marker, complete bool, tip int64) (Lineage, error) {
	l := Lineage{Chain: chain, Complete: complete}
	for i := len(chain) - 1; i >= 0; i-- {
		m := chain[i]
		to := tip
		if i > 0 {
			to = chain[i-1].Restore.Gen
		}
		if to < m.Restore.Gen {
			key := layout.MarkerKey(m.Term)
			if i > 0 {
				key = layout.MarkerKey(chain[i-1].Term)
			}
			return Lineage{}, &fence.BodyError{Shard: shard, Key: key, Err: fence.ErrCorruptBody,
				Detail: fmt.Sprintf("marker chain goes backwards: term %d begins after generation %d but is cut at %d", m.Term, m.Restore.Gen, to)}
		}
		l.Ranges = append(l.Ranges, Range{Term: m.Term, From: m.Restore.Gen + 1, To: to})
	}
	return l, nil
}

// OpenTip marks the newest term of a lineage as still writing.
const OpenTip = math.MaxInt64

// Contains reports whether the md (term, gen) is on the lineage.
func (l Lineage) Contains(term, gen int64) bool {
	for _, r := range l.Ranges {
		if r.Term == term {
			return gen >= r.From && gen <= r.To
		}
	}
	return false
}

// HasCheckpoint reports whether a checkpoint of term at gen lies on the
// lineage: term is on the chain and gen is within its history, its restore
// point included (a checkpoint right after a restore).
func (l Lineage) HasCheckpoint(term, gen int64) bool {
	for _, r := range l.Ranges {
		if r.Term == term {
			return gen >= r.From-1 && gen <= r.To
		}
	}
	return false
}

// TermOf returns the term whose md holds gen on the lineage.
func (l Lineage) TermOf(gen int64) (int64, bool) {
	i := sort.Search(len(l.Ranges), func(i int) bool { return l.Ranges[i].To >= gen })
	if i < len(l.Ranges) && gen >= l.Ranges[i].From && gen >= 1 {
		return l.Ranges[i].Term, true
	}
	return 0, false
}

// Base is the lowest generation the lineage can name a term for, minus
// one: generations at or below it need a checkpoint when the chain is not
// complete.
func (l Lineage) Base() int64 {
	if len(l.Ranges) == 0 {
		return 0
	}
	return l.Ranges[0].From - 1
}

// OnChain reports whether term has a marker on the chain.
func (l Lineage) OnChain(term int64) bool {
	for _, m := range l.Chain {
		if m.Term == term {
			return true
		}
	}
	return false
}

// ContiguousAfter returns the highest k such that every generation
// after+1..k is in gens (ascending); after itself when after+1 is missing.
func ContiguousAfter(gens []int64, after int64) int64 {
	k := after
	for _, g := range gens {
		switch {
		case g <= k:
		case g == k+1:
			k = g
		default:
			return k
		}
	}
	return k
}
