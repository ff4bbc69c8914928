package master

import (
	"context"
	"errors"
	"testing"
)

func TestSumChunks(t *testing.T) {
	bad := errors.New("bad record")
	ok := func(done, dropped int, maxReplica uint64) decodedChunk {
		return decodedChunk{done: done, dropped: dropped, maxReplica: maxReplica}
	}
	for _, tc := range []struct {
		name      string
		dec       []decodedChunk
		total     uint64
		want      chunkSum
		wantChunk int   // the chunk a chunkError names
		wantErr   error // errors.Is target when refused
	}{
		{name: "none", dec: nil, total: 0},
		{name: "adds up", dec: []decodedChunk{ok(3, 1, 7), ok(2, 0, 9), ok(0, 2, 4)}, total: 5, want: chunkSum{dropped: 3, maxReplica: 9}},
		{name: "count differs", dec: []decodedChunk{ok(3, 0, 1)}, total: 4, wantChunk: -1},
		{name: "first error in file order", dec: []decodedChunk{ok(1, 0, 1), {err: bad, done: -1}, {done: -1}}, total: 1, wantChunk: 1, wantErr: bad},
		{name: "conversion", dec: []decodedChunk{{err: bad, conv: true}}, total: 0, wantChunk: 0, wantErr: bad},
		{name: "interrupted", dec: []decodedChunk{ok(1, 0, 1), {err: context.Canceled, done: -1}}, total: 1, wantErr: context.Canceled},
		{name: "not reached", dec: []decodedChunk{ok(1, 0, 1), {done: -1}}, total: 1, wantChunk: -2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := sumChunks(tc.dec, tc.total)
			var ce *chunkError
			switch {
			case tc.wantErr == nil && tc.wantChunk == 0:
				if err != nil || sum != tc.want {
					t.Fatalf("sumChunks = %+v, %v; want %+v", sum, err, tc.want)
				}
			case tc.wantErr == context.Canceled:
				if err != context.Canceled {
					t.Fatalf("error %v, want the context's as it is", err)
				}
			case tc.wantChunk == -2:
				if err == nil || errors.As(err, &ce) {
					t.Fatalf("error %v, want a chunk not decoded", err)
				}
			default:
				if !errors.As(err, &ce) || ce.chunk != tc.wantChunk || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("error %v, want a chunkError for chunk %d", err, tc.wantChunk)
				}
				if ce.conv != tc.dec[max(ce.chunk, 0)].conv {
					t.Fatalf("conversion flag %v lost", ce.conv)
				}
			}
		})
	}
}
