package master

import (
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/master/internal/liveness"
)

// Errors the master returns, each wrapped in an *Error that names the
// operation and the object, segment or client concerned. Match them with
// errors.Is.
var (
	// ErrInvalidArgument is the protocol's one invalid-argument sentinel
	// (the same error as fence.ErrInvalidArgument and
	// sidecar.ErrInvalidArgument).
	ErrInvalidArgument      = ident.ErrInvalidArgument
	ErrObjectNotFound       = errors.New("object not found")
	ErrObjectExists         = errors.New("object already exists")
	ErrWrongClient          = errors.New("object belongs to another client")
	ErrObjectNotComplete    = errors.New("object is still being written")
	ErrObjectLeased         = errors.New("object is leased")
	ErrNoReadableReplica    = errors.New("object has no readable replica")
	ErrObjectTooLarge       = errors.New("object larger than any mounted segment")
	ErrNoSpace              = errors.New("not enough free memory")
	ErrQuotaExceeded        = errors.New("tenant quota exceeded")
	ErrSegmentNotFound      = errors.New("segment not found")
	ErrSegmentExists        = errors.New("segment already mounted")
	ErrSegmentMismatch      = errors.New("segment does not match the restored metadata")
	ErrNotEnoughSegments    = errors.New("not enough segments for the requested replicas")
	ErrDuplicateBatchObject = errors.New("object appears twice in one batch")
	// ErrNotPrimary: this master does not hold the operation log (a
	// standby, or one still opening it) and serves no request that reads
	// or changes objects.
	ErrNotPrimary = errors.New("master is not the primary")
	// ErrFenced: a newer master took over the operation log; this one
	// acknowledges nothing more. It wraps the store's fencing verdict.
	ErrFenced = errors.New("master fenced by a newer term")
	// ErrLogFailed: an append to the operation log failed for good; the
	// master stops serving, since its memory holds changes the log lacks.
	ErrLogFailed = errors.New("master operation log failed")
	// ErrClientOffline: the client's incarnation went offline and is being
	// offboarded (a barrier to its mounts and registration until that
	// completes), or the master does not know it: it must register or
	// mount again.
	ErrClientOffline = liveness.ErrClientOffline
	// ErrShardAssigned: the shard is already in the assignment table.
	ErrShardAssigned = errors.New("shard already assigned")
	// ErrShardNotAssigned: the shard is not in the assignment table.
	ErrShardNotAssigned = errors.New("shard not assigned")
	// ErrShardNotOpen: the shard's owner has not reported it open at its
	// term (assigned, failed, fenced or unassigned), so it cannot be moved.
	ErrShardNotOpen = errors.New("shard not open")
	// ErrShardMoving: a handoff of the shard (a drain's or a move's) is
	// already under way.
	ErrShardMoving = errors.New("shard already moving")
	// ErrNodeNotEligible: no node can take the shard (or the one named
	// cannot): not registered, not active, draining, or on another store.
	ErrNodeNotEligible = errors.New("no eligible node")
	// ErrRequestTooLarge: a request over --max-request-bytes (on the wire
	// or decompressed), or a batch over its item cap; nothing was done.
	ErrRequestTooLarge = errors.New("request too large")
	// ErrBusy: the master holds as many request bytes as
	// --max-concurrent-request-bytes allows; nothing was done, retry.
	ErrBusy = errors.New("master busy")
	// ErrNodeHeld: a node name is held by a live process (another
	// session that signalled within the hold); a second process with the
	// same --node name is refused until the first has been silent.
	ErrNodeHeld = errors.New("node name held by another live process")
)

// Leader is the primary master as another master knows it: its --node
// name, the URL it serves on and the term of the operation log it holds.
// The zero Leader means none is known (an election is under way, or no
// leader entry was read yet).
type Leader struct {
	Node string
	Addr string
	Term int64
}

// Known reports whether l names a primary.
func (l Leader) Known() bool { return l.Term > 0 }

func (l Leader) String() string {
	if !l.Known() {
		return "no primary known"
	}
	s := fmt.Sprintf("primary %q at term %d", l.Node, l.Term)
	if l.Addr != "" {
		s += " serving on " + l.Addr
	}
	return s
}

// RedirectError is ErrNotPrimary or ErrFenced from a master that knows
// where the primary is: clients send the request there (the API carries
// Leader in the error detail).
type RedirectError struct {
	Err    error
	Leader Leader
}

func (e *RedirectError) Error() string {
	if !e.Leader.Known() {
		return e.Err.Error() + "; no primary is known yet (an election may be under way): retry shortly"
	}
	return fmt.Sprintf("%v; send it to the %v", e.Err, e.Leader)
}

func (e *RedirectError) Unwrap() error { return e.Err }

// LeaderOf returns the primary a RedirectError inside err names.
func LeaderOf(err error) (Leader, bool) {
	var re *RedirectError
	if errors.As(err, &re) && re.Leader.Known() {
		return re.Leader, true
	}
	return Leader{}, false
}

// Error is what every master operation returns on failure.
type Error struct {
	Op      string // PutStart, PutEnd, GetReplicaList, ReMountSegment, ...
	Tenant  string
	Key     string
	Shard   string // a shard of the assignment table (fleet calls)
	Segment uint64 // 0 when no segment is concerned
	Client  string
	Err     error  // one of the Err* values, possibly wrapped with detail
	Hint    string // what the caller should do next
}

// Error names the tenant, key, shard and client as a client sent them,
// each cut to echo.Len bytes: a name of any size may be refused, and
// its error stays small.
// with is e with the cause err and the hint.
func (e Error) with(err error, hint string) *Error {
	e.Err, e.Hint = err, hint
	return &e
}

func (e *Error) Error() string {
	msg := "master " + e.Op
	if e.Key != "" {
		msg += fmt.Sprintf(" tenant %q key %q", echo.Clip(e.Tenant), echo.Clip(e.Key))
	}
	if e.Shard != "" {
		msg += fmt.Sprintf(" shard %q", echo.Clip(e.Shard))
	}
	if e.Segment != 0 {
		msg += fmt.Sprintf(" segment %d", e.Segment)
	}
	if e.Client != "" {
		msg += fmt.Sprintf(" client %q", echo.Clip(e.Client))
	}
	msg += ": " + e.Err.Error()
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Reason is the stable name of the sentinel error inside err ("" if none);
// the API carries it so a remote client can rebuild the typed error.
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return ""
}

// ErrorForReason returns the sentinel error named by Reason, or nil.
func ErrorForReason(reason string) error {
	for _, r := range reasons {
		if r.name == reason {
			return r.err
		}
	}
	return nil
}

var reasons = [...]struct {
	name string
	err  error
}{
	{"INVALID_ARGUMENT", ErrInvalidArgument},
	{"OBJECT_NOT_FOUND", ErrObjectNotFound},
	{"OBJECT_EXISTS", ErrObjectExists},
	{"WRONG_CLIENT", ErrWrongClient},
	{"OBJECT_NOT_COMPLETE", ErrObjectNotComplete},
	{"OBJECT_LEASED", ErrObjectLeased},
	{"NO_READABLE_REPLICA", ErrNoReadableReplica},
	{"OBJECT_TOO_LARGE", ErrObjectTooLarge},
	{"NO_SPACE", ErrNoSpace},
	{"QUOTA_EXCEEDED", ErrQuotaExceeded},
	{"SEGMENT_NOT_FOUND", ErrSegmentNotFound},
	{"SEGMENT_EXISTS", ErrSegmentExists},
	{"SEGMENT_MISMATCH", ErrSegmentMismatch},
	{"NOT_ENOUGH_SEGMENTS", ErrNotEnoughSegments},
	{"DUPLICATE_BATCH_OBJECT", ErrDuplicateBatchObject},
	{"NOT_PRIMARY", ErrNotPrimary},
	{"FENCED", ErrFenced},
	{"LOG_FAILED", ErrLogFailed},
	{"CLIENT_OFFLINE", ErrClientOffline},
	{"SHARD_ASSIGNED", ErrShardAssigned},
	{"SHARD_NOT_ASSIGNED", ErrShardNotAssigned},
	{"NODE_NOT_ELIGIBLE", ErrNodeNotEligible},
	{"SHARD_NOT_OPEN", ErrShardNotOpen},
	{"SHARD_MOVING", ErrShardMoving},
	{"REQUEST_TOO_LARGE", ErrRequestTooLarge},
	{"MASTER_BUSY", ErrBusy},
	{"NODE_HELD", ErrNodeHeld},
}

// clippedError bounds the message of an error sent to a client;
// errors.Is and errors.As still see the original.
type clippedError struct{ err error }

func (e clippedError) Error() string { return echo.ClipN(e.err.Error(), echo.MaxMessage) }
func (e clippedError) Unwrap() error { return e.err }

// maxItemMessage bounds the message of one item's error in a batch
// answer, which holds up to MaxBatchItems of them.
const maxItemMessage = 512
