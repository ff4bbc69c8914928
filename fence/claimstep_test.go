package fence

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
)

func TestCheckClaim(t *testing.T) {
	fenced := &FencedError{Shard: "s", Term: 3}
	for _, tc := range []struct {
		name       string
		term, held int64
		fenced     error
		invalid    bool
		asIs       bool
	}{
		{"first claim", 1, 0, nil, false, false},
		{"the term held again (a retry)", 4, 4, nil, false, false},
		{"a higher term", 5, 4, nil, false, false},
		{"term 0", 0, 0, nil, true, false},
		{"term 0 of a fenced instance: the argument first", 0, 0, fenced, true, false},
		{"a fenced instance", 5, 4, fenced, false, true},
		{"a fenced instance, stale grant: fenced first", 3, 4, fenced, false, true},
		{"a stale grant", 3, 4, nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, asIs := checkClaim(tc.term, tc.held, tc.fenced)
			if asIs != tc.asIs || errors.Is(err, ErrInvalidArgument) != tc.invalid {
				t.Fatalf("checkClaim = %v, as is %v; want invalid %v, as is %v", err, asIs, tc.invalid, tc.asIs)
			}
			if tc.asIs && err != tc.fenced {
				t.Fatalf("checkClaim = %v, want the fencing error as is", err)
			}
			if !tc.invalid && !tc.asIs && err != nil {
				t.Fatalf("checkClaim = %v, want nil", err)
			}
		})
	}
}

func listing(tokens map[int64]blobstore.Token, terms ...int64) Listing {
	var items []blobstore.Attrs
	for _, term := range terms {
		items = append(items, blobstore.Attrs{Key: layout.FenceKey(term), Token: tokens[term]})
	}
	return ParseListing(items)
}

func TestStaleGrant(t *testing.T) {
	for _, tc := range []struct {
		terms []int64
		want  int64
	}{{nil, 0}, {[]int64{3}, 0}, {[]int64{2, 1}, 0}, {[]int64{5, 3, 1}, 5}, {[]int64{4}, 4}} {
		higher, reason := staleGrant(listing(nil, tc.terms...), 3)
		if higher != tc.want || (higher > 0) != (reason != "") {
			t.Errorf("staleGrant(%v, 3) = %d %q, want %d", tc.terms, higher, reason, tc.want)
		}
	}
}

func TestCreateHeld(t *testing.T) {
	a1 := Record{Shard: "s", Term: 2, Allocation: "a", Nonce: "n1"}
	a2 := Record{Shard: "s", Term: 2, Allocation: "a", Nonce: "n2"}
	restart := Record{Shard: "s", Term: 2, Allocation: "a", Nonce: "old"}
	attempts := []Record{a1, a2}
	for _, tc := range []struct {
		name    string
		v       settle.Verdict[Record]
		held    State
		created bool
		ok      bool
	}{
		{"created now", settle.Verdict[Record]{Action: settle.Created, Token: "t2"}, State{Record: a2, Token: "t2"}, true, true},
		{"an earlier attempt landed", settle.Verdict[Record]{Action: settle.Adopt, Held: a1, Token: "t1"}, State{Record: a1, Token: "t1"}, true, true},
		{"our allocation's earlier claim (a restart)", settle.Verdict[Record]{Action: settle.Adopt, Held: restart, Token: "t0"}, State{Record: restart, Token: "t0"}, false, true},
		{"resend", settle.Verdict[Record]{Action: settle.Resend}, State{}, false, false},
		{"lost", settle.Verdict[Record]{Action: settle.Lost, Reason: "x"}, State{}, false, false},
		{"no verdict (store trouble)", settle.Verdict[Record]{}, State{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held, created, ok := createHeld(tc.v, a2, attempts)
			if held != tc.held || created != tc.created || ok != tc.ok {
				t.Fatalf("createHeld = %+v %v %v, want %+v %v %v", held, created, ok, tc.held, tc.created, tc.ok)
			}
		})
	}
}

func TestJudgeSweep(t *testing.T) {
	const term = 5
	tok := map[int64]blobstore.Token{5: "ours", 3: "x"}
	other := map[int64]blobstore.Token{5: "other"}
	for _, tc := range []struct {
		name      string
		l         Listing
		round     int
		want      sweepNext
		higher    int64
		survivors []int64
	}{
		{"complete, our token listed", listing(tok, 5), 1, sweepDone, 0, nil},
		{"complete, no token listed", listing(nil, 5), 1, sweepReadOwn, 0, nil},
		{"complete, another token listed", listing(other, 5), 1, sweepReadOwn, 0, nil},
		{"a higher term", listing(tok, 7, 5), 1, sweepWithdraw, 7, nil},
		{"a higher term beats survivors and a missing key", listing(tok, 7, 3), 5, sweepWithdraw, 7, nil},
		{"our key gone", listing(tok, 3), 1, sweepOwnMissing, 0, nil},
		{"survivors, rounds left", listing(tok, 5, 3, 1), 1, sweepAgain, 0, []int64{3, 1}},
		{"survivors, last round", listing(tok, 5, 3), 5, sweepGiveUp, 0, []int64{3}},
		{"survivors past the last round", listing(tok, 5, 3), 6, sweepGiveUp, 0, []int64{3}},
		{"stray keys do not count", ParseListing([]blobstore.Attrs{{Key: layout.FenceKey(5), Token: "ours"}, {Key: layout.FencePrefix + "junk"}}), 1, sweepDone, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeSweep(tc.l, term, "ours", tc.round, 5)
			if v.Next != tc.want || v.Higher != tc.higher || !slices.Equal(v.Survivors, tc.survivors) {
				t.Fatalf("judgeSweep = %+v, want next %d higher %d survivors %v", v, tc.want, tc.higher, tc.survivors)
			}
			if (v.Next == sweepWithdraw || v.Next == sweepOwnMissing) != (v.Reason != "") {
				t.Fatalf("reason %q for next %d", v.Reason, v.Next)
			}
		})
	}
}

func TestAddSwept(t *testing.T) {
	got := addSwept(addSwept(nil, []int64{3, 1}), []int64{2, 3, 1, 2})
	if !slices.Equal(got, []int64{3, 1, 2}) {
		t.Fatalf("addSwept = %v, want [3 1 2]", got)
	}
}
