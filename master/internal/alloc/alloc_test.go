package alloc

import (
	"math/rand/v2"
	"testing"
)

// checkAllocator verifies the allocator's invariants against the live set:
// blocks tile the segment in address order, no two free blocks are adjacent,
// every free block is in the bin its size maps to, and used bytes add up.
func checkAllocator(t *testing.T, a *Allocator, live map[uint32]Extent) {
	t.Helper()
	var start uint32 = noNode
	for i := range a.nodes {
		n := a.nodes[i]
		if n.size > 0 && n.neighPrev == noNode {
			if start != noNode {
				t.Fatalf("two blocks without a previous neighbour: %d and %d", start, i)
			}
			start = uint32(i)
		}
	}
	var pos, used uint64
	prevFree := false
	for n := start; n != noNode; n = a.nodes[n].neighNext {
		nd := a.nodes[n]
		if nd.offset != pos {
			t.Fatalf("block %d at offset %d, want %d", n, nd.offset, pos)
		}
		if !nd.used {
			if prevFree {
				t.Fatalf("adjacent free blocks at %d were not coalesced", nd.offset)
			}
			found := false
			for m := a.head[binDown(nd.size)]; m != noNode; m = a.nodes[m].binNext {
				found = found || m == n
			}
			if !found {
				t.Fatalf("free block %d (size %d) missing from its bin", n, nd.size)
			}
		} else {
			used += nd.size
			if e, ok := live[n]; !ok || e.Offset != nd.offset || e.Size != nd.size {
				t.Fatalf("used block %d at %d+%d does not match a live allocation", n, nd.offset, nd.size)
			}
		}
		prevFree = !nd.used
		pos += nd.size
	}
	if pos != a.size {
		t.Fatalf("blocks cover %d bytes, segment has %d", pos, a.size)
	}
	if used != a.used {
		t.Fatalf("used %d, Allocator says %d", used, a.used)
	}
}

func TestBinsFit(t *testing.T) {
	for _, s := range []uint64{1, 7, 8, 9, 15, 16, 17, 100, 1000, 1 << 20, 1<<20 + 1, 1<<40 + 12345, 1 << 63} {
		up := binUp(s)
		g, m := up/8, uint64(up%8)
		var minSize uint64
		if g == 0 {
			minSize = m
		} else {
			e := g + 2
			minSize = (8 + m) << (e - 3)
		}
		if minSize < s {
			t.Errorf("size %d: binUp %d holds blocks from %d bytes, smaller than the request", s, up, minSize)
		}
		if binDown(s) > up || up-binDown(s) > 1 {
			t.Errorf("size %d: binDown %d, binUp %d", s, binDown(s), up)
		}
	}
}

func TestAllocatorRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const size = 1 << 20
	a := New(size)
	live := map[uint32]Extent{}
	for i := 0; i < 20000; i++ {
		if len(live) > 0 && rng.IntN(2) == 0 {
			for h := range live {
				a.Free(h)
				delete(live, h)
				break
			}
		} else {
			s := uint64(rng.IntN(4096) + 1)
			off, h, ok := a.Alloc(s)
			if ok {
				live[h] = Extent{off, s}
			} else {
				for _, n := range a.nodes {
					if !n.used && n.size >= s {
						t.Fatalf("alloc %d failed with a free block of %d at %d", s, n.size, n.offset)
					}
				}
			}
		}
		if i%500 == 0 {
			checkAllocator(t, a, live)
		}
	}
	for h := range live {
		a.Free(h)
	}
	checkAllocator(t, a, map[uint32]Extent{})
	if a.used != 0 || a.LargestFree() != size {
		t.Fatalf("after freeing everything: used %d, largest free %d", a.used, a.LargestFree())
	}
}

func TestAllocatorFillsExactly(t *testing.T) {
	// Ten 100-byte objects fill a 1000-byte segment to the last byte even
	// though 100 is not a size-class boundary.
	a := New(1000)
	for i := 0; i < 10; i++ {
		if _, _, ok := a.Alloc(100); !ok {
			t.Fatalf("alloc %d of 10 failed with %d bytes free", i+1, 1000-a.used)
		}
	}
}

func TestAllocatorExactFitAndExhaustion(t *testing.T) {
	a := New(100)
	off1, h1, ok := a.Alloc(60)
	if !ok || off1 != 0 {
		t.Fatalf("alloc 60: %d %v", off1, ok)
	}
	if _, _, ok := a.Alloc(41); ok {
		t.Fatal("alloc 41 of 40 free bytes succeeded")
	}
	off2, _, ok := a.Alloc(40)
	if !ok || off2 != 60 {
		t.Fatalf("alloc 40: %d %v", off2, ok)
	}
	a.Free(h1)
	if got := a.LargestFree(); got != 60 {
		t.Fatalf("largest free %d, want 60", got)
	}
}

func TestRebuildAllocator(t *testing.T) {
	exts := []Extent{{500, 100}, {0, 10}, {100, 50}}
	a, hs, err := Rebuild(1000, exts)
	if err != nil {
		t.Fatal(err)
	}
	live := map[uint32]Extent{}
	for i, h := range hs {
		live[h] = exts[i]
	}
	checkAllocator(t, a, live)
	if a.used != 160 {
		t.Fatalf("used %d", a.used)
	}
	a.Free(hs[2])
	delete(live, hs[2])
	checkAllocator(t, a, live)
	// The freed range coalesced with the gaps on both sides: 10..500.
	if got := a.LargestFree(); got != 490 {
		t.Fatalf("largest free %d, want 490", got)
	}

	for _, bad := range [][]Extent{
		{{0, 10}, {5, 10}},    // overlap
		{{990, 20}},           // past the end
		{{10, 0}},             // empty
		{{^uint64(0) - 1, 4}}, // wraps
	} {
		if _, _, err := Rebuild(1000, bad); err == nil {
			t.Errorf("rebuild of %v succeeded", bad)
		}
	}
}

func TestAllocatorKeepsLargeBlocksWhole(t *testing.T) {
	// Small allocations come from the small hole, not by splitting the big one.
	a, _, err := Rebuild(1<<20, []Extent{{64, 1 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	off, _, ok := a.Alloc(32)
	if !ok || off != 0 {
		t.Fatalf("alloc 32 went to offset %d", off)
	}
	if a.LargestFree() != 1<<20-64-1<<10 {
		t.Fatalf("large block was split: largest free %d", a.LargestFree())
	}
}
