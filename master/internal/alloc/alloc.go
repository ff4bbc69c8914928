// Package alloc is the memory placement of one segment: which byte ranges
// are free, which are held by a replica (by handle), and the rebuild of that
// picture from the replicas a restored segment holds. It is pure data
// structure, with no locking and no I/O; the master guards each segment's
// allocator with the segment's mutex.
package alloc

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// Allocator hands out byte ranges of one segment. It is a two-level
// segregated-fit allocator: free blocks sit in size-class bins (eight
// sub-classes per power of two), a two-level bitmap finds the first non-empty
// bin that is guaranteed to fit in O(1), and every block keeps its physical
// neighbours so a free coalesces with adjacent free blocks in O(1). Picking
// from the smallest fitting class keeps large free blocks whole, which is
// what keeps fragmentation low under mixed sizes.
//
// It is not safe for concurrent use; a segment guards it with its own mutex.
type Allocator struct {
	size      uint64
	used      uint64
	nodes     []allocNode
	freeIdx   []uint32 // recycled node slots
	head      [binCount]uint32
	groupMask uint64            // bit g set: some bin of group g is non-empty
	binMask   [groupCount]uint8 // bit m set: bin g*8+m is non-empty
}

const (
	groupCount = 64
	binCount   = groupCount * 8
	noNode     = ^uint32(0)
)

type allocNode struct {
	offset, size         uint64
	binPrev, binNext     uint32
	neighPrev, neighNext uint32
	used                 bool
}

// Extent is a used range of a segment, as a restored replica describes it.
type Extent struct {
	Offset, Size uint64
}

// New is the allocator of an empty segment of size bytes.
func New(size uint64) *Allocator {
	a := &Allocator{size: size}
	for i := range a.head {
		a.head[i] = noNode
	}
	if size > 0 {
		n := a.newNode(allocNode{offset: 0, size: size, neighPrev: noNode, neighNext: noNode})
		a.insertFree(n)
	}
	return a
}

// Rebuild builds the Allocator of a segment whose used ranges are
// known (a remount after failover). It fails, changing nothing anywhere, if a
// range is empty, leaves the segment or overlaps another: the restored
// metadata and the remounted segment disagree. handles[i] is the allocation
// handle of extents[i].
func Rebuild(size uint64, extents []Extent) (a *Allocator, handles []uint32, err error) {
	order := make([]int32, len(extents))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(extents[a].Offset, extents[b].Offset) })
	a = &Allocator{size: size, nodes: make([]allocNode, 0, 2*len(extents)+1)}
	for i := range a.head {
		a.head[i] = noNode
	}
	handles = make([]uint32, len(extents))
	prev := noNode
	link := func(n uint32) {
		a.nodes[n].neighPrev = prev
		if prev != noNode {
			a.nodes[prev].neighNext = n
		}
		prev = n
	}
	var pos uint64
	for _, i := range order {
		e := extents[i]
		if e.Size == 0 {
			return nil, nil, fmt.Errorf("replica at offset %d has size 0", e.Offset)
		}
		if e.Offset < pos {
			return nil, nil, fmt.Errorf("replica at offset %d (size %d) overlaps the previous one ending at %d", e.Offset, e.Size, pos)
		}
		end := e.Offset + e.Size
		if end < e.Offset || end > size {
			return nil, nil, fmt.Errorf("replica at offset %d (size %d) ends past the segment size %d", e.Offset, e.Size, size)
		}
		if e.Offset > pos {
			link(a.newNode(allocNode{offset: pos, size: e.Offset - pos, neighNext: noNode}))
		}
		n := a.newNode(allocNode{offset: e.Offset, size: e.Size, used: true, neighNext: noNode})
		link(n)
		handles[i] = n
		a.used += e.Size
		pos = end
	}
	if pos < size {
		link(a.newNode(allocNode{offset: pos, size: size - pos, neighNext: noNode}))
	}
	for n := range a.nodes {
		if !a.nodes[n].used {
			a.insertFree(uint32(n))
		}
	}
	return a, handles, nil
}

func (a *Allocator) newNode(n allocNode) uint32 {
	n.binPrev, n.binNext = noNode, noNode
	if k := len(a.freeIdx); k > 0 {
		idx := a.freeIdx[k-1]
		a.freeIdx = a.freeIdx[:k-1]
		a.nodes[idx] = n
		return idx
	}
	a.nodes = append(a.nodes, n)
	return uint32(len(a.nodes) - 1)
}

// binDown is the bin a free block of this size is filed under: every block
// in bin b is at least binMin(b) bytes.
func binDown(size uint64) int {
	if size < 8 {
		return int(size)
	}
	e := bits.Len64(size) - 1
	return (e-2)*8 + int((size>>(e-3))&7)
}

// binUp is the first bin whose every block fits size.
func binUp(size uint64) int {
	b := binDown(size)
	if size >= 8 && size&(1<<(bits.Len64(size)-4)-1) != 0 {
		b++
	}
	return b
}

func (a *Allocator) insertFree(n uint32) {
	b := binDown(a.nodes[n].size)
	h := a.head[b]
	a.nodes[n].binPrev = noNode
	a.nodes[n].binNext = h
	if h != noNode {
		a.nodes[h].binPrev = n
	}
	a.head[b] = n
	a.binMask[b/8] |= 1 << (b % 8)
	a.groupMask |= 1 << (b / 8)
}

func (a *Allocator) removeFree(n uint32) {
	nd := &a.nodes[n]
	b := binDown(nd.size)
	if nd.binPrev != noNode {
		a.nodes[nd.binPrev].binNext = nd.binNext
	} else {
		a.head[b] = nd.binNext
	}
	if nd.binNext != noNode {
		a.nodes[nd.binNext].binPrev = nd.binPrev
	}
	nd.binPrev, nd.binNext = noNode, noNode
	if a.head[b] == noNode {
		a.binMask[b/8] &^= 1 << (b % 8)
		if a.binMask[b/8] == 0 {
			a.groupMask &^= 1 << (b / 8)
		}
	}
}

// firstBin returns the first non-empty bin at or above b, or -1.
func (a *Allocator) firstBin(b int) int {
	if b >= binCount {
		return -1
	}
	g := b / 8
	if m := a.binMask[g] &^ (1<<(b%8) - 1); m != 0 {
		return g*8 + bits.TrailingZeros8(m)
	}
	rest := a.groupMask &^ (1<<(g+1) - 1)
	if g == groupCount-1 || rest == 0 {
		return -1
	}
	g = bits.TrailingZeros64(rest)
	return g*8 + bits.TrailingZeros8(a.binMask[g])
}

// Alloc reserves size bytes and returns their offset and a handle for free.
func (a *Allocator) Alloc(size uint64) (offset uint64, handle uint32, ok bool) {
	if size == 0 || size > a.size-a.used {
		return 0, noNode, false
	}
	n := noNode
	if b := a.firstBin(binUp(size)); b >= 0 {
		n = a.head[b]
	} else {
		// No class is guaranteed to fit, but the request's own class may
		// hold a block that happens to be large enough (the last 100 bytes
		// for a 100-byte object). Only this one bin is searched.
		for m := a.head[binDown(size)]; m != noNode; m = a.nodes[m].binNext {
			if a.nodes[m].size >= size {
				n = m
				break
			}
		}
		if n == noNode {
			return 0, noNode, false
		}
	}
	a.removeFree(n)
	nd := a.nodes[n]
	if nd.size > size {
		rest := a.newNode(allocNode{offset: nd.offset + size, size: nd.size - size, neighPrev: n, neighNext: nd.neighNext})
		if nd.neighNext != noNode {
			a.nodes[nd.neighNext].neighPrev = rest
		}
		a.nodes[n].neighNext = rest
		a.nodes[n].size = size
		a.insertFree(rest)
	}
	a.nodes[n].used = true
	a.used += size
	return nd.offset, n, true
}

// Free releases an allocation and merges it with free neighbours.
func (a *Allocator) Free(handle uint32) {
	if int(handle) >= len(a.nodes) || !a.nodes[handle].used {
		return
	}
	nd := &a.nodes[handle]
	nd.used = false
	a.used -= nd.size
	if p := nd.neighPrev; p != noNode && !a.nodes[p].used {
		a.removeFree(p)
		a.nodes[p].size += nd.size
		a.unlink(handle)
		handle = p
		nd = &a.nodes[handle]
	}
	if q := nd.neighNext; q != noNode && !a.nodes[q].used {
		a.removeFree(q)
		nd.size += a.nodes[q].size
		a.unlink(q)
	}
	a.insertFree(handle)
}

// unlink drops node n, already merged into its previous neighbour.
func (a *Allocator) unlink(n uint32) {
	nd := a.nodes[n]
	if nd.neighPrev != noNode {
		a.nodes[nd.neighPrev].neighNext = nd.neighNext
	}
	if nd.neighNext != noNode {
		a.nodes[nd.neighNext].neighPrev = nd.neighPrev
	}
	a.nodes[n] = allocNode{}
	a.freeIdx = append(a.freeIdx, n)
}

// LargestFree is the size of the largest free block: the biggest object the
// segment can take right now, whatever its total free space.
func (a *Allocator) LargestFree() uint64 {
	if a.groupMask == 0 {
		return 0
	}
	g := 63 - bits.LeadingZeros64(a.groupMask)
	b := g*8 + 7 - bits.LeadingZeros8(a.binMask[g])
	var best uint64
	for n := a.head[b]; n != noNode; n = a.nodes[n].binNext {
		best = max(best, a.nodes[n].size)
	}
	return best
}

// Used is the number of bytes allocated.
func (a *Allocator) Used() uint64 { return a.used }

// NoHandle is the handle of no allocation (a replica whose segment has no
// allocator yet).
const NoHandle = noNode
