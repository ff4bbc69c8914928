package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
)

// Op names a Container method.
type Op string

// The requests an actor can send.
const (
	OpGet           Op = "Get"
	OpStat          Op = "Stat"
	OpPut           Op = "Put"
	OpCreate        Op = "CreateIfAbsent"
	OpCAS           Op = "CompareAndSwap"
	OpDelete        Op = "Delete"
	OpDeleteIfMatch Op = "DeleteIfMatch"
	OpList          Op = "List"
	// OpGate is not a store request: an actor waits at a gate until the
	// scheduler opens it, so actor-side events (an append arriving) are
	// ordered by the schedule too.
	OpGate Op = "Gate"
)

func (o Op) isWrite() bool {
	switch o {
	case OpPut, OpCreate, OpCAS, OpDelete, OpDeleteIfMatch:
		return true
	}
	return false
}

// Outcome is what the scheduler does with a pending request.
type Outcome uint8

const (
	// Deliver applies the request and returns the store's answer.
	Deliver Outcome = iota
	// Lose applies the request and loses the response: the actor hears
	// blobstore.ErrAmbiguous.
	Lose
	// Fail refuses the request before it takes effect (ErrUnavailable).
	Fail
	// Conflict refuses a conditional write with S3's 409
	// ConditionalRequestConflict (ErrConflict), before any effect.
	Conflict
	// Drop acknowledges a delete without applying it, as one key of a
	// multi-key delete that failed silently.
	Drop
	// Delay answers ErrAmbiguous now and keeps the request in flight: it
	// may take effect at any later step (Land), or never.
	Delay
	// Land applies a delayed request; nobody hears the answer.
	Land
)

var outcomeNames = [...]string{"deliver", "lose-response", "fail", "409", "drop", "delay", "land"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// faults reports whether an outcome spends the fault budget.
func (o Outcome) fault() bool { return o != Deliver && o != Land }

// ErrScheduleEnded answers every request once the checker has seen enough
// of a schedule; it is neither retryable nor definite, so every actor gives
// up at once.
var ErrScheduleEnded = errors.New("schedule ended by the checker")

// Request is one store request (or gate) waiting for the scheduler.
type Request struct {
	Actor    string
	Op       Op
	Key      string // the key; for List the prefix; for a gate its name
	After    string // List: startAfter
	Limit    int    // List: limit
	Expected blobstore.Token
	Body     []byte

	arrival int // the step at which the request arrived
	reply   chan reply
	label   string
}

type reply struct {
	obj   blobstore.Object
	attrs blobstore.Attrs
	page  blobstore.ListPage
	tok   blobstore.Token
	err   error
}

// Label is the request in words: actor, operation, key and, for writes, a
// summary of the body and expected token. Labels order the pending requests,
// so a schedule does not depend on which goroutine asked first.
func (r *Request) Label() string {
	if r.label != "" {
		return r.label
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", r.Actor, r.Op, DescribeKey(r.Key))
	switch r.Op {
	case OpList:
		if r.After != "" {
			fmt.Fprintf(&b, " after %s", DescribeKey(r.After))
		}
	case OpCAS, OpDeleteIfMatch:
		fmt.Fprintf(&b, " expect %s", short(r.Expected))
	}
	if r.Op == OpPut || r.Op == OpCreate || r.Op == OpCAS {
		fmt.Fprintf(&b, " %s", DescribeBody(r.Key, r.Body))
	}
	r.label = b.String()
	return r.label
}

func short(t blobstore.Token) string {
	if t == "" {
		return `""`
	}
	return string(t)
}

type object struct {
	body  []byte
	token blobstore.Token
}

// Store is the controllable store of one run. Its data is a map with
// strongly consistent reads and LIST; tokens are content hashes, as S3's
// ETags of single PUTs are, so a body written twice gets its token back (the
// most ABA-prone token any supported store hands out).
type Store struct {
	mu      sync.Mutex
	objects map[string]object
	pending []*Request
	delayed []*Request
	ended   bool
	step    int
	// unique makes every write's token new (GCS generations, Azure
	// ETags) instead of the body's hash (S3 ETags of single PUTs).
	unique bool
	writes int
}

func newStore(unique bool) *Store {
	return &Store{objects: map[string]object{}, unique: unique}
}

func tokenOf(body []byte) blobstore.Token {
	h := sha256.Sum256(body)
	return blobstore.Token(hex.EncodeToString(h[:4]))
}

// As returns the view of the store an actor sends its requests through.
func (s *Store) As(actor string) blobstore.Container { return &view{s: s, actor: actor} }

// Snapshot returns a copy of the store's contents.
func (s *Store) Snapshot() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte, len(s.objects))
	for k, o := range s.objects {
		out[k] = o.body
	}
	return out
}

// Get reads an object directly, outside the schedule: for invariants.
func (s *Store) Get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	return o.body, ok
}

// Keys lists the stored keys under prefix, sorted, outside the schedule.
func (s *Store) Keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// submit queues r and blocks until the scheduler answers it.
func (s *Store) submit(r *Request) reply {
	r.reply = make(chan reply, 1)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return reply{err: ErrScheduleEnded}
	}
	r.arrival = s.step
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	return <-r.reply
}

// end answers every pending request, and every later one, with
// ErrScheduleEnded.
func (s *Store) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for _, r := range s.pending {
		r.reply <- reply{err: ErrScheduleEnded}
	}
	s.pending = nil
	s.delayed = nil
}

// apply performs r on the data and returns the store's answer.
func (s *Store) apply(r *Request) reply {
	switch r.Op {
	case OpGate:
		return reply{}
	case OpGet:
		o, ok := s.objects[r.Key]
		if !ok {
			return reply{err: blobstore.ErrNotFound}
		}
		return reply{obj: blobstore.Object{Key: r.Key, Body: append([]byte(nil), o.body...), Token: o.token}}
	case OpStat:
		o, ok := s.objects[r.Key]
		if !ok {
			return reply{err: blobstore.ErrNotFound}
		}
		return reply{attrs: blobstore.Attrs{Key: r.Key, Size: int64(len(o.body)), Token: o.token}}
	case OpPut:
		return reply{tok: s.set(r.Key, r.Body)}
	case OpCreate:
		if _, ok := s.objects[r.Key]; ok {
			return reply{err: blobstore.ErrAlreadyExists}
		}
		return reply{tok: s.set(r.Key, r.Body)}
	case OpCAS:
		o, ok := s.objects[r.Key]
		if !ok || r.Expected == "" || o.token != r.Expected {
			return reply{err: blobstore.ErrPreconditionFailed}
		}
		return reply{tok: s.set(r.Key, r.Body)}
	case OpDelete:
		delete(s.objects, r.Key)
		return reply{}
	case OpDeleteIfMatch:
		o, ok := s.objects[r.Key]
		if !ok || o.token != r.Expected {
			return reply{err: blobstore.ErrPreconditionFailed}
		}
		delete(s.objects, r.Key)
		return reply{}
	case OpList:
		limit := r.Limit
		if limit <= 0 || limit > blobstore.DefaultListLimit {
			limit = blobstore.DefaultListLimit
		}
		var keys []string
		for k := range s.objects {
			if strings.HasPrefix(k, r.Key) && (r.After == "" || k > r.After) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var page blobstore.ListPage
		for _, k := range keys {
			if len(page.Items) == limit {
				page.More = true
				break
			}
			o := s.objects[k]
			page.Items = append(page.Items, blobstore.Attrs{Key: k, Size: int64(len(o.body)), Token: o.token})
		}
		return reply{page: page}
	}
	return reply{err: fmt.Errorf("%w: operation %s", blobstore.ErrUnsupported, r.Op)}
}

func (s *Store) set(key string, body []byte) blobstore.Token {
	t := tokenOf(body)
	if s.unique {
		s.writes++
		t += blobstore.Token(fmt.Sprintf("-%d", s.writes))
	}
	s.objects[key] = object{body: append([]byte(nil), body...), token: t}
	return t
}

// outcomes lists what the scheduler may do with r besides delivering it.
func outcomes(op Op) []Outcome {
	switch op {
	case OpGate:
		return nil
	case OpGet, OpStat, OpList:
		return []Outcome{Fail}
	case OpCreate, OpCAS:
		return []Outcome{Lose, Fail, Conflict, Delay}
	case OpDelete:
		return []Outcome{Lose, Fail, Drop, Delay}
	default:
		return []Outcome{Lose, Fail, Delay}
	}
}

// perform carries out a choice and returns a one-line summary of the answer.
// The caller holds s.mu.
func (s *Store) perform(r *Request, o Outcome) string {
	var rep reply
	switch o {
	case Deliver, Lose, Land:
		rep = s.apply(r)
	case Fail:
		rep = reply{err: blobstore.Unavailable(errors.New("injected: refused before taking effect"))}
	case Conflict:
		rep = reply{err: blobstore.ErrConflict}
	case Drop:
		rep = reply{}
	case Delay:
		rep = reply{err: blobstore.Ambiguous(errors.New("injected: response lost, request still in flight"))}
	}
	summary := summarize(r, rep)
	if o == Lose {
		rep = reply{err: blobstore.Ambiguous(fmt.Errorf("injected: response lost after the request took effect (%s)", summary))}
	}
	if o != Land {
		r.reply <- rep
	}
	return summary
}

func summarize(r *Request, rep reply) string {
	if rep.err != nil {
		for _, e := range []error{blobstore.ErrNotFound, blobstore.ErrAlreadyExists, blobstore.ErrPreconditionFailed, blobstore.ErrConflict} {
			if errors.Is(rep.err, e) {
				return e.Error()
			}
		}
		if blobstore.IsAmbiguous(rep.err) {
			return "ambiguous"
		}
		if errors.Is(rep.err, blobstore.ErrUnavailable) {
			return "unavailable"
		}
		return rep.err.Error()
	}
	switch r.Op {
	case OpGate:
		return "open"
	case OpGet:
		return "token " + short(rep.obj.Token) + " " + DescribeBody(r.Key, rep.obj.Body)
	case OpStat:
		return "token " + short(rep.attrs.Token)
	case OpList:
		names := make([]string, len(rep.page.Items))
		for i, it := range rep.page.Items {
			names[i] = DescribeKey(it.Key)
		}
		more := ""
		if rep.page.More {
			more = " +more"
		}
		return "[" + strings.Join(names, " ") + "]" + more
	case OpPut, OpCreate, OpCAS:
		return "ok token " + short(rep.tok)
	}
	return "ok"
}

// view is one actor's Container.
type view struct {
	s     *Store
	actor string
}

var _ blobstore.Container = (*view)(nil)

func (v *view) String() string { return "verify://" + v.actor }

func (v *view) Capabilities() blobstore.Capabilities {
	return blobstore.Capabilities{ConditionalCreate: true, ConditionalUpdate: true, ConditionalDelete: true}
}

func (v *view) Close() error { return nil }

func (v *view) do(ctx context.Context, r *Request) reply {
	check := blobstore.ValidateKey
	if r.Op == OpList {
		check = blobstore.ValidatePrefix
	}
	if err := check(r.Key); err != nil {
		return reply{err: blobstore.Wrap(string(r.Op), v.String(), r.Key, err)}
	}
	if err := ctx.Err(); err != nil {
		return reply{err: blobstore.Wrap(string(r.Op), v.String(), r.Key, err)}
	}
	r.Actor = v.actor
	rep := v.s.submit(r)
	rep.err = blobstore.Wrap(string(r.Op), v.String(), r.Key, rep.err)
	return rep
}

func (v *view) Get(ctx context.Context, key string) (blobstore.Object, error) {
	rep := v.do(ctx, &Request{Op: OpGet, Key: key})
	return rep.obj, rep.err
}

func (v *view) Stat(ctx context.Context, key string) (blobstore.Attrs, error) {
	rep := v.do(ctx, &Request{Op: OpStat, Key: key})
	return rep.attrs, rep.err
}

func (v *view) Put(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	rep := v.do(ctx, &Request{Op: OpPut, Key: key, Body: append([]byte(nil), body...)})
	return rep.tok, rep.err
}

func (v *view) CreateIfAbsent(ctx context.Context, key string, body []byte) (blobstore.Token, error) {
	rep := v.do(ctx, &Request{Op: OpCreate, Key: key, Body: append([]byte(nil), body...)})
	return rep.tok, rep.err
}

func (v *view) CompareAndSwap(ctx context.Context, key string, expected blobstore.Token, body []byte) (blobstore.Token, error) {
	rep := v.do(ctx, &Request{Op: OpCAS, Key: key, Expected: expected, Body: append([]byte(nil), body...)})
	return rep.tok, rep.err
}

func (v *view) Delete(ctx context.Context, key string) error {
	return v.do(ctx, &Request{Op: OpDelete, Key: key}).err
}

func (v *view) DeleteIfMatch(ctx context.Context, key string, expected blobstore.Token) error {
	return v.do(ctx, &Request{Op: OpDeleteIfMatch, Key: key, Expected: expected}).err
}

func (v *view) List(ctx context.Context, prefix, startAfter string, limit int) (blobstore.ListPage, error) {
	rep := v.do(ctx, &Request{Op: OpList, Key: prefix, After: startAfter, Limit: limit})
	return rep.page, rep.err
}
