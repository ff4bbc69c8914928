package fence

import (
	"sort"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
)

// Listing is what a LIST of fence/ says, reduced to what the protocol
// decides on.
type Listing struct {
	// Terms holds every term that has a fence key, highest first.
	Terms []int64
	// Strays are keys under fence/ that are not fence keys. They are
	// neither deleted nor trusted.
	Strays []string
	// Tokens holds each fence key's version token as listed (none when
	// the store lists no tokens).
	Tokens map[int64]blobstore.Token
}

// ParseListing turns LIST items into a Listing.
func ParseListing(items []blobstore.Attrs) Listing {
	var l Listing
	for _, it := range items {
		if t, ok := layout.ParseFenceKey(it.Key); ok {
			l.Terms = append(l.Terms, t)
			if it.Token != "" {
				if l.Tokens == nil {
					l.Tokens = make(map[int64]blobstore.Token)
				}
				l.Tokens[t] = it.Token
			}
		} else {
			l.Strays = append(l.Strays, it.Key)
		}
	}
	sort.Slice(l.Terms, func(i, j int) bool { return l.Terms[i] > l.Terms[j] })
	return l
}

// Above returns the highest term above term, or 0 if there is none.
func (l Listing) Above(term int64) int64 {
	if len(l.Terms) > 0 && l.Terms[0] > term {
		return l.Terms[0]
	}
	return 0
}

// Below returns the terms below term, highest first.
func (l Listing) Below(term int64) []int64 {
	var out []int64
	for _, t := range l.Terms {
		if t < term {
			out = append(out, t)
		}
	}
	return out
}

// Token returns the listed version token of term's key; empty when the
// key is not listed or the store lists no tokens.
func (l Listing) Token(term int64) blobstore.Token { return l.Tokens[term] }

// Has reports whether term has a key.
func (l Listing) Has(term int64) bool {
	for _, t := range l.Terms {
		if t == term {
			return true
		}
	}
	return false
}

// SweepStatus is the verdict on the LIST that verifies a claim's sweep.
type SweepStatus struct {
	// Higher is the highest term above ours (0: none). A higher term means
	// this claim lost and must withdraw.
	Higher int64
	// Survivors are lower terms whose keys are still there: a delete was
	// dropped or not yet visible; delete again.
	Survivors []int64
	// OwnMissing: our own key is not listed, so someone deleted it.
	OwnMissing bool
}

// CheckSweep decides, from the LIST after deleting lower keys, whether the
// claim of term may go on.
func CheckSweep(l Listing, term int64) SweepStatus {
	return SweepStatus{Higher: l.Above(term), Survivors: l.Below(term), OwnMissing: !l.Has(term)}
}

// Observation is what a read of a fence key returned.
type Observation struct {
	Found  bool
	Record Record
	Token  blobstore.Token
}

// State is a fence key's content with the token it was written or read at.
type State struct {
	Record Record
	Token  blobstore.Token
}

// Action is what a verdict tells the caller to do.
type Action int

const (
	// Adopt: the key holds our write; continue from Verdict.Token.
	Adopt Action = iota + 1
	// Resend: our write did not take effect and nothing else changed; send
	// it again.
	Resend
	// Fenced: the chain is lost; stop for good.
	Fenced
)

func (a Action) String() string {
	switch a {
	case Adopt:
		return "adopt"
	case Resend:
		return "resend"
	case Fenced:
		return "fenced"
	}
	return "unknown"
}

// Verdict is the outcome of settling a write whose response was lost or
// refused.
type Verdict struct {
	Action Action
	State  State  // for Adopt: the record and token to continue from
	Reason string // for Fenced: why
}

// SettleCreate decides a claim's create-if-absent from a read of the key
// after the create failed with AlreadyExists or an unknown outcome.
// attempts are the records this claim sent, the last one last; each carries
// its own nonce, and any whose response was lost may be the one that landed.
func SettleCreate(obs Observation, attempts ...Record) Verdict {
	if len(attempts) == 0 {
		return Verdict{Action: Fenced, Reason: "no create to settle"}
	}
	attempted := attempts[len(attempts)-1]
	switch {
	case !obs.Found:
		// An unknown outcome that did not land (or a create that a
		// racing claim of a higher term already swept): create again.
		return Verdict{Action: Resend}
	case IsAttempt(obs.Record, attempts):
		return Verdict{Action: Adopt, State: State{Record: obs.Record, Token: obs.Token}}
	case obs.Record.Allocation == attempted.Allocation:
		// Our allocation claimed this term before (a restart): continue
		// its chain where it stands.
		return Verdict{Action: Adopt, State: State{Record: obs.Record, Token: obs.Token}}
	default:
		return Verdict{Action: Fenced, Reason: "term already claimed by allocation " + quote(obs.Record.Allocation)}
	}
}

// IsAttempt reports whether r is one of attempts.
func IsAttempt(r Record, attempts []Record) bool {
	for _, a := range attempts {
		if r == a {
			return true
		}
	}
	return false
}

// SettleWrite decides a CAS of the fence key from a read after the CAS
// failed with PreconditionFailed, NotFound or an unknown outcome. prev is
// the state the CAS expected; attempts are our writes on top of prev whose
// outcome is unknown, the one just sent last (a request that timed out may
// still land later, so an earlier attempt found in the key is ours too).
// Content identity, not the error, decides: an SDK may resend a CAS whose
// response was lost and then report a precondition failure for our own
// write.
func SettleWrite(obs Observation, prev State, attempts ...Record) Verdict {
	if len(attempts) == 0 {
		return Verdict{Action: Fenced, Reason: "no write to settle"}
	}
	attempted := attempts[len(attempts)-1]
	if !obs.Found {
		return Verdict{Action: Fenced, Reason: "fence key deleted (a higher term claimed the shard)"}
	}
	if IsAttempt(obs.Record, attempts) {
		return Verdict{Action: Adopt, State: State{Record: obs.Record, Token: obs.Token}}
	}
	switch {
	case obs.Record == prev.Record && obs.Token == prev.Token:
		return Verdict{Action: Resend}
	case obs.Record.Allocation != attempted.Allocation && obs.Record.Allocation != prev.Record.Allocation:
		return Verdict{Action: Fenced, Reason: "fence key now owned by allocation " + quote(obs.Record.Allocation)}
	default:
		// Neither one of our writes nor the state we expected: another
		// writer (a relocation peer, or a second process with our
		// identity) moved the chain. It is not ours alone any more.
		return Verdict{Action: Fenced, Reason: "fence key rewritten by another writer (owner " + quote(obs.Record.Allocation) + ", seq " + itoa(obs.Record.Seq) + "; this writer expected seq " + itoa(prev.Record.Seq) + " or " + itoa(attempted.Seq) + ")"}
	}
}

// CheckOwn decides the re-read of our key at the end of a claim: it must
// still be exactly what we hold.
func CheckOwn(obs Observation, held State) Verdict {
	switch {
	case !obs.Found:
		return Verdict{Action: Fenced, Reason: "fence key deleted right after the claim (a higher term claimed the shard)"}
	case obs.Token != held.Token || obs.Record != held.Record:
		return Verdict{Action: Fenced, Reason: "fence key changed right after the claim (now allocation " + quote(obs.Record.Allocation) + ", seq " + itoa(obs.Record.Seq) + ")"}
	}
	return Verdict{Action: Adopt, State: held}
}
