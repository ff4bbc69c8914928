// Package settle is the protocol's most common step: a create-if-absent
// whose outcome, when the store's answer does not say it, is learned by
// reading the key back and comparing content, never by assuming either
// outcome (docs/PROTOCOL.md, sections 3 and 4). A claim's fence key, a
// sync's md, a successor's poison, a seal marker, a checkpoint manifest and
// the shard's fencing settings are all created this way.
//
// Classify reads one answer to a conditional write (a create or a CAS)
// into what it says about the write's effect; Decide turns that, and what
// the read-back found, into a verdict; both are pure and table-tested.
// Create is the one function that does the I/O around them. How often a
// step is sent again (and with what backoff) stays with the caller: a
// writer's sync retries for as long as it is open, a claim or a seal for a
// bounded number of attempts, a seal's planner sends its next poison only
// after a round of reads.
//
// A context that is done before a request leaves is a definite failure:
// the portable blobstore.Container checks the context before the call
// enters its middleware and again right before it hands the call to the
// driver (blobstore/blobstore.go: refusal, dispatch), so a bare context
// error from a write means it was not sent; no driver checks it on its
// own. A context that ends while a write is in flight is an unknown outcome
// (the drivers' Classify reports it as blobstore.ErrAmbiguous), settled
// like any other.
package settle

import (
	"context"
	"errors"

	"github.com/shardfence/shardfence/blobstore"
)

// Outcome is what the answer to a conditional write says about its effect.
type Outcome int

const (
	// Landed: the write took effect.
	Landed Outcome = iota + 1
	// Refused: the store refused the write because of what the key holds:
	// it exists (a create), or holds another version or nothing (a CAS).
	// Whose object it is decides: it may be an earlier write of ours
	// whose response was lost, or our own write that an SDK resent.
	Refused
	// Unknown: the write may or may not have taken effect (a lost
	// response, a timeout, a context that ended in flight).
	Unknown
	// Definite: the write did not take effect and the error says why:
	// store trouble worth sending again (blobstore.IsRetryable: a
	// conflict, an unavailable store), or a failure no resend cures (a
	// context done before the request left, a bad key or body).
	Definite
)

func (o Outcome) String() string {
	switch o {
	case Landed:
		return "landed"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	case Definite:
		return "definite"
	}
	return "invalid"
}

// Classify reads the answer err to a create-if-absent or a
// compare-and-swap.
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return Landed
	case blobstore.IsAmbiguous(err):
		return Unknown
	case errors.Is(err, blobstore.ErrAlreadyExists), errors.Is(err, blobstore.ErrPreconditionFailed), errors.Is(err, blobstore.ErrNotFound):
		return Refused
	}
	return Definite
}

// Action is the verdict on a create-if-absent.
type Action int

const (
	// Created: our create landed now; the key holds our body.
	Created Action = iota + 1
	// Adopt: the key holds what the caller takes as its own: an earlier
	// attempt whose response was lost, or content it accepts.
	Adopt
	// Resend: the key is empty, so our create did not land (or landed
	// and was removed): send it again.
	Resend
	// Lost: the key holds another writer's object.
	Lost
)

func (a Action) String() string {
	switch a {
	case Created:
		return "created"
	case Adopt:
		return "adopt"
	case Resend:
		return "resend"
	case Lost:
		return "lost"
	}
	return "none"
}

// Verdict is the outcome of one create-if-absent.
type Verdict[T any] struct {
	Action Action
	// Token is our create's (Created) or that of the object read (Adopt,
	// Lost).
	Token blobstore.Token
	// Held is the object read, decoded (Adopt, Lost).
	Held T
	// Reason says why the object read is not ours (Lost).
	Reason string
}

// Read is what the read-back found at the key; Found is false for a
// missing key.
type Read[T any] struct {
	Found bool
	Held  T
	Token blobstore.Token
}

// Decide is the verdict on a create-if-absent from how it was answered
// and, when that left the outcome open (Refused, Unknown), what the
// read-back found; ours judges a found object. A Definite outcome has no
// verdict (the zero Verdict): the caller returns or resends its error.
func Decide[T any](out Outcome, read Read[T], ours func(held T) (bool, string)) Verdict[T] {
	switch {
	case out == Landed:
		return Verdict[T]{Action: Created}
	case out != Refused && out != Unknown:
		return Verdict[T]{}
	case !read.Found:
		return Verdict[T]{Action: Resend}
	}
	v := Verdict[T]{Action: Adopt, Held: read.Held, Token: read.Token}
	if ok, why := ours(read.Held); !ok {
		v.Action, v.Reason = Lost, why
	}
	return v
}

// Step is one create-if-absent of Body at Key.
type Step[T any] struct {
	Key  string
	Body []byte
	// Get reads Key back when the answer left the outcome open; found is
	// false for a missing key. It carries the caller's retry policy for
	// reads (Once for a single request).
	Get func(ctx context.Context, key string) (obj blobstore.Object, found bool, err error)
	// Decode parses what Get found. Its error (a corrupt body, another
	// shard's) is returned as is: a body that cannot be trusted is never
	// a verdict.
	Decode func(body []byte) (T, error)
	// Ours judges a decoded object found at Key: true when the caller
	// takes it as its own, else false and why it is another writer's.
	Ours func(held T) (bool, string)
}

// Create sends one create-if-absent and, when the answer leaves the
// outcome open, reads the key back once (through step.Get) and decides.
// Its error is the create's when Definite (IsRetryable tells whether to
// send it again), or the read's or the decoder's; otherwise the verdict
// says what happened.
func Create[T any](ctx context.Context, store *blobstore.Container, step Step[T]) (Verdict[T], error) {
	tok, err := store.CreateIfAbsent(ctx, step.Key, step.Body)
	out := Classify(err)
	switch out {
	case Landed:
		v := Decide(out, Read[T]{}, step.Ours)
		v.Token = tok
		return v, nil
	case Definite:
		return Verdict[T]{}, err
	}
	obj, found, err := step.Get(ctx, step.Key)
	if err != nil {
		return Verdict[T]{}, err
	}
	read := Read[T]{Found: found, Token: obj.Token}
	if found {
		if read.Held, err = step.Decode(obj.Body); err != nil {
			return Verdict[T]{}, err
		}
	}
	return Decide(out, read, step.Ours), nil
}

// Once reads key with a single request: found is false for a missing key.
func Once(ctx context.Context, store *blobstore.Container, key string) (blobstore.Object, bool, error) {
	obj, err := store.Get(ctx, key)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return blobstore.Object{}, false, nil
	case err != nil:
		return blobstore.Object{}, false, err
	}
	return obj, true, nil
}
