package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Read calls fn with the batches of the shard's lineage from fromSeq on, up
// to the last acknowledged generation when Read started; batches are
// trimmed to fromSeq and to maxOps ops in all (0: no bound).
func (s *Server) Read(ctx context.Context, name string, fromSeq, maxOps int64, fn func(translog.Batch) error) error {
	const op = "Read"
	if fromSeq < 0 || maxOps < 0 {
		return opErr(op, name, fmt.Errorf("%w: from_seq %d, max_ops %d", ErrInvalidArgument, fromSeq, maxOps), "")
	}
	sh, err := s.get(op, name)
	if err != nil {
		return err
	}
	ranges, err := sh.readRanges(fromSeq)
	if err != nil {
		return opErr(op, name, err, hintFor(err))
	}
	window := &translog.SeqWindow{From: fromSeq, Max: maxOps}
	emit := window.Filter(fn)
	r := translog.NewReader(sh.store, name)
	for _, rg := range ranges {
		err := r.Iterate(ctx, rg.Term, rg.From, rg.To, emit)
		if errors.Is(err, translog.ErrWindowFull) {
			return nil
		}
		if err != nil {
			return opErr(op, name, err, hintFor(err))
		}
	}
	return nil
}

// readRanges plans a Read from fromSeq: seal.History's ranges, except for
// a warm shard, whose Read may start before its replay ended (the first
// sequence number after the restore point is not known yet, so the
// inherited part is read whenever it may hold fromSeq), and whose
// inherited part starts after its checkpoint when fromSeq is at or after
// the checkpoint's next sequence number (below it, only the checkpoint
// holds the ops the translog may no longer).
func (sh *shard) readRanges(fromSeq int64) ([]seal.Range, error) {
	h := sh.history()
	w := sh.warmShard()
	if w == nil {
		return h.Ranges(fromSeq)
	}
	if sh.isReplaying() {
		h.RestoreNextSeqNo = math.MaxInt64
	}
	m := w.manifest
	if m == nil || fromSeq < m.NextSeqNo || h.RestoreGen == 0 || fromSeq >= h.RestoreNextSeqNo {
		return h.Ranges(fromSeq)
	}
	var out []seal.Range
	for _, r := range h.Lineage.Ranges {
		r.From, r.To = max(r.From, m.Gen+1), min(r.To, h.RestoreGen)
		if r.To >= r.From {
			out = append(out, r)
		}
	}
	own := h
	own.RestoreGen = 0
	rest, err := own.Ranges(fromSeq)
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}
