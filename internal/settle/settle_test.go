package settle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestClassify(t *testing.T) {
	op := func(err error) error { return blobstore.Wrap(blobstore.OpCreateIfAbsent, "mem://x", "k", err) }
	for _, c := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"no error", nil, Landed},
		{"the key exists", op(blobstore.ErrAlreadyExists), Refused},
		{"another version", op(blobstore.ErrPreconditionFailed), Refused},
		{"CAS on a missing key", op(blobstore.ErrNotFound), Refused},
		{"lost response", op(blobstore.Ambiguous(errors.New("timeout"))), Unknown},
		{"context cancelled in flight", op(blobstore.Ambiguous(context.Canceled)), Unknown},
		{"deadline in flight", op(blobstore.Ambiguous(context.DeadlineExceeded)), Unknown},
		{"unavailable", op(blobstore.Unavailable(errors.New("refused"))), Definite},
		{"409 conflict", op(fmt.Errorf("%w: s3", blobstore.ErrConflict)), Definite},
		{"context done before sending", op(context.Canceled), Definite},
		{"deadline before sending", op(context.DeadlineExceeded), Definite},
		{"invalid key", op(blobstore.ErrInvalidKey), Definite},
		{"too large", op(blobstore.ErrTooLarge), Definite},
		{"unclassified", errors.New("disk on fire"), Definite},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// The verdict depends only on how the create was answered and what the
// read-back found, never on which error text came back.
func TestDecide(t *testing.T) {
	mine := func(held string) (bool, string) {
		if held == "ours" {
			return true, ""
		}
		return false, "written by " + held
	}
	for _, c := range []struct {
		name   string
		out    Outcome
		read   Read[string]
		want   Action
		reason string
	}{
		{"landed", Landed, Read[string]{}, Created, ""},
		{"landed, a read is ignored", Landed, Read[string]{Found: true, Held: "rival"}, Created, ""},
		{"refused, ours there (an earlier attempt landed)", Refused, Read[string]{Found: true, Held: "ours", Token: "t1"}, Adopt, ""},
		{"refused, another writer's", Refused, Read[string]{Found: true, Held: "rival", Token: "t2"}, Lost, "written by rival"},
		{"refused, gone again (removed after the refusal)", Refused, Read[string]{}, Resend, ""},
		{"unknown, ours landed", Unknown, Read[string]{Found: true, Held: "ours"}, Adopt, ""},
		{"unknown, did not land", Unknown, Read[string]{}, Resend, ""},
		{"unknown, a rival's landed instead", Unknown, Read[string]{Found: true, Held: "rival"}, Lost, "written by rival"},
		{"definite: no verdict", Definite, Read[string]{Found: true, Held: "ours"}, 0, ""},
	} {
		v := Decide(c.out, c.read, mine)
		if v.Action != c.want || v.Reason != c.reason {
			t.Errorf("%s: %v %q, want %v %q", c.name, v.Action, v.Reason, c.want, c.reason)
		}
		if (v.Action == Adopt || v.Action == Lost) && (v.Held != c.read.Held || v.Token != c.read.Token) {
			t.Errorf("%s: verdict carries %q at %q, the read found %q at %q", c.name, v.Held, v.Token, c.read.Held, c.read.Token)
		}
	}
}

// Create over a store that loses, holds and refuses requests: each answer
// becomes the verdict Decide gives for what the key then holds.
func TestCreateSettlesEveryAnswerByContent(t *testing.T) {
	ctx := context.Background()
	step := func(body string) Step[string] {
		return Step[string]{
			Key: "k", Body: []byte(body),
			Decode: func(b []byte) (string, error) {
				if bytes.HasPrefix(b, []byte("corrupt")) {
					return "", errors.New("corrupt body")
				}
				return string(b), nil
			},
			Ours: func(held string) (bool, string) { return held == body, "holds " + held },
		}
	}
	for _, c := range []struct {
		name    string
		before  string // stored at k before the create, if any
		fault   faulty.Fault
		ctxDone bool
		want    Action
		wantErr error
		reads   int64
	}{
		{name: "landed", want: Created},
		{name: "lost response: ours landed", fault: faulty.LostResponse, want: Adopt, reads: 1},
		{name: "lost request: did not land", fault: faulty.LostRequest, want: Resend, reads: 1},
		{name: "held request: not landed yet", fault: faulty.LandLater, want: Resend, reads: 1},
		{name: "exists: our earlier attempt", before: "mine", want: Adopt, reads: 1},
		{name: "exists: another writer's", before: "rival", want: Lost, reads: 1},
		{name: "exists: a body that cannot be trusted", before: "corrupt!", wantErr: errors.New("corrupt body"), reads: 1},
		{name: "unavailable: definite, retryable, no read", fault: faulty.Unavailable, wantErr: blobstore.ErrUnavailable},
		{name: "409: definite, retryable, no read", fault: faulty.Conflict, wantErr: blobstore.ErrConflict},
		{name: "context done before sending: definite, no read", ctxDone: true, wantErr: context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := faulty.New(mem.New(), 1)
			if c.before != "" {
				if _, err := f.Put(ctx, "k", []byte(c.before)); err != nil {
					t.Fatal(err)
				}
			}
			if c.fault != faulty.None {
				f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Fault: c.fault, Times: 1})
			}
			s := step("mine")
			s.Get = func(ctx context.Context, key string) (blobstore.Object, bool, error) {
				return Once(ctx, f.Container, key)
			}
			cctx := ctx
			if c.ctxDone {
				var cancel context.CancelFunc
				cctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			v, err := Create(cctx, f.Container, s)
			switch {
			case c.wantErr != nil:
				if err == nil || (!errors.Is(err, c.wantErr) && err.Error() != c.wantErr.Error()) {
					t.Fatalf("err %v, want %v", err, c.wantErr)
				}
				if Classify(err) != Definite && !errors.Is(err, c.wantErr) {
					t.Fatalf("a create error returned by Create must be definite: %v", err)
				}
			case err != nil:
				t.Fatal(err)
			case v.Action != c.want:
				t.Fatalf("verdict %v (%q), want %v", v.Action, v.Reason, c.want)
			}
			if got := f.Requests(blobstore.OpGet); got != c.reads {
				t.Fatalf("%d read-backs, want %d", got, c.reads)
			}
			if v.Action == Created || v.Action == Adopt {
				obj, err := f.Inner().Get(ctx, "k")
				if err != nil || string(obj.Body) != "mine" || obj.Token != v.Token {
					t.Fatalf("verdict %v at token %q, but the key holds %q at %q (%v)", v.Action, v.Token, obj.Body, obj.Token, err)
				}
			}
		})
	}
}
