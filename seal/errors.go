package seal

import (
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
)

var (
	// ErrTermAlreadyOpen: this allocation already sealed and opened the
	// term before (a restart). Its writes may still be in flight, and a
	// term cannot poison itself, so reopening it could lose them: ask for
	// a new term.
	ErrTermAlreadyOpen = errors.New("term already opened for writes")
	// ErrLineageTruncated: a generation the restore needs lies below the
	// oldest seal marker still stored and no checkpoint covers it.
	ErrLineageTruncated = errors.New("lineage truncated")
	// ErrNoCheckpoint: no checkpoint on the lineage could be used.
	ErrNoCheckpoint = errors.New("no usable checkpoint")
	// ErrSuperseded: a higher term exists; publishing or collecting
	// garbage on behalf of this term is refused.
	ErrSuperseded = errors.New("term superseded")
	// ErrNotFresh: GC found no proof of ownership within the freshness
	// interval and did not delete anything.
	ErrNotFresh = errors.New("ownership not proven within the freshness interval")
	// ErrCheckpointExists: a different checkpoint of the term was
	// published at the generation already; checkpoints are immutable and
	// nothing was written. It also matches blobstore.ErrAlreadyExists.
	ErrCheckpointExists = fmt.Errorf("checkpoint already published (%w)", blobstore.ErrAlreadyExists)
)

// Error names the shard, key and term of a failed seal, checkpoint, inspect
// or GC step.
type Error struct {
	Op    string // Seal, Lineage, Publish, Hydrate, Inspect, GC
	Shard string
	Key   string
	Term  int64
	Err   error
}

func (e *Error) Error() string {
	hint := ""
	switch {
	case errors.Is(e.Err, ErrTermAlreadyOpen):
		hint = "; request a new, higher term for this shard and recover with it"
	case errors.Is(e.Err, ErrLineageTruncated), errors.Is(e.Err, ErrNoCheckpoint):
		hint = "; restore the missing objects from a backup or inspect the shard (nothing was written)"
	case blobstore.IsRetryable(e.Err):
		hint = "; the store did not answer definitely: retry (a retry with the same term and allocation is safe)"
	}
	where := ""
	if e.Key != "" {
		where = fmt.Sprintf(" key %q", e.Key)
	}
	return fmt.Sprintf("seal %s shard %q term %d%s: %v%s", e.Op, e.Shard, e.Term, where, e.Err, hint)
}

func (e *Error) Unwrap() error { return e.Err }

func wrapErr(op, shard, key string, term int64, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	var fe *fence.FencedError
	if errors.As(err, &se) || errors.As(err, &fe) {
		return err
	}
	return &Error{Op: op, Shard: shard, Key: key, Term: term, Err: err}
}
