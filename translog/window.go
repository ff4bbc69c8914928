package translog

import "errors"

// ErrWindowFull ends an iteration once a SeqWindow holds all the ops it
// was asked for; Reader.Iterate returns it, and the reader treats it as
// the end of a successful read.
var ErrWindowFull = errors.New("read window full")

// SeqWindow cuts a read to the ops from sequence number From on, at most
// Max of them in all (0: no bound). Generations are stored whole, so the
// first batch read may start before From and the last may hold more than
// the window takes; the window trims both.
type SeqWindow struct {
	From  int64
	Max   int64
	taken int64
}

// Cut returns the part of b inside the window and whether any of it is.
// Batches must come in sequence order; a window that is full takes nothing
// more.
func (w *SeqWindow) Cut(b Batch) (Batch, bool) {
	if w.Full() || b.FirstSeqNo+int64(len(b.Ops)) <= w.From {
		return Batch{}, false
	}
	if skip := w.From - b.FirstSeqNo; skip > 0 {
		b.Ops, b.FirstSeqNo = b.Ops[skip:], w.From
	}
	if w.Max > 0 && w.taken+int64(len(b.Ops)) > w.Max {
		b.Ops = b.Ops[:w.Max-w.taken]
	}
	w.taken += int64(len(b.Ops))
	return b, true
}

// Full reports whether the window holds Max ops.
func (w *SeqWindow) Full() bool { return w.Max > 0 && w.taken >= w.Max }

// Filter wraps fn for Reader.Iterate: fn sees the window's part of every
// batch, and the iteration ends with ErrWindowFull once the window is full.
func (w *SeqWindow) Filter(fn func(Batch) error) func(Batch) error {
	return func(b Batch) error {
		b, ok := w.Cut(b)
		if !ok {
			return nil
		}
		if err := fn(b); err != nil {
			return err
		}
		if w.Full() {
			return ErrWindowFull
		}
		return nil
	}
}
