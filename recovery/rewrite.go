package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/seal"
)

// RewriteOptions configure RewriteFencing.
type RewriteOptions struct {
	// Node is recorded in the fence key the rewrite claims.
	Node    string
	Clock   clock.Clock
	Backoff backoff.Policy
	// LeaseMargin is added to the lease the rewrite waits out. Default 1s.
	LeaseMargin time.Duration
	// MaxWait bounds that wait; a rewrite that would need longer is
	// rolled back. Default: seal.MaxLeaseInterval plus the margin.
	MaxWait time.Duration
	// Progress, when set, hears each step (freeze, claim, wait ..., install).
	Progress func(step string)
}

// RewriteResult is what a rewrite did.
type RewriteResult struct {
	From, To seal.Fencing
	// Unchanged: the shard already ran To; nothing was written or claimed.
	Unchanged bool
	// Waited is how long the rewrite waited out a predecessor's lease.
	Waited time.Duration
}

// ErrRewriteNotRolledBack: a rewrite failed after its freeze and putting
// the old setting back failed too; no term opens until the rewrite is run
// again.
var ErrRewriteNotRolledBack = errors.New("the old fencing setting was not put back")

// ErrRewriteUnsafe: a rewrite that shortens the successors' lease wait
// could not prove that every writer of the old setting stopped.
var ErrRewriteUnsafe = errors.New("fencing rewrite cannot be made safe")

// RewriteFencing changes the shard's stored fencing to `to` under term, for
// a shard with no live owner (an admin step; docs/PROTOCOL.md, "Rewriting
// the stored fencing"):
//
//  1. store the rewrite (seal.BeginFencingRewrite): from now on no term
//     opens, so nobody starts a writer with the old setting;
//  2. claim term (above every term of the shard): every lower fence key is
//     gone, so no lower writer renews a lease;
//  3. if `to` waits less than the old setting lets a writer hold a lease,
//     make sure no such writer acknowledges any more: no lower term ever
//     stored a seal marker (no writer ever opened), or wait out the old
//     lease from the sweep;
//  4. install `to`.
//
// A failure after step 1 puts the old setting back. The claimed term stays
// claimed: the shard's next Open needs a higher one.
func RewriteFencing(ctx context.Context, store *blobstore.Container, shard string, term int64, allocation string, to seal.Fencing, opts RewriteOptions) (RewriteResult, error) {
	defaults(&opts.Clock, &opts.Backoff, &opts.LeaseMargin)
	if opts.MaxWait <= 0 {
		opts.MaxWait = seal.MaxLeaseInterval + opts.LeaseMargin
	}
	step := func(s string) {
		if opts.Progress != nil {
			opts.Progress(s)
		}
	}
	fail := func(s string, err error) (RewriteResult, error) {
		return RewriteResult{}, stepError(s, shard, term, err)
	}
	so := seal.Options{Clock: opts.Clock, Backoff: opts.Backoff}
	step("freeze")
	rw, unchanged, err := seal.BeginFencingRewrite(ctx, store, shard, to, term, so)
	if err != nil {
		return fail("RewriteSettings", err)
	}
	if unchanged {
		return RewriteResult{From: to, To: to, Unchanged: true}, nil
	}
	res := RewriteResult{From: rw.From, To: rw.To}
	rollback := func(s string, err error) (RewriteResult, error) {
		// The old setting is always safe to put back: it is what writers
		// may run.
		if aerr := seal.AbortFencingRewrite(context.WithoutCancel(ctx), store, shard, rw, so); aerr != nil {
			err = fmt.Errorf("%w (and putting %s back failed: %w: %v; run the rewrite again)", err, rw.From, ErrRewriteNotRolledBack, aerr)
		}
		return fail(s, err)
	}
	step("claim")
	chain, err := fence.Claim(ctx, store, shard, term, allocation,
		fence.WithClock(opts.Clock), fence.WithBackoff(opts.Backoff), fence.WithNode(opts.Node))
	if err != nil {
		return rollback("Claim", err)
	}
	if rw.From.Weakens(rw.To) {
		opened, err := seal.LowerMarkers(ctx, store, shard, term, so)
		if err != nil {
			return rollback("LeaseWait", err)
		}
		if opened {
			wait := rw.From.LeaseInterval + opts.LeaseMargin
			if wait > opts.MaxWait {
				next := fmt.Sprintf("run it again allowing a wait of at least %v", wait)
				if rw.From.LeaseInterval > seal.MaxLeaseInterval {
					next = "no rewrite is safe before that: leave the shard as it is, or copy its data to a new shard"
				}
				return rollback("LeaseWait", fmt.Errorf("%w: a term opened for writes under lease %v, so a zombie of it may acknowledge without a CAS for that long after its last renewal; the rewrite would have to wait %v, more than the %v allowed; %s",
					ErrRewriteUnsafe, rw.From.LeaseInterval, wait, opts.MaxWait, next))
			}
			step(fmt.Sprintf("wait %v: a lower term opened under lease %v and may still hold it", chain.LeaseLeft(wait).Round(time.Millisecond), rw.From.LeaseInterval))
			start := opts.Clock.Now()
			if err := chain.WaitOutLease(ctx, wait); err != nil {
				return rollback("LeaseWait", err)
			}
			res.Waited = time.Duration(opts.Clock.Now() - start)
		}
	}
	step("install")
	if err := seal.FinishFencingRewrite(ctx, store, shard, rw, so); err != nil {
		return fail("RewriteSettings", err)
	}
	return res, nil
}
