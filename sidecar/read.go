package sidecar

import (
	"context"
	"errors"
	"fmt"

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
	ranges, err := sh.history().Ranges(fromSeq)
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
