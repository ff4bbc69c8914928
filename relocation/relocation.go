// Package relocation moves a term's write authority from one allocation to
// another without a new term (the fencing protocol, section 6): the source
// drains its in-flight syncs, stops taking appends and CASes the fence key
// to the target, keeping the new token; the cluster carries a
// HandoffContext to the target, which checks that the key names it as
// owner at that token and continues the chain. No seal is needed: same
// term, same lineage. An aborted handoff reverts with the retained token;
// if the target already wrote, the revert fails and the source stands
// down, which is not an error.
package relocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// HandoffContext is what the source hands the target. It serializes to
// bytes for the cluster to carry.
type HandoffContext struct {
	Shard      string          `json:"shard"`
	Term       int64           `json:"term"`
	Source     string          `json:"source"`
	Target     string          `json:"target"`
	TargetNode string          `json:"target_node,omitempty"`
	Token      blobstore.Token `json:"token"`
	// Gen is the last generation the source acknowledged; the target
	// writes Gen+1 next.
	Gen       int64 `json:"gen"`
	NextSeqNo int64 `json:"next_seq_no"`
}

type wire struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	HandoffContext
}

const (
	wireFormat  = "shardfence.handoff"
	wireVersion = 1
)

// Marshal returns the context's bytes.
func (h HandoffContext) Marshal() ([]byte, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(wire{Format: wireFormat, Version: wireVersion, HandoffContext: h})
}

// Unmarshal parses bytes made by Marshal.
func Unmarshal(b []byte) (HandoffContext, error) {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil || w.Format != wireFormat {
		return HandoffContext{}, fmt.Errorf("%w: not a handoff context (%d bytes)", fence.ErrCorruptBody, len(b))
	}
	if w.Version != wireVersion {
		return HandoffContext{}, fmt.Errorf("%w: handoff context version %d, this build reads %d", fence.ErrUnknownVersion, w.Version, wireVersion)
	}
	if err := w.HandoffContext.validate(); err != nil {
		return HandoffContext{}, fmt.Errorf("%w: %v", fence.ErrCorruptBody, err)
	}
	return w.HandoffContext, nil
}

func (h HandoffContext) validate() error {
	for _, c := range []struct{ what, v string }{{"shard", h.Shard}, {"source allocation", h.Source}, {"target allocation", h.Target}} {
		if err := ident.Validate(c.what, c.v, false); err != nil {
			return err
		}
	}
	if h.Term < 1 || h.Gen < 0 || h.NextSeqNo < 0 || h.Token == "" {
		return fmt.Errorf("%w: handoff of term %d at gen %d, seq no %d, token %q", fence.ErrInvalidArgument, h.Term, h.Gen, h.NextSeqNo, h.Token)
	}
	return nil
}

// Outcome is how an Abort ended.
type Outcome int

const (
	// Resumed: the source holds the term again and its writer is open.
	Resumed Outcome = iota + 1
	// StoodDown: the target already wrote; the source must stop (its
	// chain is fenced). Not an error: the shard lives on at the target.
	StoodDown
)

func (o Outcome) String() string {
	switch o {
	case Resumed:
		return "resumed"
	case StoodDown:
		return "stood down"
	}
	return "unknown"
}

// ErrNotResumable: the source's drain did not complete, so syncs of its
// writer may still land; neither handing off nor resuming is safe. The
// shard must be recovered under a new term.
var ErrNotResumable = errors.New("relocation source cannot hand off or resume")

// ErrPositionMismatch: a handoff context's generation is not where the
// fence key says the source's log ends (a context edited, or taken from
// another handoff). Adopting it would leave a hole in the term's log that
// every later seal poisons, losing what the target acknowledges; Adopt
// refuses it before opening.
var ErrPositionMismatch = errors.New("handoff context does not match the fence key")

// Error names the shard, term and step of a failed relocation step.
type Error struct {
	Op    string // Handoff, Abort, Adopt
	Shard string
	Term  int64
	Err   error
}

func (e *Error) Error() string {
	hint := ""
	switch {
	case errors.Is(e.Err, ErrNotResumable):
		hint = "; recover the shard under a new term"
	case blobstore.IsRetryable(e.Err):
		hint = "; retry the step (a lost response is settled by the key's content)"
	}
	return fmt.Sprintf("relocation %s shard %q term %d: %v%s", e.Op, e.Shard, e.Term, e.Err, hint)
}

func (e *Error) Unwrap() error { return e.Err }

type state int

const (
	open state = iota
	drained
	transferred
	done
	broken
)

// Source is the relocation source: a term's chain and its open writer.
type Source struct {
	store *blobstore.Container
	chain *fence.Chain
	opts  translog.Options

	mu     sync.Mutex
	w      *translog.Writer
	st     state
	hc     HandoffContext
	gen    int64
	seq    int64
	target string
	node   string
}

// NewSource wraps the writer w of chain. opts are the writer's options,
// used again if an aborted handoff resumes.
func NewSource(store *blobstore.Container, chain *fence.Chain, w *translog.Writer, opts translog.Options) *Source {
	return &Source{store: store, chain: chain, opts: opts, w: w}
}

// Writer returns the source's current writer (a new one after a resume).
func (s *Source) Writer() *translog.Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w
}

func (s *Source) err(op string, err error) error {
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Op: op, Shard: s.chain.Shard(), Term: s.chain.Term(), Err: err}
}

// Handoff drains the writer's in-flight syncs (appends after this fail
// with translog.ErrClosed), CASes the fence key to target, and returns the
// context the target needs. A failed CAS can be retried with Handoff or
// given up with Abort.
func (s *Source) Handoff(ctx context.Context, target, targetNode string) (HandoffContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.st {
	case transferred:
		return s.hc, nil
	case done, broken:
		return HandoffContext{}, s.err("Handoff", fmt.Errorf("%w: the source already stood down or failed", ErrNotResumable))
	case open:
		if err := s.w.Close(ctx); err != nil {
			s.st = broken
			return HandoffContext{}, s.err("Handoff", fmt.Errorf("%w: drain: %w", ErrNotResumable, err))
		}
		if err := s.w.Err(); err != nil && !errors.Is(err, translog.ErrClosed) {
			s.st = broken
			return HandoffContext{}, s.err("Handoff", err)
		}
		s.gen, s.seq = s.w.NextGen()-1, s.w.NextSeqNo()
		s.st = drained
	}
	if s.target != "" && s.target != target {
		return HandoffContext{}, s.err("Handoff", fmt.Errorf("%w: a transfer to %q may have landed; abort it before handing off to %q", fence.ErrInvalidArgument, s.target, target))
	}
	s.target, s.node = target, targetNode
	st, err := s.chain.TransferAt(ctx, target, targetNode, s.gen)
	if err != nil {
		return HandoffContext{}, s.err("Handoff", err)
	}
	s.hc = HandoffContext{Shard: s.chain.Shard(), Term: s.chain.Term(), Source: s.chain.Allocation(), Target: target,
		TargetNode: targetNode, Token: st.Token, Gen: s.gen, NextSeqNo: s.seq}
	s.st = transferred
	return s.hc, nil
}

// Abort ends a handoff from the source's side. Before the transfer landed
// the source simply resumes; after it, the source reverts with the retained
// token and resumes, or stands down when the target already wrote. A
// failed revert (store trouble) can be retried.
func (s *Source) Abort(ctx context.Context) (Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.st {
	case open:
		return Resumed, nil
	case done:
		return StoodDown, nil
	case broken:
		return 0, s.err("Abort", ErrNotResumable)
	case transferred:
		ok, err := s.chain.Revert(ctx)
		if err != nil {
			return 0, s.err("Abort", err)
		}
		if !ok {
			s.st = done
			return StoodDown, nil
		}
	}
	// drained (a transfer whose outcome is unknown is settled by the
	// writer's first CAS: the chain finds its own write and builds on it)
	// or reverted: reopen at the next generation.
	o := s.opts
	o.StartGen, o.StartSeqNo = s.gen+1, s.seq
	w, err := translog.Open(ctx, s.store, s.chain, o)
	if err != nil {
		return 0, s.err("Abort", err)
	}
	s.w, s.st, s.target = w, open, ""
	return Resumed, nil
}

// AdoptOptions configure Adopt.
type AdoptOptions struct {
	Node    string
	Clock   clock.Clock
	Backoff backoff.Policy
	// Writer configures the target's writer; StartGen and StartSeqNo come
	// from the context, the fencing fields from the shard's stored
	// settings (seal.ShardFencing), which Writer's cannot change.
	Writer translog.Options
}

// Adopt continues the term on the target (allocation): the fence key must
// name it as owner at the context's token. It returns the chain and an
// open writer at hc.Gen+1. A key that moved on (the source reverted, or a
// higher term claimed the shard) is a *fence.FencedError.
func Adopt(ctx context.Context, store *blobstore.Container, allocation string, hc HandoffContext, opts AdoptOptions) (*fence.Chain, *translog.Writer, error) {
	fail := func(err error) (*fence.Chain, *translog.Writer, error) {
		var fe *fence.FencedError
		if errors.As(err, &fe) {
			return nil, nil, err
		}
		return nil, nil, &Error{Op: "Adopt", Shard: hc.Shard, Term: hc.Term, Err: err}
	}
	if err := hc.validate(); err != nil {
		return fail(err)
	}
	if hc.Target != allocation {
		return fail(fmt.Errorf("%w: the handoff is for allocation %q, not %q", fence.ErrInvalidArgument, hc.Target, allocation))
	}
	// The term continues in the shard's mode, whatever the target's
	// defaults: a lease term continued per-sync, or the reverse, would
	// break the successor's lease wait.
	fencing, err := seal.ShardFencing(ctx, store, hc.Shard, seal.FencingOf(opts.Writer), seal.Options{Clock: opts.Clock, Backoff: opts.Backoff})
	if err != nil {
		return fail(err)
	}
	fo := []fence.Option{fence.WithNode(opts.Node)}
	if opts.Clock != nil {
		fo = append(fo, fence.WithClock(opts.Clock))
	}
	if opts.Backoff != (backoff.Policy{}) {
		fo = append(fo, fence.WithBackoff(opts.Backoff))
	}
	in, err := fence.NewInstance(store, hc.Shard, allocation, fo...)
	if err != nil {
		return fail(err)
	}
	chain, err := in.Accept(ctx, hc.Term, hc.Token)
	if err != nil {
		return fail(err)
	}
	if err := checkPosition(hc, chain.State().Record.Gen); err != nil {
		return fail(err)
	}
	if err := checkNextSeq(ctx, store, hc, opts); err != nil {
		return fail(err)
	}
	if !fencing.Disabled && fencing.Mode == translog.CreateOnly {
		// A create-only writer sends no CAS, so without one here an
		// aborting source's revert would find the transfer's token still
		// in place and resume beside this target. This CAS, expecting the
		// transfer's token, and the revert race for the key: whichever
		// lands first owns the term, the other is fenced (stands down).
		if _, err := chain.Advance(ctx, hc.Gen); err != nil {
			return fail(err)
		}
	}
	wo := fencing.Apply(opts.Writer)
	wo.Shard, wo.Term, wo.Allocation = "", 0, ""
	wo.StartGen, wo.StartSeqNo = hc.Gen+1, hc.NextSeqNo
	if wo.Clock == nil && opts.Clock != nil {
		wo.Clock = opts.Clock
	}
	w, err := translog.Open(ctx, store, chain, wo)
	if err != nil {
		return fail(err)
	}
	return chain, w, nil
}

// checkNextSeq compares the context's next sequence number with the md of
// its last generation when the source wrote that generation in this term:
// the target numbers its first op NextSeqNo, so a context that disagrees
// with the log would leave a gap in the sequence numbers or reuse them.
// When the term wrote nothing yet (the md is in an earlier term, or there
// is none) the fence key's generation, checked by checkPosition, is all
// there is to compare.
func checkNextSeq(ctx context.Context, store *blobstore.Container, hc HandoffContext, opts AdoptOptions) error {
	if hc.Gen == 0 {
		return nil
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.System()
	}
	var md translog.MD
	err := backoff.Do(ctx, clk, opts.Backoff.Or(backoff.Store()), blobstore.IsRetryable, func(ctx context.Context) error {
		var err error
		md, err = translog.NewReader(store, hc.Shard).ReadMD(ctx, hc.Term, hc.Gen)
		return err
	})
	switch {
	case errors.Is(err, translog.ErrMissingGen):
		return nil
	case err != nil:
		return fmt.Errorf("reading the md of the context's last generation: %w", err)
	case md.Kind != translog.KindSync:
		return fmt.Errorf("%w: generation %d of term %d is a %v, not a generation the source wrote (hand off again from the source)", ErrPositionMismatch, hc.Gen, hc.Term, md.Kind)
	case md.FirstSeqNo+md.OpCount != hc.NextSeqNo:
		return fmt.Errorf("%w: the context's next sequence number is %d, the log's generation %d of term %d ends before %d; adopting it would leave a gap in the sequence numbers or reuse them (hand off again from the source)",
			ErrPositionMismatch, hc.NextSeqNo, hc.Gen, hc.Term, md.FirstSeqNo+md.OpCount)
	}
	return nil
}

// checkPosition compares the context's generation with keyGen, the one the
// transferred fence record holds: the source records where its log ends
// (fence.Chain.TransferAt), so the two must be equal.
func checkPosition(hc HandoffContext, keyGen int64) error {
	if hc.Gen == keyGen {
		return nil
	}
	return fmt.Errorf("%w: the context names generation %d of term %d as the source's last, the fence key records generation %d; adopting it would leave a gap in the term's log or write over it (hand off again from the source)", ErrPositionMismatch, hc.Gen, hc.Term, keyGen)
}
