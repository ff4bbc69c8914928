package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/driver"
)

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
	Actor string
	// Gate marks a request that is not a store request: an actor waits at
	// a gate until the scheduler opens it, so actor-side events (an append
	// arriving) are ordered by the schedule too. Op means nothing then.
	Gate     bool
	Op       blobstore.Op
	Key      string // the key; for List the prefix; for a gate its name
	After    string // List: startAfter
	Limit    int    // List: limit
	Expected blobstore.Token
	Body     []byte
	// Offset and Length are a GetRange's range (Length -1: to the end).
	Offset, Length int64

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
	if r.Gate {
		fmt.Fprintf(&b, "%s Gate %s", r.Actor, DescribeKey(r.Key))
		r.label = b.String()
		return r.label
	}
	fmt.Fprintf(&b, "%s %s %s", r.Actor, r.Op, DescribeKey(r.Key))
	switch r.Op {
	case blobstore.OpList:
		if r.After != "" {
			fmt.Fprintf(&b, " after %s", DescribeKey(r.After))
		}
	case blobstore.OpCompareAndSwap, blobstore.OpDeleteIfMatch:
		fmt.Fprintf(&b, " expect %s", short(r.Expected))
	case blobstore.OpGetRange:
		fmt.Fprintf(&b, " @%d+%d", r.Offset, r.Length)
		if r.Expected != "" {
			fmt.Fprintf(&b, " pinned %s", short(r.Expected))
		}
	}
	if r.Op == blobstore.OpPut || r.Op == blobstore.OpCreateIfAbsent || r.Op == blobstore.OpCompareAndSwap {
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

// As returns the container an actor sends its requests through: the
// portable container over a driver whose every request waits for the
// scheduler.
func (s *Store) As(actor string) *blobstore.Container {
	return blobstore.New(&actorBucket{s: s, actor: actor})
}

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
	if r.Gate {
		return reply{}
	}
	o, ok := s.objects[r.Key]
	switch r.Op {
	case blobstore.OpGet:
		if !ok {
			return reply{err: blobstore.ErrNotFound}
		}
		return reply{obj: blobstore.Object{Key: r.Key, Body: append([]byte(nil), o.body...), Token: o.token}}
	case blobstore.OpStat:
		if !ok {
			return reply{err: blobstore.ErrNotFound}
		}
		return reply{attrs: blobstore.Attrs{Key: r.Key, Size: int64(len(o.body)), Token: o.token}}
	case blobstore.OpGetRange:
		if !ok {
			return reply{err: blobstore.ErrNotFound}
		}
		if r.Expected != "" && r.Expected != o.token {
			return reply{err: blobstore.ErrPreconditionFailed}
		}
		size := int64(len(o.body))
		end, err := driver.Range(size, r.Offset, r.Length, blobstore.ErrInvalidRange)
		if err != nil {
			return reply{err: err}
		}
		return reply{obj: blobstore.Object{Key: r.Key, Body: append([]byte(nil), o.body[r.Offset:end]...), Token: o.token},
			attrs: blobstore.Attrs{Key: r.Key, Size: size, Token: o.token}}
	case blobstore.OpPut:
		return reply{tok: s.set(r.Key, r.Body)}
	case blobstore.OpCreateIfAbsent:
		if ok {
			return reply{err: blobstore.ErrAlreadyExists}
		}
		return reply{tok: s.set(r.Key, r.Body)}
	case blobstore.OpCompareAndSwap:
		if !ok || o.token != r.Expected {
			return reply{err: blobstore.ErrPreconditionFailed}
		}
		return reply{tok: s.set(r.Key, r.Body)}
	case blobstore.OpDelete:
		delete(s.objects, r.Key)
		return reply{}
	case blobstore.OpDeleteIfMatch:
		if !ok || o.token != r.Expected {
			return reply{err: blobstore.ErrPreconditionFailed}
		}
		delete(s.objects, r.Key)
		return reply{}
	case blobstore.OpList:
		return reply{page: s.list(r.Key, r.After, r.Limit)}
	}
	return reply{err: fmt.Errorf("%w: operation %s", blobstore.ErrUnsupported, r.Op)}
}

// list is one page of keys under prefix after startAfter.
func (s *Store) list(prefix, startAfter string, limit int) blobstore.ListPage {
	var keys []string
	for k := range s.objects {
		if strings.HasPrefix(k, prefix) && (startAfter == "" || k > startAfter) {
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
	return page
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
func outcomes(r *Request) []Outcome {
	switch {
	case r.Gate:
		return nil
	case !r.Op.Mutates():
		return []Outcome{Fail}
	}
	switch r.Op {
	case blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap:
		return []Outcome{Lose, Fail, Conflict, Delay}
	case blobstore.OpDelete:
		return []Outcome{Lose, Fail, Drop, Delay}
	default:
		return []Outcome{Lose, Fail, Delay}
	}
}

// perform carries out a choice and returns a one-line summary of the answer
// and a function that hands the answer to the waiting actor (nil for a
// landing, whose actor heard long ago). The caller holds s.mu, and calls
// the function only once the step is in the trace: an actor woken earlier
// could note its next move ahead of the step that caused it.
func (s *Store) perform(r *Request, o Outcome) (string, func()) {
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
	if o == Land {
		return summary, nil
	}
	return summary, func() { r.reply <- rep }
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
	if r.Gate {
		return "open"
	}
	switch r.Op {
	case blobstore.OpGet:
		return "token " + short(rep.obj.Token) + " " + DescribeBody(r.Key, rep.obj.Body)
	case blobstore.OpStat:
		return "token " + short(rep.attrs.Token)
	case blobstore.OpGetRange:
		return fmt.Sprintf("token %s %d bytes", short(rep.attrs.Token), len(rep.obj.Body))
	case blobstore.OpList:
		names := make([]string, len(rep.page.Items))
		for i, it := range rep.page.Items {
			names[i] = DescribeKey(it.Key)
		}
		more := ""
		if rep.page.More {
			more = " +more"
		}
		return "[" + strings.Join(names, " ") + "]" + more
	case blobstore.OpPut, blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap:
		return "ok token " + short(rep.tok)
	}
	return "ok"
}

// actorBucket is the driver of one actor's container: every request waits
// for the scheduler, which answers in the blobstore error kinds. The
// portable container in front of it refuses invalid keys, done contexts and
// empty tokens before they reach the schedule, as it does for every store.
type actorBucket struct {
	s     *Store
	actor string
}

var (
	_ driver.Bucket      = (*actorBucket)(nil)
	_ driver.RangeReader = (*actorBucket)(nil)
)

func (b *actorBucket) String() string { return "verify://" + b.actor }

func (b *actorBucket) Capabilities() driver.Capabilities {
	return driver.Capabilities{ConditionalCreate: true, ConditionalUpdate: true, ConditionalDelete: true}
}

func (b *actorBucket) Close() error { return nil }

// Classify has nothing to place: the scheduler answers in the kinds, or
// with ErrScheduleEnded.
func (b *actorBucket) Classify(_ driver.Op, err error) error { return err }

func (b *actorBucket) submit(r *Request) reply {
	r.Actor = b.actor
	return b.s.submit(r)
}

func (b *actorBucket) Get(_ context.Context, key string) (driver.Object, error) {
	rep := b.submit(&Request{Op: blobstore.OpGet, Key: key})
	return rep.obj, rep.err
}

// NewRangeReader is one scheduled request: the range is read when the
// scheduler delivers it, and the stream serves that copy.
func (b *actorBucket) NewRangeReader(_ context.Context, key string, offset, length int64, pre driver.Precondition) (io.ReadCloser, driver.Attrs, error) {
	rep := b.submit(&Request{Op: blobstore.OpGetRange, Key: key, Offset: offset, Length: length, Expected: pre.IfMatch})
	if rep.err != nil {
		return nil, driver.Attrs{}, rep.err
	}
	return io.NopCloser(bytes.NewReader(rep.obj.Body)), rep.attrs, nil
}

func (b *actorBucket) Stat(_ context.Context, key string) (driver.Attrs, error) {
	rep := b.submit(&Request{Op: blobstore.OpStat, Key: key})
	return rep.attrs, rep.err
}

// Write copies the body: a delayed request stays in flight after its
// caller has moved on.
func (b *actorBucket) Write(_ context.Context, key string, body []byte, pre driver.Precondition) (driver.Token, error) {
	rep := b.submit(&Request{Op: pre.WriteOp(), Key: key, Expected: pre.IfMatch, Body: append([]byte(nil), body...)})
	return rep.tok, rep.err
}

func (b *actorBucket) Delete(_ context.Context, key string, pre driver.Precondition) error {
	return b.submit(&Request{Op: pre.DeleteOp(), Key: key, Expected: pre.IfMatch}).err
}

func (b *actorBucket) List(_ context.Context, prefix, startAfter string, limit int) (driver.ListPage, error) {
	rep := b.submit(&Request{Op: blobstore.OpList, Key: prefix, After: startAfter, Limit: limit})
	return rep.page, rep.err
}
