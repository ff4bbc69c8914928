package fence

import (
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/settle"
)

// The claim's decisions, pure (the translog habit: pipeline.go decides,
// writer.go drives). Instance.ClaimWith (claim.go) is the driver: it sends
// the LISTs, the create, the deletes and the re-read, and hands what came
// back to these.

// checkClaim refuses a claim before anything is sent: a term below 1, an
// instance already fenced (whose error goes out as is: asIs), or a term
// below one this instance claimed already (a stale grant).
func checkClaim(term, held int64, fenced error) (err error, asIs bool) {
	switch {
	case term < 1:
		return fmt.Errorf("%w: term %d (terms start at 1)", ErrInvalidArgument, term), false
	case fenced != nil:
		return fenced, true
	case term < held:
		return fmt.Errorf("%w: term %d is below term %d this instance already claimed (a stale grant)", ErrInvalidArgument, term, held), false
	}
	return nil, false
}

// staleGrant judges step 1's LIST: a key of a higher term means our grant
// is stale; it returns that term (0: none) and the reason.
func staleGrant(l Listing, term int64) (higher int64, reason string) {
	if h := l.Above(term); h > 0 {
		return h, fmt.Sprintf("stale grant: term %d already claimed the shard", h)
	}
	return 0, ""
}

// createHeld is the key a settled create of step 2 leaves the claim
// holding: our attempt when it was created now, what the key holds when it
// was adopted (one of this claim's attempts, or our allocation's earlier
// claim of the term: a restart). created says the key is of this claim's
// making, and so ours to withdraw. ok is false for any other verdict.
func createHeld(v settle.Verdict[Record], attempted Record, attempts []Record) (held State, created, ok bool) {
	switch v.Action {
	case settle.Created:
		return State{Record: attempted, Token: v.Token}, true, true
	case settle.Adopt:
		return State{Record: v.Held, Token: v.Token}, IsAttempt(v.Held, attempts), true
	}
	return State{}, false, false
}

// sweepNext is what a claim does after a LIST that verifies its sweep.
type sweepNext int

const (
	// sweepWithdraw: a higher term claimed the shard meanwhile; withdraw
	// our key (if this claim created it) and stand down.
	sweepWithdraw sweepNext = iota + 1
	// sweepOwnMissing: our key was deleted, and the LIST showed no higher
	// term (a higher term deletes lower keys beside its own create, so its
	// key may not exist yet, or it is gone again); stand down.
	sweepOwnMissing
	// sweepDone: the sweep is complete and the LIST shows our key at the
	// token we hold.
	sweepDone
	// sweepReadOwn: the sweep is complete, but the LIST does not prove
	// our key unchanged (no token listed, or another one): read it.
	sweepReadOwn
	// sweepAgain: lower keys survived; delete them and LIST again after
	// a pause.
	sweepAgain
	// sweepGiveUp: lower keys survived the last round allowed.
	sweepGiveUp
)

// sweepVerdict is the decision on one verifying LIST.
type sweepVerdict struct {
	Next      sweepNext
	Higher    int64   // sweepWithdraw: the term that claimed the shard
	Survivors []int64 // sweepAgain, sweepGiveUp: lower terms still listed
	Reason    string  // sweepWithdraw, sweepOwnMissing: why
}

// judgeSweep decides the verifying LIST l of round (1 for the first) of
// the claim of term, which holds its key at token held, out of rounds
// allowed (Instance's sweep attempts).
func judgeSweep(l Listing, term int64, held blobstore.Token, round, rounds int) sweepVerdict {
	st := CheckSweep(l, term)
	switch {
	case st.Higher > 0:
		return sweepVerdict{Next: sweepWithdraw, Higher: st.Higher, Reason: fmt.Sprintf("term %d claimed the shard during this claim", st.Higher)}
	case st.OwnMissing:
		return sweepVerdict{Next: sweepOwnMissing, Reason: "fence key deleted during the claim"}
	case len(st.Survivors) == 0 && l.Token(term) == held:
		return sweepVerdict{Next: sweepDone}
	case len(st.Survivors) == 0:
		return sweepVerdict{Next: sweepReadOwn}
	case round >= rounds:
		return sweepVerdict{Next: sweepGiveUp, Survivors: st.Survivors}
	}
	return sweepVerdict{Next: sweepAgain, Survivors: st.Survivors}
}

// addSwept adds terms to the lower terms a claim deleted, each once, in
// the order first deleted.
func addSwept(swept, terms []int64) []int64 {
	for _, t := range terms {
		swept = appendUnique(swept, t)
	}
	return swept
}

func appendUnique(s []int64, v int64) []int64 {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
