package seal

import (
	"errors"
	"fmt"
	"testing"
)

// The readable ranges of a term's history, without I/O: the inherited
// lineage only when the read starts before the restore point, cut there;
// the term's own generations after a checkpoint that covers the start.
func TestHistoryRanges(t *testing.T) {
	mk := func(term, rterm, rgen int64) Marker {
		return Marker{Shard: "s", Term: term, Allocation: "a", Restore: RestorePoint{Term: rterm, Gen: rgen}}
	}
	lineage := func(complete bool, chain ...Marker) Lineage {
		l, err := LineageOf("s", chain, complete, OpenTip)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Term 1 wrote 1..4, term 2 restored (1,4) and wrote 5..7, term 3
	// restored (2,7) and is open.
	full := lineage(true, mk(3, 2, 7), mk(2, 1, 4), mk(1, 0, 0))
	// The same with term 1's marker collected: generations 1..4 have no
	// term any more.
	cut := lineage(false, mk(3, 2, 7), mk(2, 1, 4))
	// A relocation target of term 2: the newest marker is the handed-off
	// term's, its range still open.
	handed := lineage(true, mk(2, 1, 4), mk(1, 0, 0))

	r := func(term, from, to int64) Range { return Range{Term: term, From: from, To: to} }
	for _, c := range []struct {
		name    string
		h       History
		fromSeq int64
		want    []Range
		err     error
	}{
		{"new shard, nothing acked", History{Term: 1, StartGen: 1, AckedGen: 0}, 0, nil, nil},
		{"new shard", History{Term: 1, StartGen: 1, AckedGen: 3}, 0, []Range{r(1, 1, 3)}, nil},
		{"inherited and own", History{Lineage: full, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 9}, 0,
			[]Range{r(1, 1, 4), r(2, 5, 7), r(3, 8, 9)}, nil},
		{"from inside the inherited part", History{Lineage: full, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 9}, 69,
			[]Range{r(1, 1, 4), r(2, 5, 7), r(3, 8, 9)}, nil},
		{"from the restore point on", History{Lineage: full, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 9}, 70,
			[]Range{r(3, 8, 9)}, nil},
		{"truncated lineage, from before the restore point", History{Lineage: cut, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 9}, 0,
			nil, ErrLineageTruncated},
		{"truncated lineage, from after it", History{Lineage: cut, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 9}, 75,
			[]Range{r(3, 8, 9)}, nil},
		{"relocation target", History{Lineage: handed, RestoreGen: 6, RestoreNextSeqNo: 60, Term: 2, StartGen: 7, AckedGen: 8}, 0,
			[]Range{r(1, 1, 4), r(2, 5, 6), r(2, 7, 8)}, nil},
		{"own checkpoint covers the start", History{Lineage: full, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 12,
			Checkpoints: []Manifest{{Term: 3, Gen: 10, NextSeqNo: 100}}}, 100, []Range{r(3, 11, 12)}, nil},
		{"own checkpoint after the start", History{Lineage: full, RestoreGen: 7, RestoreNextSeqNo: 70, Term: 3, StartGen: 8, AckedGen: 12,
			Checkpoints: []Manifest{{Term: 3, Gen: 10, NextSeqNo: 100}}}, 99, []Range{r(3, 8, 12)}, nil},
		{"checkpoint at the last ack", History{Term: 1, StartGen: 1, AckedGen: 5, Checkpoints: []Manifest{{Term: 1, Gen: 5, NextSeqNo: 50}}}, 50, nil, nil},
	} {
		got, err := c.h.Ranges(c.fromSeq)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: ranges %v, want %v", c.name, got, c.want)
		}
	}
}
