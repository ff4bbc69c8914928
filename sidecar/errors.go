package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Errors of the service itself, each wrapped in an *Error naming the
// operation and shard. Match them with errors.Is.
var (
	// ErrInvalidArgument: a request the service cannot use (bad shard id,
	// term < 1, an op or request over the limits). It is the protocol's
	// one sentinel: fence.ErrInvalidArgument and master.ErrInvalidArgument
	// are the same error.
	ErrInvalidArgument = fence.ErrInvalidArgument
	// ErrShardNotOpen: the shard is not open on this sidecar.
	ErrShardNotOpen = errors.New("shard not open on this sidecar")
	// ErrShardBusy: another Open or Close of the shard is in progress.
	ErrShardBusy = errors.New("shard is being opened or closed")
	// ErrWrongTerm: the shard is open at another term than the caller
	// expects.
	ErrWrongTerm = errors.New("shard open at another term")
	// ErrShuttingDown: the sidecar is draining for shutdown and takes no
	// new appends or opens.
	ErrShuttingDown = errors.New("sidecar shutting down")
	// ErrHandingOff: the shard is being handed off; the append was not
	// acknowledged. Retry on the target once it adopted, or here if the
	// handoff is aborted.
	ErrHandingOff = errors.New("shard is being handed off")
	// ErrNotAvailable: the operation needs a part of the protocol this
	// build does not wire in.
	ErrNotAvailable = errors.New("operation not available in this build")
	// ErrUnfencedRefused: fencing was disabled for a shard without the
	// sidecar allowing unfenced shards.
	ErrUnfencedRefused = errors.New("unfenced shards are not allowed on this sidecar")
	// ErrStoreFault: an Append's deadline ran out while the shard's syncs
	// were retrying store errors. The outcome is unknown: the ops may
	// still become durable once the store takes writes again.
	ErrStoreFault = errors.New("store fault")
	// ErrReplaying: a warm-opened shard is still replaying the translog
	// after its checkpoint; nothing was written. Appends (and handoffs,
	// checkpoints) open once Status reports replaying false.
	ErrReplaying = errors.New("shard is replaying its translog: appends open when the replay ends")
	// ErrPartial: the call needs every checkpoint file local (GC could
	// collect the checkpoint a partial shard still reads from the store).
	ErrPartial = errors.New("shard's checkpoint is still hydrating (partial locality)")
	// ErrNotWarm: ReadCheckpointFile on a shard opened without warm (its
	// files were streamed by Open) or with no checkpoint to serve.
	ErrNotWarm = errors.New("no checkpoint served on demand")
	// ErrNoSuchFile: ReadCheckpointFile of a file the served checkpoint's
	// manifest does not list.
	ErrNoSuchFile = errors.New("no such checkpoint file")
	// ErrOutOfRange: ReadCheckpointFile of a range that ends past the
	// file, or starts before it.
	ErrOutOfRange = errors.New("range beyond the checkpoint file")
	// ErrCorruptCheckpoint: a checkpoint file's bytes in the store do not
	// match the checksum they had (a block fetched again differs from its
	// first fetch, or the whole file from the manifest's CRC-32C), or the
	// file is missing or of another size or version. Nothing unverified
	// was sent.
	ErrCorruptCheckpoint = errors.New("checkpoint file corrupt in the store")
	// ErrBusy: the sidecar holds as many request bytes as
	// --max-concurrent-request-bytes allows; nothing was done, retry.
	ErrBusy = errors.New("sidecar busy")
)

// Error is what every service operation returns on failure.
type Error struct {
	Op    string // Open, Append, Read, Status, Close, Inspect, ...
	Shard string
	Err   error
	Hint  string // what the caller should do next
}

func (e *Error) Error() string {
	inner := e.Err.Error()
	var fe *fence.FencedError
	if errors.As(e.Err, &fe) {
		// The fencing verdict without the fence package's own advice: the
		// hint below says what to do, once.
		inner = strings.Replace(inner, fe.Error(), fencedCause(fe), 1)
	}
	// One subject: the shard is named here, not again by the cause.
	inner = strings.TrimPrefix(inner, fmt.Sprintf("shard %q: ", e.Shard))
	msg := fmt.Sprintf("sidecar %s shard %q: %s", e.Op, e.Shard, inner)
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// fencedCause is a fencing verdict as one cause: which term and allocation
// lost the shard, through which key, why, and to which term.
func fencedCause(fe *fence.FencedError) string {
	succ := "successor term unknown"
	if fe.Successor > 0 {
		succ = fmt.Sprintf("successor term %d", fe.Successor)
	}
	return fmt.Sprintf("primary fenced at term %d (allocation %q, key %q): %s; %s", fe.Term, fe.Allocation, fe.Key, fe.Reason, succ)
}

func (e *Error) Unwrap() error { return e.Err }

// opErr names the operation and shard of err; the shard as the client sent
// it, bounded (an invalid name can be any size).
func opErr(op, shard string, err error, hint string) error {
	return &Error{Op: op, Shard: clip(shard), Err: err, Hint: hint}
}

// reasons are the stable names the API carries in ErrorDetail.reason, in
// the order they are tested (the most specific first).
var reasons = []struct {
	name string
	err  error
	code connect.Code
}{
	{"fenced", fence.ErrFenced, connect.CodeFailedPrecondition},
	{"handed_off", fence.ErrHandedOff, connect.CodeFailedPrecondition},
	{"term_already_open", seal.ErrTermAlreadyOpen, connect.CodeFailedPrecondition},
	{"fencing_mismatch", seal.ErrFencingMismatch, connect.CodeFailedPrecondition},
	{"settings_rewrite", seal.ErrFencingRewrite, connect.CodeUnavailable},
	{"settings_out_of_range", seal.ErrFencingOutOfRange, connect.CodeFailedPrecondition},
	{"superseded", seal.ErrSuperseded, connect.CodeFailedPrecondition},
	{"lineage_truncated", seal.ErrLineageTruncated, connect.CodeFailedPrecondition},
	{"no_checkpoint", seal.ErrNoCheckpoint, connect.CodeFailedPrecondition},
	{"checkpoint_exists", seal.ErrCheckpointExists, connect.CodeAlreadyExists},
	{"not_fresh", seal.ErrNotFresh, connect.CodeUnavailable},
	{"wrong_term", ErrWrongTerm, connect.CodeFailedPrecondition},
	{"preconditions_not_enforced", blobstore.ErrPreconditionsNotEnforced, connect.CodeFailedPrecondition},
	{"unfenced_refused", ErrUnfencedRefused, connect.CodeFailedPrecondition},
	{"not_open", ErrShardNotOpen, connect.CodeNotFound},
	{"replaying", ErrReplaying, connect.CodeUnavailable},
	{"partial", ErrPartial, connect.CodeUnavailable},
	{"not_warm", ErrNotWarm, connect.CodeFailedPrecondition},
	{"no_such_file", ErrNoSuchFile, connect.CodeNotFound},
	{"out_of_range", ErrOutOfRange, connect.CodeOutOfRange},
	{"corrupt", ErrCorruptCheckpoint, connect.CodeDataLoss},
	{"busy", ErrShardBusy, connect.CodeAborted},
	{"handing_off", ErrHandingOff, connect.CodeUnavailable},
	{"shutting_down", ErrShuttingDown, connect.CodeUnavailable},
	{"not_available", ErrNotAvailable, connect.CodeUnimplemented},
	{"backpressure", translog.ErrBackpressure, connect.CodeResourceExhausted},
	{"sidecar_busy", ErrBusy, connect.CodeResourceExhausted},
	{"watch_behind", ErrWatchBehind, connect.CodeResourceExhausted},
	{"unavailable", ErrStoreFault, connect.CodeUnavailable},
	{"closed", translog.ErrClosed, connect.CodeUnavailable},
	{"too_large", blobstore.ErrTooLarge, connect.CodeInvalidArgument},
	{"invalid_argument", ErrInvalidArgument, connect.CodeInvalidArgument},
	{"invalid_argument", blobstore.ErrInvalidKey, connect.CodeInvalidArgument},
	{"corrupt", fence.ErrCorruptBody, connect.CodeDataLoss},
	{"corrupt", fence.ErrForeignShard, connect.CodeDataLoss},
	{"corrupt", fence.ErrUnknownVersion, connect.CodeDataLoss},
	{"missing_generation", translog.ErrMissingGen, connect.CodeDataLoss},
	{"ambiguous", blobstore.ErrAmbiguous, connect.CodeUnavailable},
	{"unavailable", blobstore.ErrUnavailable, connect.CodeUnavailable},
	{"unavailable", blobstore.ErrConflict, connect.CodeUnavailable},
	{"unavailable", fence.ErrSweepIncomplete, connect.CodeUnavailable},
}

// Reason is the stable name of the error class inside err ("" if none).
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return ""
}

// ErrorForReason returns the sentinel error a Reason names, or nil.
func ErrorForReason(reason string) error {
	for _, r := range reasons {
		if r.name == reason {
			return r.err
		}
	}
	return nil
}

// connectError maps err to an API code and attaches an ErrorDetail, so a
// client can tell fenced (with the successor term) from an outage without
// parsing the message.
func connectError(shard string, err error) error {
	if err == nil {
		return nil
	}
	var se *streamEnd
	if errors.As(err, &se) {
		return streamEndError(shard, se)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	reason, code := classify(err)
	out := connect.NewError(code, clippedError{err})
	if detail, derr := connect.NewErrorDetail(errorDetail(shard, reason, err)); derr == nil {
		out.AddDetail(detail)
	}
	return out
}

// errorDetail is the ErrorDetail of err: its reason, and what the error
// knows of fencing, keys and handoffs.
func errorDetail(shard, reason string, err error) *sidecarv1.ErrorDetail {
	d := &sidecarv1.ErrorDetail{Reason: reason, Shard: clip(shard)}
	var fe *fence.FencedError
	if errors.As(err, &fe) {
		d.Term, d.SuccessorTerm, d.Key = fe.Term, fe.Successor, fe.Key
	}
	var be *fence.BodyError
	if errors.As(err, &be) {
		d.Key = be.Key
	}
	var he *handoffError
	if errors.As(err, &he) {
		d.Allocation, d.Node = clip(he.target), clip(he.node)
	}
	return d
}

// streamEndError is the API error that ends an append stream: the cause's
// code and message, and an ErrorDetail with the last request admitted. A
// cause that is already an API error (the stream's transport failed, a
// message was too large) keeps its code and reason.
func streamEndError(shard string, se *streamEnd) error {
	var ce *connect.Error
	var d *sidecarv1.ErrorDetail
	var out *connect.Error
	if errors.As(se.err, &ce) {
		out = connect.NewError(ce.Code(), errors.New(clipN(fmt.Sprintf("%s (append stream ended; requests above id %d were not written)", ce.Message(), se.admitted), maxErrorMessage)))
		d = &sidecarv1.ErrorDetail{Shard: clip(shard)}
		for _, cd := range ce.Details() {
			if v, derr := cd.Value(); derr == nil {
				if ed, ok := v.(*sidecarv1.ErrorDetail); ok {
					d = ed
				}
			}
		}
		if d.Reason == "" {
			d.Reason, _ = classify(se.err)
		}
	} else {
		reason, code := classify(se.err)
		out = connect.NewError(code, clippedError{se})
		d = errorDetail(shard, reason, se.err)
	}
	d.LastAdmittedRequestId = se.admitted
	if detail, derr := connect.NewErrorDetail(d); derr == nil {
		out.AddDetail(detail)
	}
	return out
}

// classify is the stable reason and the API code of err: the caller's
// cancellation or deadline, else the first class of reasons that matches
// ("" and internal when none does).
func classify(err error) (string, connect.Code) {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled", connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded", connect.CodeDeadlineExceeded
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name, r.code
		}
	}
	return "", connect.CodeInternal
}

// reasonLabel is the metric label of err: its reason, or internal.
func reasonLabel(err error) string {
	if r, _ := classify(err); r != "" {
		return r
	}
	return "internal"
}

// hintFor says what a caller does next about an error from below.
func hintFor(err error) string {
	switch {
	case errors.Is(err, fence.ErrFenced):
		return "a successor holds the shard: stop writing here and send appends to the new primary"
	case errors.Is(err, translog.ErrClosed):
		return "not acknowledged; open the shard again or use its new primary"
	case errors.Is(err, ErrNotAvailable):
		return "use a build with the recovery path"
	}
	return ""
}
