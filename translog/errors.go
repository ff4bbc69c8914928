package translog

import (
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
)

// ErrFenced is fence.ErrFenced: every pending and later append of a fenced
// writer fails with a *fence.FencedError naming the successor term when
// known.
var ErrFenced = fence.ErrFenced

var (
	// ErrClosed: the writer was closed; the append was not acknowledged.
	ErrClosed = errors.New("translog writer closed")
	// ErrBackpressure: the in-flight byte limit is reached and the writer
	// fails fast instead of waiting; retry later or slow down.
	ErrBackpressure = errors.New("translog in-flight byte limit reached")
	// ErrMissingGen: a generation the reader was asked for has no md.
	ErrMissingGen = errors.New("translog generation missing")
	// ErrPoisoned: the reader met a poison md; the range runs past the
	// end of its lineage.
	ErrPoisoned = errors.New("translog generation poisoned by a successor")
)

// Error names the shard, key and generation of a failed translog
// operation.
type Error struct {
	Op    string // Open, Append, Close, Read
	Shard string
	Key   string
	Gen   int64
	Err   error
}

func (e *Error) Error() string {
	hint := ""
	switch {
	case errors.Is(e.Err, ErrBackpressure):
		hint = "; slow down or raise MaxInFlightBytes"
	case blobstore.IsAmbiguous(e.Err):
		hint = "; the outcome is unknown: the ops may still become durable, so a retry may duplicate them"
	case blobstore.IsRetryable(e.Err):
		hint = "; retry"
	}
	where := ""
	if e.Key != "" {
		where = fmt.Sprintf(" key %q", e.Key)
	}
	if e.Gen > 0 {
		where += fmt.Sprintf(" generation %d", e.Gen)
	}
	return fmt.Sprintf("translog %s shard %q%s: %v%s", e.Op, e.Shard, where, e.Err, hint)
}

func (e *Error) Unwrap() error { return e.Err }
