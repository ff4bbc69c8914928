package seal

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

func TestMarkerRoundTripAndRejects(t *testing.T) {
	m := Marker{Shard: "s", Term: 5, Allocation: "a5", Restore: RestorePoint{Term: 4, Gen: 7, MDKey: layout.MDKey(4, 7)},
		Poisoned: layout.MDKey(4, 8), Prev: layout.MarkerKey(4)}
	body, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMarker("s", layout.MarkerKey(5), body)
	if err != nil || got != m {
		t.Fatalf("round trip: %+v (%v)", got, err)
	}
	first := Marker{Shard: "s", Term: 1, Allocation: "a"}
	if _, err := first.Encode(); err != nil {
		t.Fatalf("first marker of a shard: %v", err)
	}
	flipped := []byte(strings.Replace(string(body), "|7|", "|6|", 1))
	cases := []struct {
		name  string
		shard string
		key   string
		body  []byte
		want  error
	}{
		{"checksum", "s", layout.MarkerKey(5), flipped, fence.ErrCorruptBody},
		{"garbage", "s", layout.MarkerKey(5), []byte("nope"), fence.ErrCorruptBody},
		{"version", "s", layout.MarkerKey(5), []byte("shardfence.seal|v9|x"), fence.ErrUnknownVersion},
		{"other shard", "t", layout.MarkerKey(5), body, fence.ErrForeignShard},
		{"other term's key", "s", layout.MarkerKey(6), body, fence.ErrForeignShard},
	}
	for _, c := range cases {
		_, err := DecodeMarker(c.shard, c.key, c.body)
		var be *fence.BodyError
		if !errors.Is(err, c.want) || !errors.As(err, &be) || be.Key != c.key {
			t.Errorf("%s: %v, want %v naming %q", c.name, err, c.want, c.key)
		}
	}
	bad := []Marker{
		{Shard: "s", Term: 5, Allocation: "a", Restore: RestorePoint{Term: 5}},                                           // restores from itself
		{Shard: "s", Term: 5, Allocation: "a", Restore: RestorePoint{Term: 4, Gen: 3}, Prev: layout.MarkerKey(4)},        // no md key
		{Shard: "s", Term: 5, Allocation: "a", Restore: RestorePoint{Term: 4}, Prev: layout.MarkerKey(3)},                // wrong prev
		{Shard: "s", Term: 5, Allocation: "a", Restore: RestorePoint{Term: 4}, Prev: layout.MarkerKey(4), Poisoned: "x"}, // bad poison key
	}
	for i, m := range bad {
		if _, err := m.Encode(); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("bad marker %d encoded: %v", i, err)
		}
	}
}

func TestLineageFromChain(t *testing.T) {
	mk := func(term, rterm, rgen int64) Marker {
		m := Marker{Shard: "s", Term: term, Allocation: "a", Restore: RestorePoint{Term: rterm, Gen: rgen}}
		if rterm > 0 {
			m.Prev = layout.MarkerKey(rterm)
		}
		return m
	}
	// 1 wrote 1..5; 2 restored (1,5) and never wrote; 3 lost a race
	// (off the chain); 4 restored (2,5) and wrote 6..9; 6 restored (4,9).
	markers := map[int64]Marker{1: mk(1, 0, 0), 2: mk(2, 1, 5), 3: mk(3, 2, 5), 4: mk(4, 2, 5), 6: mk(6, 4, 9)}
	chain, complete := ChainFrom(markers, 6)
	if !complete || len(chain) != 4 || chain[0].Term != 6 || chain[3].Term != 1 {
		t.Fatalf("chain %+v complete %v", chain, complete)
	}
	lin, err := LineageOf("s", chain, complete, OpenTip)
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{1, 1, 5}, {2, 6, 5}, {4, 6, 9}, {6, 10, OpenTip}}
	if len(lin.Ranges) != len(want) {
		t.Fatalf("ranges %+v", lin.Ranges)
	}
	for i := range want {
		if lin.Ranges[i] != want[i] {
			t.Fatalf("range %d: %+v, want %+v", i, lin.Ranges[i], want[i])
		}
	}
	checks := []struct {
		term, gen int64
		md, ckpt  bool
	}{
		{1, 5, true, true}, {1, 6, false, false}, {2, 5, false, true}, {3, 6, false, false},
		{4, 6, true, true}, {4, 10, false, false}, {6, 10, true, true}, {6, 9, false, true}, {6, 1000, true, true},
	}
	for _, c := range checks {
		if lin.Contains(c.term, c.gen) != c.md || lin.HasCheckpoint(c.term, c.gen) != c.ckpt {
			t.Errorf("(%d,%d): md %v ckpt %v, want %v %v", c.term, c.gen, lin.Contains(c.term, c.gen), lin.HasCheckpoint(c.term, c.gen), c.md, c.ckpt)
		}
	}
	for gen, term := range map[int64]int64{1: 1, 5: 1, 6: 4, 9: 4, 10: 6} {
		if got, ok := lin.TermOf(gen); !ok || got != term {
			t.Errorf("TermOf(%d) = %d %v, want %d", gen, got, ok, term)
		}
	}
	// Collected older markers: the chain is cut short and generations
	// below it have no term.
	delete(markers, 2)
	chain, complete = ChainFrom(markers, 6)
	lin, _ = LineageOf("s", chain, complete, OpenTip)
	if complete || lin.Base() != 5 {
		t.Fatalf("truncated chain: complete %v base %d", complete, lin.Base())
	}
	if _, ok := lin.TermOf(3); ok {
		t.Fatal("a generation below the truncated chain got a term")
	}
	// A chain whose cut goes backwards is corrupt.
	bad := map[int64]Marker{1: mk(1, 0, 0), 2: mk(2, 1, 5), 3: mk(3, 2, 4)}
	chain, complete = ChainFrom(bad, 3)
	if _, err := LineageOf("s", chain, complete, OpenTip); !errors.Is(err, fence.ErrCorruptBody) {
		t.Fatalf("backwards chain: %v", err)
	}
}

func TestContiguousAfter(t *testing.T) {
	for _, c := range []struct {
		gens  []int64
		after int64
		want  int64
	}{
		{nil, 0, 0}, {[]int64{1, 2, 3}, 0, 3}, {[]int64{1, 2, 4}, 0, 2}, {[]int64{3, 4, 5, 7}, 2, 5}, {[]int64{1, 2}, 5, 5}, {[]int64{4}, 2, 2},
	} {
		if got := ContiguousAfter(c.gens, c.after); got != c.want {
			t.Errorf("ContiguousAfter(%v, %d) = %d, want %d", c.gens, c.after, got, c.want)
		}
	}
}
