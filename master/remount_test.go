package master

import (
	"errors"
	"testing"

	"github.com/shardfence/shardfence/master/internal/alloc"
)

func TestCheckRemount(t *testing.T) {
	owner := &client{id: "c1"}
	segments := map[uint64]*segment{
		1: {id: 1, client: owner, base: 0, size: 100},
		2: {id: 2, client: owner, base: 100, size: 50},
		3: {id: 3, client: &client{id: "c2"}, base: 0, size: 10},
	}
	spec := func(id, base, size uint64) SegmentSpec {
		return SegmentSpec{ID: id, Base: base, Size: size, Endpoint: "ep"}
	}
	for _, tc := range []struct {
		name    string
		client  string
		specs   []SegmentSpec
		want    []uint64 // the segments, in request order, when accepted
		wantSeg uint64   // the segment a refusal names
		wantErr error
	}{
		{name: "one", client: "c1", specs: []SegmentSpec{spec(1, 0, 100)}, want: []uint64{1}},
		{name: "request order", client: "c1", specs: []SegmentSpec{spec(2, 100, 50), spec(1, 0, 100)}, want: []uint64{2, 1}},
		{name: "no client", client: "", specs: []SegmentSpec{spec(1, 0, 100)}, wantErr: ErrInvalidArgument},
		{name: "no segments", client: "c1", wantErr: ErrInvalidArgument},
		{name: "invalid spec", client: "c1", specs: []SegmentSpec{{ID: 1, Base: 0, Size: 100}}, wantSeg: 1, wantErr: ErrInvalidArgument},
		{name: "unknown", client: "c1", specs: []SegmentSpec{spec(1, 0, 100), spec(9, 0, 1)}, wantSeg: 9, wantErr: ErrSegmentNotFound},
		{name: "another client's", client: "c1", specs: []SegmentSpec{spec(3, 0, 10)}, wantSeg: 3, wantErr: ErrWrongClient},
		{name: "moved base", client: "c1", specs: []SegmentSpec{spec(1, 1, 100)}, wantSeg: 1, wantErr: ErrSegmentMismatch},
		{name: "other size", client: "c1", specs: []SegmentSpec{spec(2, 100, 51)}, wantSeg: 2, wantErr: ErrSegmentMismatch},
		{name: "listed twice", client: "c1", specs: []SegmentSpec{spec(1, 0, 100), spec(2, 100, 50), spec(1, 0, 100)}, wantSeg: 1, wantErr: ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segs, r := checkRemount(tc.client, tc.specs, segments)
			if tc.wantErr != nil {
				if !errors.Is(r.err, tc.wantErr) || r.seg != tc.wantSeg || r.hint == "" || segs != nil {
					t.Fatalf("refusal %+v (segments %v), want %v on segment %d with a hint", r, segs, tc.wantErr, tc.wantSeg)
				}
				return
			}
			if r.err != nil || len(segs) != len(tc.want) {
				t.Fatalf("checkRemount = %v, %+v; want segments %v", segs, r, tc.want)
			}
			for i, s := range segs {
				if s.id != tc.want[i] {
					t.Fatalf("segment %d is %d, want %d", i, s.id, tc.want[i])
				}
			}
		})
	}
}

func TestRebuildAllocators(t *testing.T) {
	segs := []*segment{{id: 1, size: 100}, {id: 2, size: 10}}
	for _, tc := range []struct {
		name    string
		ext     [][]alloc.Extent
		wantSeg uint64 // the segment refused, 0 when accepted
	}{
		{name: "empty", ext: [][]alloc.Extent{nil, nil}},
		{name: "fits", ext: [][]alloc.Extent{{{Offset: 0, Size: 50}, {Offset: 50, Size: 50}}, {{Offset: 0, Size: 10}}}},
		{name: "overlap", ext: [][]alloc.Extent{{{Offset: 0, Size: 50}, {Offset: 40, Size: 20}}, nil}, wantSeg: 1},
		{name: "overrun", ext: [][]alloc.Extent{{{Offset: 0, Size: 10}}, {{Offset: 5, Size: 6}}}, wantSeg: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lens := make([]int, len(tc.ext))
			for i := range tc.ext {
				lens[i] = len(tc.ext[i])
			}
			allocs, handles, r := rebuildAllocators(segs, tc.ext)
			if tc.wantSeg != 0 {
				if !errors.Is(r.err, ErrSegmentMismatch) || r.seg != tc.wantSeg || allocs != nil {
					t.Fatalf("refusal %+v, want a mismatch of segment %d", r, tc.wantSeg)
				}
				return
			}
			if r.err != nil || len(allocs) != len(segs) {
				t.Fatalf("rebuildAllocators refused %+v", r)
			}
			for i := range segs {
				if len(handles[i]) != lens[i] || tc.ext[i] != nil {
					t.Fatalf("segment %d: %d handles for its extents, extents kept: %v", i, len(handles[i]), tc.ext[i])
				}
			}
		})
	}
}
