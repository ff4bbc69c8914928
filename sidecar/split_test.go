package sidecar

import (
	"bytes"
	"testing"

	"github.com/shardfence/shardfence/translog"
)

// A generation is sent as consecutive batches of at most maxMessageOps
// bytes of ops, with the same term and generation and the sequence
// numbers moving on; an op larger than that goes alone. A file chunk is
// cut into pieces of maxMessageData bytes, only the last keeping Last.
func TestSplitKeepsMessagesUnderTheStockLimit(t *testing.T) {
	mib := bytes.Repeat([]byte("x"), 1<<20)
	b := translog.Batch{Term: 3, Gen: 7, FirstSeqNo: 100}
	for range 16 {
		b.Ops = append(b.Ops, mib)
	}
	b.Ops = append(b.Ops, bytes.Repeat([]byte("y"), 5<<20), []byte("z"))
	parts := splitBatch(b)
	next, ops := int64(100), 0
	for _, p := range parts {
		size := 0
		for _, op := range p.Ops {
			size += len(op) + 8
		}
		if p.Term != 3 || p.Gen != 7 || p.FirstSeqNo != next || len(p.Ops) == 0 || size > maxMessageOps && len(p.Ops) > 1 {
			t.Fatalf("part %+v of %d bytes after seq %d", p.FirstSeqNo, size, next)
		}
		next += int64(len(p.Ops))
		ops += len(p.Ops)
	}
	if ops != len(b.Ops) || len(parts) < 6 {
		t.Fatalf("%d ops in %d parts", ops, len(parts))
	}
	if got := splitBatch(translog.Batch{Gen: 1}); len(got) != 1 {
		t.Fatalf("an empty batch: %d parts", len(got))
	}

	f := FileChunk{Name: "f", Offset: 10, Data: bytes.Repeat([]byte("d"), 2<<20+5), Last: true}
	chunks := splitChunk(f)
	off := int64(10)
	var data []byte
	for i, c := range chunks {
		if c.Offset != off || len(c.Data) > maxMessageData || c.Last != (i == len(chunks)-1) || c.Name != "f" {
			t.Fatalf("chunk %d: offset %d, %d bytes, last %v", i, c.Offset, len(c.Data), c.Last)
		}
		off += int64(len(c.Data))
		data = append(data, c.Data...)
	}
	if !bytes.Equal(data, f.Data) {
		t.Fatal("the chunks do not make up the file")
	}
}
