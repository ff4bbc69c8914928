package seal

import "fmt"

// History is what a term open for writes can read back: the lineage it
// inherited, up to its restore point, then its own generations. Its
// readers (the sidecar's Read) plan every read with Ranges, so no reader
// decides on its own which generations are on the lineage.
type History struct {
	// Lineage is the lineage the term inherited: as its seal resolved it,
	// or, for a relocation target, the lineage of the newest marker (the
	// handed-off term's, still open).
	Lineage Lineage
	// RestoreGen is the last inherited generation; RestoreNextSeqNo the
	// sequence number of the first op after it.
	RestoreGen       int64
	RestoreNextSeqNo int64
	// Term writes StartGen.. on; AckedGen is the last generation it
	// acknowledged (StartGen-1 before its first).
	Term     int64
	StartGen int64
	AckedGen int64
	// Checkpoints are the term's own checkpoints, published while it was
	// open here: a read from at or after one's NextSeqNo starts after its
	// Gen, below which GC may have collected the translog.
	Checkpoints []Manifest
}

// Ranges returns the generations to read, oldest first, for the ops of h
// from sequence number fromSeq on, up to AckedGen. The inherited part is
// read only when fromSeq lies before the restore point; a lineage whose
// oldest markers were collected cannot serve it (ErrLineageTruncated,
// naming from where a read works). Generations are whole: the caller
// trims the first batch to fromSeq (translog.SeqWindow).
func (h History) Ranges(fromSeq int64) ([]Range, error) {
	var out []Range
	if h.RestoreGen > 0 && fromSeq < h.RestoreNextSeqNo {
		inherited, err := h.Lineage.Through(h.RestoreGen)
		if err != nil {
			return nil, err
		}
		out = inherited
	}
	first := h.StartGen
	for _, c := range h.Checkpoints {
		if c.NextSeqNo <= fromSeq {
			first = max(first, c.Gen+1)
		}
	}
	if h.AckedGen >= first {
		out = append(out, Range{Term: h.Term, From: first, To: h.AckedGen})
	}
	return out, nil
}

// Through returns the ranges of l cut at generation gen, oldest first,
// leaving out terms with nothing at or below it. Below the lineage's base
// (its oldest markers collected) no term names the generations, which only
// checkpoints hold now: ErrLineageTruncated.
func (l Lineage) Through(gen int64) ([]Range, error) {
	if base := l.Base(); base > 0 {
		return nil, fmt.Errorf("%w: generations 1..%d are only in checkpoints now; read from a later sequence number", ErrLineageTruncated, base)
	}
	var out []Range
	for _, r := range l.Ranges {
		r.To = min(r.To, gen)
		if r.To >= r.From {
			out = append(out, r)
		}
	}
	return out, nil
}
