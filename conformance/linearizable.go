package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shardfence/shardfence/blobstore"
)

// The linearizability check drives several clients against one key with
// Get, CreateIfAbsent, CompareAndSwap, Delete and (where the store claims it)
// DeleteIfMatch, records every call's invocation and response times, and asks
// porcupine whether some total order consistent with real time explains every
// answer under a single-register model with versions. Fencing leans on
// exactly this: a CAS that succeeds on a token no reader could have seen, or a
// Get that returns an overwritten version after a newer write completed,
// breaks the protocol's safety.

type linOpKind uint8

const (
	linGet linOpKind = iota
	linCreate
	linCAS
	linDelete
	linDeleteIfMatch
)

func (k linOpKind) String() string {
	return [...]string{"Get", "CreateIfAbsent", "CompareAndSwap", "Delete", "DeleteIfMatch"}[k]
}

type linInput struct {
	kind     linOpKind
	value    string          // written by Create and CAS; unique per call
	expected blobstore.Token // CAS and DeleteIfMatch
}

// linResult is what a call observably did.
type linResult uint8

const (
	linOK       linResult = iota // Get found, a write succeeded
	linRefused                   // Get not found, Create exists, CAS precondition failed
	linNoEffect                  // a definite failure before effect (conflict, unavailable)
	linUnknown                   // ambiguous: may or may not have taken effect
)

type linOutput struct {
	result linResult
	value  string          // Get
	token  blobstore.Token // Get, and successful writes
}

// linState is the register. token "" with exists means a version written by
// an ambiguous call whose token nobody has seen yet; the next successful Get
// binds it.
type linState struct {
	exists bool
	value  string
	token  blobstore.Token
}

func tokenMatches(state, tok blobstore.Token) bool { return state == "" || state == tok }

var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{linState{}} },
	Step: func(st, in, out any) []any {
		next := registerStep(st.(linState), in.(linInput), out.(linOutput))
		states := make([]any, len(next))
		for i, n := range next {
			states[i] = n
		}
		return states
	},
	DescribeOperation: func(in, out any) string { return describeLinOp(in.(linInput), out.(linOutput)) },
	DescribeState: func(st any) string {
		s := st.(linState)
		if !s.exists {
			return "absent"
		}
		return fmt.Sprintf("%q@%s", s.value, s.token)
	},
}

// registerStep is the register model: the states s can move to by a call
// i that answered o; none when o is not an answer the register could give
// in state s.
func registerStep(s linState, i linInput, o linOutput) []linState {
	if o.result == linNoEffect {
		return []linState{s}
	}
	switch i.kind {
	case linGet:
		switch {
		case o.result == linUnknown:
			return []linState{s}
		case o.result == linRefused && !s.exists:
			return []linState{s}
		case o.result == linOK && s.exists && s.value == o.value && tokenMatches(s.token, o.token):
			return []linState{{exists: true, value: s.value, token: o.token}}
		}
		return nil
	case linCreate:
		return conditionalStep(s, o, !s.exists, linState{exists: true, value: i.value}, s.exists)
	case linCAS:
		applies := s.exists && tokenMatches(s.token, i.expected)
		return conditionalStep(s, o, applies, linState{exists: true, value: i.value}, !s.exists || s.token != i.expected)
	case linDeleteIfMatch:
		applies := s.exists && tokenMatches(s.token, i.expected)
		return conditionalStep(s, o, applies, linState{}, !s.exists || s.token != i.expected)
	}
	// An unconditional Delete.
	switch o.result {
	case linUnknown:
		return []linState{s, {}}
	case linOK:
		return []linState{{}}
	}
	return nil
}

// conditionalStep is the step of a conditional write from s: applies says
// its condition holds, after is the state it writes (its token still
// unknown), refusable says a refusal is right in s.
func conditionalStep(s linState, o linOutput, applies bool, after linState, refusable bool) []linState {
	switch {
	case o.result == linUnknown && applies:
		return []linState{s, after}
	case o.result == linUnknown:
		return []linState{s}
	case o.result == linOK && applies:
		if after.exists {
			after.token = o.token
		}
		return []linState{after}
	case o.result == linRefused && refusable:
		return []linState{s}
	}
	return nil
}

// describeLinOp is one call and its answer, for a failure's report.
func describeLinOp(i linInput, o linOutput) string {
	res := [...]string{"ok", "refused", "no effect", "unknown"}[o.result]
	switch i.kind {
	case linGet:
		if o.result == linOK {
			return fmt.Sprintf("Get -> %q@%s", o.value, o.token)
		}
		return "Get -> " + res
	case linCreate:
		return fmt.Sprintf("CreateIfAbsent(%q) -> %s %s", i.value, res, o.token)
	case linCAS:
		return fmt.Sprintf("CompareAndSwap(%s, %q) -> %s %s", i.expected, i.value, res, o.token)
	case linDeleteIfMatch:
		return fmt.Sprintf("DeleteIfMatch(%s) -> %s", i.expected, res)
	default:
		return "Delete -> " + res
	}
}

// classify maps a call's error onto the model's outcomes; ok reports whether
// the error is one the contract allows for the call.
func classify(err error, refusal error) (linResult, bool) {
	switch {
	case err == nil:
		return linOK, true
	case refusal != nil && errors.Is(err, refusal):
		return linRefused, true
	case blobstore.IsAmbiguous(err):
		return linUnknown, true
	case errors.Is(err, blobstore.ErrConflict), errors.Is(err, blobstore.ErrUnavailable):
		return linNoEffect, true
	}
	return linUnknown, false
}

// The mix of calls each client makes, and how many.
const linClients, linOpsPerClient = 6, 50

func checkLinearizable(t T, c *blobstore.Container) {
	ctx := t.Context()
	conditionalDelete := c.Capabilities().ConditionalDelete
	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }
	var wg sync.WaitGroup
	for client := range linClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(client), 0x5eed))
			var known []blobstore.Token // tokens this client has seen, newest last
			for n := range linOpsPerClient {
				in := linPick(rng, client, n, conditionalDelete, known)
				call := now()
				out, err := linCall(ctx, c, in)
				op, allowed := linOperation(client, in, out, err, call, now())
				if !allowed {
					t.Errorf("client %d: %s: unexpected error %v", client, in.kind, err)
				}
				if o := op.Output.(linOutput); o.result == linOK && o.token != "" {
					known = append(known, o.token)
				}
				mu.Lock()
				history = append(history, op)
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("linearizability history cut short: %v", ctx.Err())
	}
	result, info := porcupine.CheckOperationsVerbose(registerModel.ToModel(), history, time.Minute)
	reportLinearizability(t, result, info, len(history))
}

// linPick is client's n-th call: the kind from one draw (linKind), and for
// a CAS or DeleteIfMatch the token it expects (linExpected).
func linPick(rng *rand.Rand, client, n int, conditionalDelete bool, known []blobstore.Token) linInput {
	in := linInput{value: fmt.Sprintf("c%d-%d", client, n), kind: linKind(rng.IntN(100), conditionalDelete)}
	if in.kind == linCAS || in.kind == linDeleteIfMatch {
		// Mostly the newest token seen, sometimes an older one: stale
		// calls are what the model must refuse.
		stale := -1
		if len(known) > 0 && rng.IntN(4) == 0 {
			stale = rng.IntN(len(known))
		}
		in.expected = linExpected(known, stale)
	}
	return in
}

// linKind is the kind of call a draw in 0..99 makes: 35% Get, 20%
// CreateIfAbsent, 37% CompareAndSwap, and the rest deletes, conditional
// ones where the store offers them.
func linKind(draw int, conditionalDelete bool) linOpKind {
	switch {
	case draw < 35:
		return linGet
	case draw < 55:
		return linCreate
	case draw < 92:
		return linCAS
	case draw < 96 && conditionalDelete:
		return linDeleteIfMatch
	}
	return linDelete
}

// linExpected is the token a conditional call expects: the newest of
// known, or known[stale] when stale is not -1, or a token no store
// returned while known is empty.
func linExpected(known []blobstore.Token, stale int) blobstore.Token {
	switch {
	case len(known) == 0:
		return "no-token-yet"
	case stale >= 0:
		return known[stale]
	}
	return known[len(known)-1]
}

// linCall makes the call on the register's key.
func linCall(ctx context.Context, c *blobstore.Container, in linInput) (linOutput, error) {
	const key = "linearizable/register"
	var out linOutput
	var err error
	switch in.kind {
	case linGet:
		var obj blobstore.Object
		obj, err = c.Get(ctx, key)
		out.value, out.token = string(obj.Body), obj.Token
	case linCreate:
		out.token, err = c.CreateIfAbsent(ctx, key, []byte(in.value))
	case linCAS:
		out.token, err = c.CompareAndSwap(ctx, key, in.expected, []byte(in.value))
	case linDelete:
		err = c.Delete(ctx, key)
	case linDeleteIfMatch:
		err = c.DeleteIfMatch(ctx, key, in.expected)
	}
	return out, err
}

// linRefusals is the definite refusal each kind of call may answer with.
var linRefusals = [...]error{
	linGet:           blobstore.ErrNotFound,
	linCreate:        blobstore.ErrAlreadyExists,
	linCAS:           blobstore.ErrPreconditionFailed,
	linDelete:        nil,
	linDeleteIfMatch: blobstore.ErrPreconditionFailed,
}

// linOperation is a call of client, invoked at call and returned at ret, as
// the history records it; allowed is false for an error the contract does
// not allow the call. A call of unknown outcome may take effect at any
// later time, so it never returns.
func linOperation(client int, in linInput, out linOutput, err error, call, ret int64) (porcupine.Operation, bool) {
	res, allowed := classify(err, linRefusals[in.kind])
	out.result = res
	if res == linUnknown {
		ret = math.MaxInt64
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}, allowed
}

// reportLinearizability says what porcupine found in a history of n calls:
// for a history no order explains, the last calls of its longest
// linearizable prefix.
func reportLinearizability(t T, result porcupine.CheckResult, info porcupine.LinearizationInfo, n int) {
	switch result {
	case porcupine.Ok:
		t.Logf("%d operations by %d clients are linearizable", n, linClients)
		return
	case porcupine.Unknown:
		t.Errorf("linearizability of %d operations could not be decided within a minute", n)
		return
	}
	t.Errorf("the history of %d Get/CreateIfAbsent/CompareAndSwap/Delete calls by %d clients on one key is not linearizable: no order of the calls consistent with real time explains every answer", n, linClients)
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, seq := range part {
			if len(seq) > len(longest) {
				longest = seq
			}
		}
	}
	t.Logf("the longest linearizable prefix has %d operations; its last ones, after which no pending call fits:", len(longest))
	for _, op := range longest[max(0, len(longest)-10):] {
		t.Logf("  client %d: %s", op.ClientId, describeLinOp(op.Input.(linInput), op.Output.(linOutput)))
	}
}
