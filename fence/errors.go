package fence

import (
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/ident"
)

// ErrFenced: this instance lost the right to acknowledge writes for the
// shard (its fence key is gone, owned by another allocation, or a higher
// term exists). It is terminal for the instance. Match it with errors.Is; a
// *FencedError carries the details.
var ErrFenced = errors.New("primary fenced")

// Body errors: a stored body that cannot be trusted. They are never fencing
// verdicts: a body for another shard means a misconfigured prefix, not a
// successor.
var (
	// ErrCorruptBody: a body that does not parse or fails its checksum.
	ErrCorruptBody = errors.New("corrupt body")
	// ErrForeignShard: a well-formed body that belongs to another shard (or
	// another term or generation than its key names).
	ErrForeignShard = errors.New("body of another shard")
	// ErrUnknownVersion: a body of a format version this build cannot read.
	ErrUnknownVersion = errors.New("unknown body version")
)

// Claim and chain errors that are not fencing.
var (
	// ErrSweepIncomplete: a lower-term fence key survived every deletion
	// attempt. The claim did not complete but nothing is lost; retry the
	// claim (errors.Is also matches blobstore.ErrUnavailable, so
	// blobstore.IsRetryable reports it as retryable).
	ErrSweepIncomplete = errors.New("lower-term fence key survived deletion")
	// ErrInvalidArgument: a caller passed a value the protocol cannot use
	// (term < 1, a separator inside an identifier, ...).
	ErrInvalidArgument = ident.ErrInvalidArgument
	// ErrHandedOff: the chain was transferred to a relocation target; the
	// source must not write again unless Revert wins the key back.
	ErrHandedOff = errors.New("fence handed off to the relocation target")
)

// FencedError is the detail of ErrFenced.
type FencedError struct {
	Shard      string
	Key        string // the fence key of Term
	Term       int64  // the term this instance held
	Allocation string // this instance's allocation
	// Successor is the higher term that displaced this one, 0 when unknown
	// (for example a relocation target of the same term took the key).
	Successor int64
	Reason    string
}

func (e *FencedError) Error() string {
	succ := "successor term unknown"
	if e.Successor > 0 {
		succ = fmt.Sprintf("successor term %d", e.Successor)
	}
	return fmt.Sprintf("shard %q: primary fenced at term %d (allocation %q, key %q): %s; %s; this instance must stop acknowledging writes and will not write again (the current owner holds the shard)",
		e.Shard, e.Term, e.Allocation, e.Key, e.Reason, succ)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// SuccessorTerm returns the successor term carried by a fencing error, if
// known.
func SuccessorTerm(err error) (int64, bool) {
	var fe *FencedError
	if errors.As(err, &fe) && fe.Successor > 0 {
		return fe.Successor, true
	}
	return 0, false
}

// BodyError names the shard and key of a body that failed to decode.
type BodyError struct {
	Shard  string
	Key    string
	Err    error // ErrCorruptBody, ErrForeignShard or ErrUnknownVersion
	Detail string
}

func (e *BodyError) Error() string {
	return fmt.Sprintf("shard %q: key %q: %v: %s (the object was not written by this shard's protocol; inspect or remove it by hand, never overwrite it)", e.Shard, e.Key, e.Err, e.Detail)
}

func (e *BodyError) Unwrap() error { return e.Err }

// Error is a failed fence operation that is not a fencing verdict: a store
// error after retries, an incomplete sweep, a bad argument.
type Error struct {
	Op    string // Claim, Advance, TransferTo, Revert, Accept, Superseded
	Shard string
	Key   string
	Term  int64
	Err   error
}

func (e *Error) Error() string {
	hint := ""
	if blobstore.IsRetryable(e.Err) {
		hint = "; the store did not give a definite answer: retry the operation (nothing was fenced)"
	}
	return fmt.Sprintf("fence %s shard %q term %d key %q: %v%s", e.Op, e.Shard, e.Term, e.Key, e.Err, hint)
}

func (e *Error) Unwrap() error { return e.Err }
