package translog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
)

// The pipeline is stepped by hand here: no goroutine, clock or store.

func testPipeline(o Options) *pipeline {
	o.Shard, o.Term, o.Allocation = shard, 3, "a1"
	p := newPipeline(o.withDefaults())
	return &p
}

func newEntry(t *testing.T, p *pipeline, ops ...string) *entry {
	t.Helper()
	b := make([][]byte, len(ops))
	for i, op := range ops {
		b[i] = []byte(op)
	}
	size, err := p.measure(b)
	if err != nil {
		t.Fatal(err)
	}
	return &entry{ops: b, size: size}
}

func mustEnqueue(t *testing.T, p *pipeline, es ...*entry) {
	t.Helper()
	for _, e := range es {
		if ok, err := p.enqueue(e); !ok || err != nil {
			t.Fatalf("enqueue: %v, %v", ok, err)
		}
	}
}

// delivered returns what the pipeline completed, as "op:gen/seq" for an
// ack and "op:error" for a failure.
func delivered(p *pipeline) []string {
	var out []string
	for _, e := range p.deliver() {
		if e.err != nil {
			out = append(out, fmt.Sprintf("%s:error", e.ops[0]))
		} else {
			out = append(out, fmt.Sprintf("%s:%d/%d", e.ops[0], e.ack.Gen, e.ack.FirstSeqNo))
		}
	}
	return out
}

func same(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestPipelineAdmission(t *testing.T) {
	p := testPipeline(Options{MaxInFlightBytes: 80, MaxSyncBytes: 80})
	if _, err := p.measure(nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("no ops: %v", err)
	}
	if _, err := p.measure([][]byte{make([]byte, 100)}); !errors.Is(err, blobstore.ErrTooLarge) {
		t.Fatalf("an append no sync can carry: %v", err)
	}
	a, b := newEntry(t, p, "aaaaaaaaaaaaaaaaaaaa"), newEntry(t, p, "bbbbbbbbbbbbbbbbbbbb")
	mustEnqueue(t, p, a)
	if a.size != 20+opOverhead || p.inflight != a.size {
		t.Fatalf("size %d, in flight %d", a.size, p.inflight)
	}
	mustEnqueue(t, p, b)
	c := newEntry(t, p, "c")
	if ok, err := p.enqueue(c); ok || err != nil {
		t.Fatalf("past the in-flight limit an append waits: %v, %v", ok, err)
	}
	p.failFast = true
	if _, err := p.enqueue(c); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("fail fast: %v", err)
	}
	// Completing an append frees its bytes.
	s := p.start(p.cut(), 0, nil)
	p.record(outcome{sync: s, step: stepMD}, 0, nil)
	p.record(outcome{sync: s, step: stepCAS}, 0, nil)
	if got := delivered(p); !same(got, []string{"aaaaaaaaaaaaaaaaaaaa:1/0", "bbbbbbbbbbbbbbbbbbbb:1/1"}) || p.inflight != 0 {
		t.Fatalf("delivered %v, in flight %d", got, p.inflight)
	}
	if ok, err := p.enqueue(c); !ok || err != nil {
		t.Fatalf("after the acks: %v, %v", ok, err)
	}
	p.close()
	if _, err := p.enqueue(newEntry(t, p, "d")); !errors.Is(err, ErrClosed) {
		t.Fatalf("closing: %v", err)
	}
}

func TestPipelineCutsBatchesAndGathers(t *testing.T) {
	p := testPipeline(Options{MaxSyncBytes: 3 * (1 + opOverhead), MaxGatherDelay: 2 * time.Millisecond})
	for _, op := range []string{"a", "b", "c", "d", "e"} {
		mustEnqueue(t, p, newEntry(t, p, op))
	}
	if d := p.gatherDelay(); d != 0 {
		t.Fatalf("no sync has run yet: gather delay %v", d)
	}
	first := p.cut()
	if len(first) != 3 || string(first[0].ops[0]) != "a" || p.lastBatch != 3 {
		t.Fatalf("first batch %d appends, want 3 in order", len(first))
	}
	if second := p.cut(); len(second) != 2 || string(second[0].ops[0]) != "d" {
		t.Fatalf("second batch %d appends", len(second))
	}
	if !p.idle() {
		t.Fatal("queue not empty")
	}
	big := newEntry(t, p, string(make([]byte, 3*(1+opOverhead)-opOverhead)))
	mustEnqueue(t, p, big)
	if b := p.cut(); len(b) != 1 {
		t.Fatalf("an append of the whole sync limit is a batch of its own: %d", len(b))
	}
	for _, c := range []struct {
		lastSync  time.Duration
		maxGather time.Duration
		queued    int
		closing   bool
		want      time.Duration
	}{
		{lastSync: 80 * time.Millisecond, maxGather: 2 * time.Millisecond, queued: 1, want: 2 * time.Millisecond},
		{lastSync: 8 * time.Millisecond, maxGather: 2 * time.Millisecond, queued: 1, want: time.Millisecond},
		{lastSync: 80 * time.Millisecond, maxGather: 2 * time.Millisecond, queued: 3, want: 0},
		{lastSync: 80 * time.Millisecond, maxGather: 2 * time.Millisecond, queued: 1, closing: true, want: 0},
		{lastSync: 80 * time.Millisecond, maxGather: -1, queued: 1, want: 0},
	} {
		q := testPipeline(Options{MaxGatherDelay: c.maxGather})
		q.lastBatch, q.lastSyncDur, q.closing = 3, int64(c.lastSync), c.closing
		for range c.queued {
			q.queue = append(q.queue, &entry{})
		}
		if got := q.gatherDelay(); got != c.want {
			t.Errorf("%+v: gather delay %v, want %v", c, got, c.want)
		}
	}
}

// Acks go out in generation order, only when both the md and the CAS (or
// the lease) landed, with the sequence numbers the generation assigned.
func TestPipelineAcksInGenerationOrder(t *testing.T) {
	p := testPipeline(Options{StartGen: 5, StartSeqNo: 100})
	a, b, c := newEntry(t, p, "a", "a2"), newEntry(t, p, "b"), newEntry(t, p, "c")
	mustEnqueue(t, p, a, b)
	s5 := p.start(p.cut(), 10, nil)
	mustEnqueue(t, p, c)
	s6 := p.start(p.cut(), 20, nil)
	if s5.gen != 5 || s5.firstSeqNo != 100 || s6.gen != 6 || s6.firstSeqNo != 103 || p.nextGen != 7 || p.nextSeqNo != 104 {
		t.Fatalf("gens %d/%d, seqs %d/%d, next %d/%d", s5.gen, s6.gen, s5.firstSeqNo, s6.firstSeqNo, p.nextGen, p.nextSeqNo)
	}
	for i, st := range []struct {
		o    outcome
		want []string
	}{
		{outcome{sync: s6, step: stepMD}, nil},
		{outcome{sync: s6, step: stepCAS}, nil}, // gen 5 not acked yet
		{outcome{sync: s5, step: stepCAS}, nil}, // its md is still out
		{outcome{sync: s5, step: stepMD}, []string{"a:5/100", "b:5/102", "c:6/103"}},
	} {
		p.record(st.o, 50, nil)
		if got := delivered(p); !same(got, st.want) {
			t.Fatalf("step %d: delivered %v, want %v", i, got, st.want)
		}
	}
	if p.acked != 2 || p.lastSyncDur != 30 {
		t.Fatalf("acked %d, last sync %d", p.acked, p.lastSyncDur)
	}
}

// The first failed generation fails itself and everything after it,
// started or queued; a later generation keeps its own error.
func TestPipelineFailsEverythingFromTheFirstFailure(t *testing.T) {
	p := testPipeline(Options{})
	mustEnqueue(t, p, newEntry(t, p, "a"))
	s1 := p.start(p.cut(), 0, nil)
	mustEnqueue(t, p, newEntry(t, p, "b"))
	s2 := p.start(p.cut(), 0, nil)
	mustEnqueue(t, p, newEntry(t, p, "c"))
	p.record(outcome{sync: s1, step: stepCAS}, 0, nil)
	bad := &fence.BodyError{Shard: shard, Key: "k", Err: fence.ErrCorruptBody}
	p.record(outcome{sync: s2, step: stepMD, err: bad}, 0, nil)
	if got := delivered(p); got != nil {
		t.Fatalf("gen 2 failed while gen 1 is open: delivered %v", got)
	}
	p.record(outcome{sync: s1, step: stepMD, err: errors.New("md of gen 1 refused")}, 0, nil)
	got := p.deliver()
	if len(got) != 3 {
		t.Fatalf("%d appends failed, want all 3", len(got))
	}
	var te *Error
	if !errors.As(got[0].err, &te) || te.Gen != 1 || !errors.Is(got[1].err, fence.ErrCorruptBody) || !errors.As(got[2].err, &te) || te.Gen != 1 {
		t.Fatalf("errors: %v / %v / %v", got[0].err, got[1].err, got[2].err)
	}
	if _, err := p.enqueue(newEntry(t, p, "d")); err == nil || p.err == nil {
		t.Fatal("a failed writer admits no more appends")
	}
	if s := p.start([]*entry{newEntry(t, p, "e")}, 0, nil); s != nil || len(p.deliver()) != 1 {
		t.Fatal("a failed writer starts no sync and fails its batch")
	}
}

// FencedTerminal: once the instance is fenced nothing is acknowledged, not
// even a generation whose md and CAS both landed.
func TestPipelineAcksNothingOnceFenced(t *testing.T) {
	p := testPipeline(Options{})
	mustEnqueue(t, p, newEntry(t, p, "a"))
	s := p.start(p.cut(), 0, nil)
	mustEnqueue(t, p, newEntry(t, p, "queued"))
	p.record(outcome{sync: s, step: stepCAS}, 0, nil)
	fenced := &fence.FencedError{Shard: shard, Term: 3, Allocation: "a1", Successor: 4, Reason: "poison seen by another path"}
	p.record(outcome{sync: s, step: stepMD}, 0, fenced)
	got := p.deliver()
	if len(got) != 2 || !errors.Is(got[0].err, fence.ErrFenced) || !errors.Is(got[1].err, fence.ErrFenced) {
		t.Fatalf("delivered %d, first %v", len(got), got)
	}
	if succ, ok := fence.SuccessorTerm(got[0].err); !ok || succ != 4 {
		t.Fatalf("the fencing error lost its successor term: %v", got[0].err)
	}
	if _, err := p.enqueue(newEntry(t, p, "late")); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("append after fencing: %v", err)
	}
}

func TestPipelineOrderOfASync(t *testing.T) {
	lease := 10 * time.Second
	for _, c := range []struct {
		name       string
		o          Options
		lastCAS    int64 // steady ns of the last successful CAS; <0: none yet
		now        int64
		want       order
		wantString string
	}{
		{"unfenced", Options{FencingDisabled: true}, -1, 0, mdOnly, "md only"},
		{"unfenced ignores lease mode", Options{FencingDisabled: true, FencingMode: Lease}, -1, 0, mdOnly, "md only"},
		{"per sync, concurrent", Options{}, -1, 0, pipelined, "pipelined"},
		{"per sync, sequenced", Options{AckOrder: Sequenced}, -1, 0, mdThenCAS, "md then CAS"},
		{"lease, no CAS yet", Options{FencingMode: Lease}, -1, 0, mdWithCAS, "md with CAS"},
		{"lease, sequenced, no CAS yet", Options{FencingMode: Lease, AckOrder: Sequenced}, -1, 0, mdThenCAS, "md then CAS"},
		{"lease covering", Options{FencingMode: Lease}, 0, int64(lease) - 1, inLease, "in lease"},
		{"lease just run out", Options{FencingMode: Lease}, 0, int64(lease), mdWithCAS, "md with CAS"},
		{"lease run out, sequenced", Options{FencingMode: Lease, AckOrder: Sequenced}, 0, int64(lease), mdThenCAS, "md then CAS"},
	} {
		c.o.LeaseInterval = lease
		p := testPipeline(c.o)
		if c.lastCAS >= 0 {
			p.lease.SentAt, p.lease.Valid = c.lastCAS, true
		}
		if got := p.orderFor(c.now); got != c.want {
			t.Errorf("%s: order %d, want %s", c.name, got, c.wantString)
		}
	}
}

// Lease mode: a CAS starts the lease at its send time; an md landing
// inside it is acked without a CAS, one landing after it needs a CAS.
func TestPipelineLeaseCoverage(t *testing.T) {
	lease := 10 * time.Second
	p := testPipeline(Options{FencingMode: Lease, LeaseInterval: lease})
	mustEnqueue(t, p, newEntry(t, p, "renew"))
	s1 := p.start(p.cut(), 0, nil)
	p.record(outcome{sync: s1, step: stepMD}, 0, nil)
	p.record(outcome{sync: s1, step: stepCAS, sent: 100}, int64(time.Second), nil) // answered a second after it was sent
	if got := delivered(p); !same(got, []string{"renew:1/0"}) {
		t.Fatalf("delivered %v", got)
	}
	mustEnqueue(t, p, newEntry(t, p, "inside"))
	s2 := p.start(p.cut(), 0, nil)
	if p.orderFor(int64(lease)) != inLease {
		t.Fatal("the lease counts from the CAS's send time")
	}
	p.record(outcome{sync: s2, step: stepMD}, 0, nil)
	if !p.leaseCovers(s2, int64(lease)+99, nil) || p.stats.LeaseSkips != 1 {
		t.Fatal("an md landing inside the lease is acked without a CAS")
	}
	if got := delivered(p); !same(got, []string{"inside:2/1"}) {
		t.Fatalf("delivered %v", got)
	}
	mustEnqueue(t, p, newEntry(t, p, "late"))
	s3 := p.start(p.cut(), 0, nil)
	p.record(outcome{sync: s3, step: stepMD}, 0, nil)
	if p.leaseCovers(s3, int64(lease)+100, nil) || len(p.deliver()) != 0 {
		t.Fatal("an md landing after the lease ran out needs a CAS first")
	}
}

// Close fails what is still queued; a sync in progress keeps its own
// error when it already failed.
func TestPipelineFailOnClose(t *testing.T) {
	p := testPipeline(Options{})
	mustEnqueue(t, p, newEntry(t, p, "a"))
	p.start(p.cut(), 0, nil)
	mustEnqueue(t, p, newEntry(t, p, "b"))
	if !p.close() || p.close() {
		t.Fatal("close reports the first call only")
	}
	p.fail(p.opErr("Close", ErrClosed))
	got := p.deliver()
	if len(got) != 2 || !errors.Is(got[0].err, ErrClosed) || !errors.Is(got[1].err, ErrClosed) || p.inflight != 0 {
		t.Fatalf("delivered %d (in flight %d)", len(got), p.inflight)
	}
	p.fail(errors.New("again"))
	if len(p.deliver()) != 0 || !errors.Is(p.err, ErrClosed) {
		t.Fatal("an append completes once; the first terminal error stays")
	}
}

// Create-only mode: the first fence check starts at the first generation
// (the claim does not confirm the writer), then one every half window (or
// when forced), at most one in flight; no sync starts a window past the
// last good check; a check that answered moves the window to where it
// started, store trouble does not, and a fenced verdict fails the writer.
func TestPipelineCreateOnlyCheckWindow(t *testing.T) {
	p := testPipeline(Options{FencingMode: CreateOnly, CheckWindow: 4})
	if p.orderFor(0) != mdFenced {
		t.Fatalf("create-only order %v", p.orderFor(0))
	}
	step := func(op string) *syncState {
		mustEnqueue(t, p, newEntry(t, p, op))
		s := p.start(p.cut(), 0, nil)
		p.record(outcome{sync: s, step: stepCAS}, 0, nil)
		p.record(outcome{sync: s, step: stepMD}, 0, nil)
		return s
	}
	first, ok := p.startCheck(false)
	if !ok || first != 1 {
		t.Fatalf("first check: %d %v, want one at generation 1 beside the first sync", first, ok)
	}
	step("a") // gen 1
	step("b") // gen 2
	if got := delivered(p); len(got) != 0 {
		t.Fatalf("delivered %v before the first check answered", got)
	}
	p.checked(first, nil, 0, nil)
	if got := delivered(p); !same(got, []string{"a:1/0", "b:2/1"}) {
		t.Fatalf("delivered %v once the first check answered", got)
	}
	gen, ok := p.startCheck(false)
	if !ok || gen != 3 {
		t.Fatalf("check after half a window: %d %v, want one vouching for generation 3", gen, ok)
	}
	if _, again := p.startCheck(true); again {
		t.Fatal("a second check started while one is in flight")
	}
	step("c")
	step("d") // gen 4; the window from the claim (gen 1) ends before gen 5
	if p.windowOpen() {
		t.Fatal("the window is open a full window past the last good check")
	}
	if again := p.checked(gen, blobstore.ErrUnavailable, 0, nil); again || p.windowOpen() || p.err != nil {
		t.Fatalf("store trouble on a check of a confirmed writer: resend %v, window open %v, error %v", again, p.windowOpen(), p.err)
	}
	gen, ok = p.startCheck(true)
	if !ok || gen != 5 {
		t.Fatalf("forced check: %d %v", gen, ok)
	}
	p.checked(gen, nil, 0, nil)
	if !p.windowOpen() {
		t.Fatal("a good check did not open the window")
	}
	if got := delivered(p); !same(got, []string{"c:3/2", "d:4/3"}) {
		t.Fatalf("delivered %v", got)
	}
	gen, _ = p.startCheck(true)
	p.checked(gen, ErrClosed, 0, nil)
	if p.err != nil || p.checking {
		t.Fatalf("a check Close gave up on: writer error %v, checking %v", p.err, p.checking)
	}
	gen, _ = p.startCheck(true)
	fenced := &fence.FencedError{Shard: shard, Term: 3, Reason: "fence key missing at the fence check"}
	p.checked(gen, fenced, 0, fenced)
	if !errors.Is(p.err, fence.ErrFenced) {
		t.Fatalf("a fenced check left the writer with %v", p.err)
	}
}

// A create-only writer acknowledges nothing before a fence check it sent
// found it the owner: its claim may have verified the key before a
// successor deleted it and surveyed seal/ without this term's marker
// (docs/VERIFICATION.md, finding 8). The first generation's md alone is
// not enough; the check, started beside it, decides. The other modes are
// unchanged: a per-sync or lease writer needs its CAS, not a check.
func TestPipelineCreateOnlyFirstAckWaitsForACheck(t *testing.T) {
	fenced := &fence.FencedError{Shard: shard, Term: 3, Reason: "fence key missing at the fence check"}
	type check struct {
		err   error // the check's outcome
		inst  error // the instance's fencing when it came back
		again bool  // the check is to be resent
	}
	for _, c := range []struct {
		name     string
		mode     FencingMode
		checks   []check // the outcomes of the check started beside gen 1, in order
		mdFirst  bool    // the md lands before the checks answer
		want     []string
		wantErr  error
		checking bool // a check is still in flight at the end
	}{
		{name: "md landed, no check answered", mode: CreateOnly, mdFirst: true, want: nil, checking: true},
		{name: "md, then the check", mode: CreateOnly, mdFirst: true, checks: []check{{}}, want: []string{"a:1/0", "b:2/1"}},
		{name: "the check, then the md", mode: CreateOnly, checks: []check{{}}, want: []string{"a:1/0", "b:2/1"}},
		{name: "store trouble is resent", mode: CreateOnly, mdFirst: true, checks: []check{{err: blobstore.ErrUnavailable, again: true}}, want: nil, checking: true},
		{name: "store trouble, then the check", mode: CreateOnly, mdFirst: true, checks: []check{{err: blobstore.ErrUnavailable, again: true}, {}}, want: []string{"a:1/0", "b:2/1"}},
		{name: "fenced", mode: CreateOnly, mdFirst: true, checks: []check{{err: fenced, inst: fenced}}, want: []string{"a:error", "b:error"}, wantErr: fence.ErrFenced},
		{name: "bad body at the key", mode: CreateOnly, mdFirst: true, checks: []check{{err: fence.ErrCorruptBody}}, want: []string{"a:error", "b:error"}, wantErr: fence.ErrCorruptBody},
		{name: "abandoned by Close", mode: CreateOnly, mdFirst: true, checks: []check{{err: ErrClosed}}, want: nil},
		{name: "per-sync: the CAS acknowledges", mode: PerSync, mdFirst: true, want: []string{"a:1/0", "b:2/1"}},
		{name: "lease: the CAS acknowledges", mode: Lease, mdFirst: true, want: []string{"a:1/0", "b:2/1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testPipeline(Options{FencingMode: c.mode, CheckWindow: 8})
			gen, started := p.startCheck(false)
			if started != (c.mode == CreateOnly) || (started && gen != 1) {
				t.Fatalf("check beside the first sync: %d %v", gen, started)
			}
			var syncs []*syncState
			for _, op := range []string{"a", "b"} {
				mustEnqueue(t, p, newEntry(t, p, op))
				syncs = append(syncs, p.start(p.cut(), 0, nil))
			}
			land := func() {
				for _, s := range syncs {
					p.record(outcome{sync: s, step: stepCAS}, 0, nil)
					p.record(outcome{sync: s, step: stepMD}, 0, nil)
				}
			}
			if c.mdFirst {
				land()
			}
			for _, ch := range c.checks {
				if again := p.checked(gen, ch.err, 0, ch.inst); again != ch.again {
					t.Fatalf("check %v: resend %v, want %v", ch.err, again, ch.again)
				}
			}
			if !c.mdFirst {
				land()
			}
			if got := delivered(p); !same(got, c.want) {
				t.Fatalf("delivered %v, want %v", got, c.want)
			}
			if (c.wantErr == nil) != (p.err == nil) || (c.wantErr != nil && !errors.Is(p.err, c.wantErr)) {
				t.Fatalf("writer error %v, want %v", p.err, c.wantErr)
			}
			if p.checking != c.checking {
				t.Fatalf("check in flight %v, want %v", p.checking, c.checking)
			}
		})
	}
}

// A fence check that fails for good (neither store trouble nor fencing: a
// corrupt body at the fence key) ends a create-only writer, as the same
// error would end one of its syncs; it is not retried for ever.
func TestPipelineCreateOnlyCheckFailingForGood(t *testing.T) {
	p := testPipeline(Options{FencingMode: CreateOnly, CheckWindow: 2})
	gen, ok := p.startCheck(true)
	if !ok {
		t.Fatal("no forced check")
	}
	p.checked(gen, fence.ErrCorruptBody, 0, nil)
	if !errors.Is(p.err, fence.ErrCorruptBody) {
		t.Fatalf("writer error %v after a check that failed for good", p.err)
	}
}
