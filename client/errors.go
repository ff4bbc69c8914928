package client

import (
	"errors"
	"fmt"
	"net"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// ErrOutcomeUnknown is matched (errors.Is) by an Append error after which
// the call's ops may or may not be in the log: see the package doc for
// how to find out.
var ErrOutcomeUnknown = errors.New("outcome unknown: the ops may or may not be in the log")

// Reasons of the sidecar's ErrorDetail the client tells apart; Reason(err)
// returns any of the sidecar's, these included.
const (
	ReasonFenced      = "fenced"
	ReasonHandedOff   = "handed_off"
	ReasonHandingOff  = "handing_off"
	ReasonNotOpen     = "not_open"
	ReasonClosed      = "closed"
	ReasonWrongTerm   = "wrong_term"
	ReasonSidecarBusy = "sidecar_busy"
	// ReasonWatchBehind: a watcher left more than 64 MiB of events
	// untaken and was cut off: watch again and Read from the sequence
	// number held.
	ReasonWatchBehind = "watch_behind"
	// Warm serving: appends before the replay ended, and ReadCheckpointFile's
	// bad ranges, unknown files, corrupt store copies and shards opened
	// without warm.
	ReasonReplaying  = "replaying"
	ReasonOutOfRange = "out_of_range"
	ReasonNoSuchFile = "no_such_file"
	ReasonCorrupt    = "corrupt"
	ReasonNotWarm    = "not_warm"
)

// Error is what the client's calls return on failure: the API's code and
// the sidecar's stable reason, what it knows of fencing and handoffs, and,
// for Append, whether the ops may be in the log.
type Error struct {
	Op    string // Append, Open, Read, Watch, Status
	Shard string
	Code  connect.Code
	// Reason is the sidecar's stable reason (fenced, handed_off, not_open,
	// too_large, ...); empty when the failure never reached a sidecar
	// (a connection refused, a context that ended).
	Reason string
	// Term is the term the error is about; SuccessorTerm the term that
	// fenced it (0 when unknown).
	Term, SuccessorTerm int64
	// To is where a handed-off (or handing-off) shard went.
	To Owner
	// OutcomeUnknown: the ops of the failed Append may or may not be in
	// the log. False on an Append error means none of them was written.
	OutcomeUnknown bool
	Err            error
}

func (e *Error) Error() string {
	outcome := ""
	if e.Op == "Append" {
		outcome = " (not written)"
		if e.OutcomeUnknown {
			outcome = " (outcome unknown: the ops may or may not be in the log; Read from the last acknowledged sequence number to find out)"
		}
	}
	return fmt.Sprintf("shardfence %s shard %q: %v%s", e.Op, e.Shard, e.Err, outcome)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches ErrOutcomeUnknown when the outcome is unknown.
func (e *Error) Is(target error) bool { return target == ErrOutcomeUnknown && e.OutcomeUnknown }

// IsFenced reports whether err says a higher term took the shard: stop
// writing here (Error.SuccessorTerm names it when known).
func IsFenced(err error) bool { return Reason(err) == ReasonFenced }

// IsHandedOff reports whether err says the shard was handed off within its
// term, and to whom: its appends go to that owner now.
func IsHandedOff(err error) (Owner, bool) {
	var e *Error
	if errors.As(err, &e) && e.Reason == ReasonHandedOff {
		return e.To, true
	}
	return Owner{}, false
}

// IsOutcomeUnknown reports whether the ops of a failed Append may or may
// not be in the log.
func IsOutcomeUnknown(err error) bool { return errors.Is(err, ErrOutcomeUnknown) }

// Reason is the sidecar's stable reason for err ("" when none).
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// apiError turns a call's error into an *Error.
func apiError(op, shard string, err error) *Error {
	e := &Error{Op: op, Shard: shard, Code: connect.CodeOf(err), Err: err}
	if d := detailOf(err); d != nil {
		e.fill(d)
	}
	return e
}

// fill copies what an ErrorDetail says.
func (e *Error) fill(d *sidecarv1.ErrorDetail) {
	e.Reason, e.Term, e.SuccessorTerm = d.GetReason(), d.GetTerm(), d.GetSuccessorTerm()
	e.To = Owner{Allocation: d.GetAllocation(), Node: d.GetNode()}
}

// detailOf is the ErrorDetail of an API error, nil if it has none.
func detailOf(err error) *sidecarv1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*sidecarv1.ErrorDetail); ok {
				return ed
			}
		}
	}
	return nil
}

// notSent reports whether err is a failure to reach the sidecar at all
// (the dial failed): nothing was sent.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// transportFailure reports whether err is the connection's, not an answer
// of the sidecar (no ErrorDetail): a Read may be resumed after it.
func transportFailure(err error) bool {
	if detailOf(err) != nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal:
		return true
	}
	return false
}
