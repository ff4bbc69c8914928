package fence

import (
	"reflect"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
)

func attrs(keys ...string) []blobstore.Attrs {
	out := make([]blobstore.Attrs, len(keys))
	for i, k := range keys {
		out[i] = blobstore.Attrs{Key: k}
	}
	return out
}

func TestListing(t *testing.T) {
	l := ParseListing(attrs(layout.FenceKey(2), "fence/notes.txt", layout.FenceKey(7), layout.FenceKey(5)))
	if !reflect.DeepEqual(l.Terms, []int64{7, 5, 2}) {
		t.Fatalf("terms %v", l.Terms)
	}
	if !reflect.DeepEqual(l.Strays, []string{"fence/notes.txt"}) {
		t.Fatalf("strays %v", l.Strays)
	}
	if got := l.Above(5); got != 7 {
		t.Fatalf("Above(5) = %d", got)
	}
	if got := l.Above(7); got != 0 {
		t.Fatalf("Above(7) = %d", got)
	}
	if got := l.Below(7); !reflect.DeepEqual(got, []int64{5, 2}) {
		t.Fatalf("Below(7) = %v", got)
	}
	if !l.Has(5) || l.Has(3) {
		t.Fatal("Has is wrong")
	}
}

func TestCheckSweep(t *testing.T) {
	cases := []struct {
		name string
		keys []string
		term int64
		want SweepStatus
	}{
		{"clean", []string{layout.FenceKey(4)}, 4, SweepStatus{}},
		{"survivor", []string{layout.FenceKey(4), layout.FenceKey(3)}, 4, SweepStatus{Survivors: []int64{3}}},
		{"higher appeared", []string{layout.FenceKey(5), layout.FenceKey(4)}, 4, SweepStatus{Higher: 5}},
		{"own missing", []string{layout.FenceKey(2)}, 4, SweepStatus{Survivors: []int64{2}, OwnMissing: true}},
	}
	for _, c := range cases {
		if got := CheckSweep(ParseListing(attrs(c.keys...)), c.term); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestSettleCreate(t *testing.T) {
	ours := Record{Shard: "s", Term: 3, Allocation: "a", Nonce: "n2"}
	earlier := Record{Shard: "s", Term: 3, Allocation: "a", Nonce: "n1"}
	restarted := Record{Shard: "s", Term: 3, Allocation: "a", Seq: 9, Gen: 40}
	other := Record{Shard: "s", Term: 3, Allocation: "b"}
	cases := []struct {
		name string
		obs  Observation
		want Action
	}{
		{"lost create did not land", Observation{}, Resend},
		{"lost create landed", Observation{Found: true, Record: ours, Token: "t1"}, Adopt},
		{"an earlier attempt landed", Observation{Found: true, Record: earlier, Token: "t0"}, Adopt},
		{"restart of the same allocation", Observation{Found: true, Record: restarted, Token: "t9"}, Adopt},
		{"another allocation holds the term", Observation{Found: true, Record: other, Token: "t2"}, Fenced},
	}
	for _, c := range cases {
		v := SettleCreate(c.obs, earlier, ours)
		if v.Action != c.want {
			t.Errorf("%s: %v, want %v", c.name, v.Action, c.want)
		}
		if v.Action == Adopt && v.State.Token != c.obs.Token {
			t.Errorf("%s: adopted token %q, want %q", c.name, v.State.Token, c.obs.Token)
		}
		if v.Action == Fenced && v.Reason == "" {
			t.Errorf("%s: fenced without a reason", c.name)
		}
	}
	if v := SettleCreate(Observation{Found: true, Record: ours}); v.Action != Fenced {
		t.Errorf("settling with no attempts: %v, want fenced", v.Action)
	}
}

func TestSettleWrite(t *testing.T) {
	prev := State{Record: Record{Shard: "s", Term: 3, Allocation: "a", Seq: 4, Gen: 7}, Token: "t4"}
	mine := Record{Shard: "s", Term: 3, Allocation: "a", Seq: 5, Gen: 8}
	earlier := Record{Shard: "s", Term: 3, Allocation: "a", Seq: 5, Gen: 9}
	target := Record{Shard: "s", Term: 3, Allocation: "b", Seq: 5, Gen: 7}
	rival := Record{Shard: "s", Term: 3, Allocation: "a", Seq: 6, Gen: 8}
	cases := []struct {
		name     string
		obs      Observation
		attempts []Record
		want     Action
	}{
		{"key deleted by a higher term", Observation{}, []Record{mine}, Fenced},
		{"our CAS landed, response lost", Observation{Found: true, Record: mine, Token: "t5"}, []Record{mine}, Adopt},
		{"an earlier unknown write landed", Observation{Found: true, Record: earlier, Token: "t5"}, []Record{earlier, mine}, Adopt},
		{"nothing landed", Observation{Found: true, Record: prev.Record, Token: "t4"}, []Record{mine}, Resend},
		{"same content, new token (rewrite)", Observation{Found: true, Record: prev.Record, Token: "t9"}, []Record{mine}, Fenced},
		{"relocation target owns it", Observation{Found: true, Record: target, Token: "t5"}, []Record{mine}, Fenced},
		{"second writer with our identity", Observation{Found: true, Record: rival, Token: "t6"}, []Record{mine}, Fenced},
		{"nothing to settle", Observation{Found: true, Record: mine}, nil, Fenced},
	}
	for _, c := range cases {
		v := SettleWrite(c.obs, prev, c.attempts...)
		if v.Action != c.want {
			t.Errorf("%s: %v, want %v", c.name, v.Action, c.want)
			continue
		}
		if v.Action == Adopt && (v.State.Record != c.obs.Record || v.State.Token != c.obs.Token) {
			t.Errorf("%s: adopted %+v, want the observation", c.name, v.State)
		}
	}
}

func TestCheckOwn(t *testing.T) {
	held := State{Record: Record{Shard: "s", Term: 3, Allocation: "a"}, Token: "t1"}
	if v := CheckOwn(Observation{Found: true, Record: held.Record, Token: "t1"}, held); v.Action != Adopt {
		t.Fatalf("unchanged key: %v", v.Action)
	}
	if v := CheckOwn(Observation{Found: true, Record: held.Record, Token: "t2"}, held); v.Action != Fenced {
		t.Fatalf("token changed: %v", v.Action)
	}
	if v := CheckOwn(Observation{}, held); v.Action != Fenced {
		t.Fatalf("key gone: %v", v.Action)
	}
}
