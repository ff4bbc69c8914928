package conformance

import (
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
		s, i, o := st.(linState), in.(linInput), out.(linOutput)
		if o.result == linNoEffect {
			return []any{s}
		}
		switch i.kind {
		case linGet:
			switch {
			case o.result == linUnknown:
				return []any{s}
			case o.result == linRefused && !s.exists:
				return []any{s}
			case o.result == linOK && s.exists && s.value == o.value && tokenMatches(s.token, o.token):
				return []any{linState{exists: true, value: s.value, token: o.token}}
			}
		case linCreate:
			switch {
			case o.result == linUnknown && !s.exists:
				return []any{s, linState{exists: true, value: i.value}}
			case o.result == linUnknown:
				return []any{s}
			case o.result == linOK && !s.exists:
				return []any{linState{exists: true, value: i.value, token: o.token}}
			case o.result == linRefused && s.exists:
				return []any{s}
			}
		case linCAS:
			applies := s.exists && tokenMatches(s.token, i.expected)
			switch {
			case o.result == linUnknown && applies:
				return []any{s, linState{exists: true, value: i.value}}
			case o.result == linUnknown:
				return []any{s}
			case o.result == linOK && applies:
				return []any{linState{exists: true, value: i.value, token: o.token}}
			case o.result == linRefused && (!s.exists || s.token != i.expected):
				return []any{s}
			}
		case linDelete:
			switch o.result {
			case linUnknown:
				return []any{s, linState{}}
			case linOK:
				return []any{linState{}}
			}
		case linDeleteIfMatch:
			applies := s.exists && tokenMatches(s.token, i.expected)
			switch {
			case o.result == linUnknown && applies:
				return []any{s, linState{}}
			case o.result == linUnknown:
				return []any{s}
			case o.result == linOK && applies:
				return []any{linState{}}
			case o.result == linRefused && (!s.exists || s.token != i.expected):
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(linInput), out.(linOutput)
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
	},
	DescribeState: func(st any) string {
		s := st.(linState)
		if !s.exists {
			return "absent"
		}
		return fmt.Sprintf("%q@%s", s.value, s.token)
	},
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

func checkLinearizable(t T, c *blobstore.Container) {
	ctx := t.Context()
	const clients, opsPerClient = 6, 50
	key := "linearizable/register"
	conditionalDelete := c.Capabilities().ConditionalDelete
	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }

	var wg sync.WaitGroup
	for client := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(client), 0x5eed))
			var known []blobstore.Token // tokens this client has seen, newest last
			for n := range opsPerClient {
				in := linInput{value: fmt.Sprintf("c%d-%d", client, n)}
				switch r := rng.IntN(100); {
				case r < 35:
					in.kind = linGet
				case r < 55:
					in.kind = linCreate
				case r < 92:
					in.kind = linCAS
				case r < 96 && conditionalDelete:
					in.kind = linDeleteIfMatch
				default:
					in.kind = linDelete
				}
				if in.kind == linCAS || in.kind == linDeleteIfMatch {
					in.expected = "no-token-yet"
					if len(known) > 0 {
						// Mostly the newest token seen, sometimes an older
						// one: stale calls are what the model must refuse.
						i := len(known) - 1
						if rng.IntN(4) == 0 {
							i = rng.IntN(len(known))
						}
						in.expected = known[i]
					}
				}
				var out linOutput
				var err error
				var refusal error
				call := now()
				switch in.kind {
				case linGet:
					var obj blobstore.Object
					obj, err = c.Get(ctx, key)
					out.value, out.token, refusal = string(obj.Body), obj.Token, blobstore.ErrNotFound
				case linCreate:
					out.token, err = c.CreateIfAbsent(ctx, key, []byte(in.value))
					refusal = blobstore.ErrAlreadyExists
				case linCAS:
					out.token, err = c.CompareAndSwap(ctx, key, in.expected, []byte(in.value))
					refusal = blobstore.ErrPreconditionFailed
				case linDelete:
					err = c.Delete(ctx, key)
				case linDeleteIfMatch:
					err = c.DeleteIfMatch(ctx, key, in.expected)
					refusal = blobstore.ErrPreconditionFailed
				}
				ret := now()
				res, allowed := classify(err, refusal)
				if !allowed {
					t.Errorf("client %d: %s: unexpected error %v", client, in.kind, err)
				}
				out.result = res
				if res == linUnknown {
					// The call may take effect at any later time.
					ret = math.MaxInt64
				}
				if res == linOK && out.token != "" {
					known = append(known, out.token)
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
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
	switch result {
	case porcupine.Ok:
		t.Logf("%d operations by %d clients are linearizable", len(history), clients)
	case porcupine.Unknown:
		t.Errorf("linearizability of %d operations could not be decided within a minute", len(history))
	default:
		t.Errorf("the history of %d Get/CreateIfAbsent/CompareAndSwap/Delete calls by %d clients on one key is not linearizable: no order of the calls consistent with real time explains every answer", len(history), clients)
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
			t.Logf("  client %d: %s", op.ClientId, registerModel.DescribeOperation(op.Input, op.Output))
		}
	}
}
