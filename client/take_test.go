package client

import (
	"context"
	"testing"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

func newTestShard(t *testing.T) *Shard {
	t.Helper()
	c, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.Shard("s")
}

func queueCall(sh *Shard, op string) *call {
	cl := &call{ctx: context.Background(), ops: [][]byte{[]byte(op)}, size: len(op), done: make(chan struct{})}
	sh.mu.Lock()
	sh.queue = append(sh.queue, cl)
	sh.mu.Unlock()
	return cl
}

// An ack counts its callers as on their way back; the sender's next batch
// resets the count. Callers that never append again delay the batch, they
// do not hold it: take returns what is queued.
func TestTakeWaitsBoundedForAcknowledgedCallers(t *testing.T) {
	sh := newTestShard(t)
	st := &stream{sh: sh}
	var calls []*call
	for _, op := range []string{"a", "b", "c"} {
		cl := queueCall(sh, op)
		cl.sent = true
		calls = append(calls, cl)
	}
	sh.mu.Lock()
	sh.queue = nil
	sh.mu.Unlock()
	st.answer(&request{id: 1, calls: calls, ops: 3}, &sidecarv1.AppendStreamResponse{RequestId: 1,
		Ack: &sidecarv1.AppendResponse{Term: 1, Gen: 4, FirstSeqNo: 10, Count: 3}})
	for i, cl := range calls {
		if !cl.finished || cl.err != nil || cl.ack.FirstSeqNo != int64(10+i) {
			t.Fatalf("call %d: finished %v, ack %+v, err %v", i, cl.finished, cl.ack, cl.err)
		}
	}
	if sh.returning != 3 {
		t.Fatalf("returning %d after an ack of 3 calls, want 3", sh.returning)
	}

	// One of the three comes back; the other two never do.
	back := queueCall(sh, "a2")
	var none *stream
	batch, ok := sh.take(&none)
	if !ok || len(batch) != 1 || batch[0] != back || !back.sent {
		t.Fatalf("take: %v %d calls, want the one queued call", ok, len(batch))
	}
	if sh.returning != 0 {
		t.Fatalf("returning %d after a batch was taken, want 0", sh.returning)
	}
}
