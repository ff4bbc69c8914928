package translog

import (
	"testing"
	"time"

	"github.com/shardfence/shardfence/fence"
)

func TestSettleMDCreate(t *testing.T) {
	ours := syncMD(EncodeOps([][]byte{[]byte("x")}), true)
	ours.Payload = nil
	otherOps := ours
	otherOps.Checksum++
	otherAlloc := ours
	otherAlloc.Allocation = "b"
	poison := MD{Kind: KindPoison, Shard: shard, Term: 3, Gen: 7, SealedBy: 5}
	cases := []struct {
		name  string
		found MD
		want  fence.Action
		succ  int64
	}{
		{"our own create, response lost", ours, fence.Adopt, 0},
		{"our own create with its inline payload", syncMD(EncodeOps([][]byte{[]byte("x")}), true), fence.Adopt, 0},
		{"poisoned by a successor", poison, fence.Fenced, 5},
		{"another allocation's generation", otherAlloc, fence.Fenced, 0},
		{"same allocation, other ops", otherOps, fence.Fenced, 0},
	}
	for _, c := range cases {
		v := SettleMDCreate(c.found, ours)
		if v.Action != c.want || v.Successor != c.succ {
			t.Errorf("%s: %v successor %d, want %v successor %d", c.name, v.Action, v.Successor, c.want, c.succ)
		}
		if v.Action == fence.Fenced && v.Reason == "" {
			t.Errorf("%s: no reason", c.name)
		}
	}
}

func TestLeaseState(t *testing.T) {
	sec := int64(time.Second)
	l := LeaseState{Interval: 10 * time.Second}
	if l.Covers(0) {
		t.Fatal("a lease never granted covers nothing")
	}
	l.SentAt, l.Valid = 100*sec, true
	for _, c := range []struct {
		now    int64
		covers bool
	}{
		{100 * sec, true},
		{105 * sec, true},
		{110*sec - 1, true},
		{110 * sec, false},
		{200 * sec, false},
	} {
		if got := l.Covers(c.now); got != c.covers {
			t.Errorf("Covers(%d) = %v", c.now, got)
		}
	}
}
