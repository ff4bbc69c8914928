package sidecar

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

func openShard(t *testing.T, c sidecarv1connect.SidecarServiceClient, shard string, term int64, alloc string) *sidecarv1.Opened {
	t.Helper()
	opened, _ := openShardSteps(t, c, shard, term, alloc)
	return opened
}

// openShardSteps opens a shard and returns the Opened event and the
// progress steps streamed before it.
func openShardSteps(t *testing.T, c sidecarv1connect.SidecarServiceClient, shard string, term int64, alloc string) (*sidecarv1.Opened, []string) {
	t.Helper()
	st, err := c.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: shard, Term: term, AllocationId: alloc}))
	if err != nil {
		t.Fatal(err)
	}
	var opened *sidecarv1.Opened
	var steps []string
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *sidecarv1.OpenResponse_Progress:
			steps = append(steps, ev.Progress.GetStep())
		case *sidecarv1.OpenResponse_Opened:
			opened = ev.Opened
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("open %s term %d: %v", shard, term, err)
	}
	if opened == nil {
		t.Fatalf("open %s: stream ended without Opened (progress %v)", shard, steps)
	}
	return opened, steps
}

func readAll(t *testing.T, c sidecarv1connect.SidecarServiceClient, shard string, from, max int64) ([]string, error) {
	t.Helper()
	st, err := c.Read(t.Context(), connect.NewRequest(&sidecarv1.ReadRequest{Shard: shard, FromSeq: from, MaxOps: max}))
	if err != nil {
		return nil, err
	}
	var out []string
	next := from
	for st.Receive() {
		b := st.Msg().GetBatch()
		if b.GetFirstSeqNo() != next {
			t.Errorf("batch of generation %d starts at %d, expected %d", b.GetGen(), b.GetFirstSeqNo(), next)
		}
		for _, op := range b.GetOps() {
			out = append(out, string(op))
		}
		next = b.GetFirstSeqNo() + int64(len(b.GetOps()))
	}
	return out, st.Err()
}

func appendOps(ctx context.Context, c sidecarv1connect.SidecarServiceClient, shard string, ops ...string) (*sidecarv1.AppendResponse, error) {
	req := &sidecarv1.AppendRequest{Shard: shard}
	for _, o := range ops {
		req.Ops = append(req.Ops, []byte(o))
	}
	res, err := c.Append(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func detailOf(t *testing.T, err error) (connect.Code, *sidecarv1.ErrorDetail) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("not a connect error: %v", err)
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*sidecarv1.ErrorDetail); ok {
				return ce.Code(), ed
			}
		}
	}
	return ce.Code(), nil
}

func TestOpenAppendReadStatusClose(t *testing.T) {
	e := newEnv(t, Options{Node: "node-a"}, HandlerOptions{})
	opened, steps := openShardSteps(t, e.client, "s1", 3, "alloc-a")
	if len(steps) == 0 || steps[len(steps)-1] != "open" {
		t.Errorf("open progress steps %v, want them to end with open", steps)
	}
	if got := opened.GetStatus(); got.GetTerm() != 3 || got.GetAllocationId() != "alloc-a" || got.GetOwner() != "alloc-a" || got.GetState() != ShardOpen.String() {
		t.Fatalf("opened status = %v", got)
	}
	var want []string
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				op := fmt.Sprintf("g%d-op%d", g, i)
				ack, err := appendOps(t.Context(), e.client, "s1", op)
				if err != nil {
					t.Error(err)
					return
				}
				if ack.GetTerm() != 3 || ack.GetCount() != 1 || ack.GetGen() < 1 {
					t.Errorf("ack %v", ack)
				}
				mu.Lock()
				want = append(want, op)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got, err := readAll(t, e.client, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d ops, acked %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for _, op := range got {
		seen[op] = true
	}
	for _, op := range want {
		if !seen[op] {
			t.Errorf("acked op %q not read back", op)
		}
	}
	// from_seq and max_ops trim the stream.
	part, err := readAll(t, e.client, "s1", 75, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(part) != 3 || part[0] != got[75] || part[2] != got[77] {
		t.Fatalf("read from 75 max 3 = %v, want %v", part, got[75:78])
	}

	st, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s1"}))
	if err != nil {
		t.Fatal(err)
	}
	s := st.Msg.GetStatus()
	if s.GetNextSeqNo() != 80 || s.GetOps() != 80 || s.GetFenced() || s.GetLastCasAgeMs() < 0 || s.GetGen() < 1 {
		t.Fatalf("status after 80 acks = %v", s)
	}
	if _, err := e.client.Close(t.Context(), connect.NewRequest(&sidecarv1.CloseRequest{Shard: "s1"})); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s1"}))
	if code, d := detailOf(t, err); code != connect.CodeNotFound || d.GetReason() != "not_open" {
		t.Fatalf("status after close: %v", err)
	}
}

func TestOpenTwiceAnswersAgainAndLowerTermIsRefused(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	openShard(t, e.client, "s", 5, "a")
	if _, err := appendOps(t.Context(), e.client, "s", "x"); err != nil {
		t.Fatal(err)
	}
	again := openShard(t, e.client, "s", 5, "a")
	if again.GetStatus().GetNextSeqNo() != 1 {
		t.Fatalf("a retried open lost the shard's state: %v", again.GetStatus())
	}
	st, err := e.client.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 4, AllocationId: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if code, d := detailOf(t, st.Err()); code != connect.CodeFailedPrecondition || d.GetReason() != "wrong_term" {
		t.Fatalf("lower-term open: %v", st.Err())
	}
}

func TestFencedAppendNamesSuccessorTerm(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	if _, err := appendOps(t.Context(), e.client, "s", "before"); err != nil {
		t.Fatal(err)
	}
	// A successor claims term 2 straight on the store, as another sidecar
	// would: the incumbent's next CAS fails.
	sub, err := blobstore.Sub(e.store, "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Claim(t.Context(), sub, "s", 2, "b"); err != nil {
		t.Fatal(err)
	}
	_, err = appendOps(t.Context(), e.client, "s", "after")
	code, d := detailOf(t, err)
	if code != connect.CodeFailedPrecondition || d.GetReason() != "fenced" || d.GetSuccessorTerm() != 2 || d.GetTerm() != 1 {
		t.Fatalf("append after successor claim: code %v detail %v err %v", code, d, err)
	}
	if !strings.Contains(err.Error(), "successor term 2") {
		t.Errorf("message does not name the successor: %v", err)
	}
	st, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Msg.GetStatus(); !s.GetFenced() || s.GetSuccessorTerm() != 2 || s.GetState() != ShardFenced.String() {
		t.Fatalf("status after fencing = %v", s)
	}
	if n := counterValue(t, e, FencedMetric, nil); n != 1 {
		t.Errorf("%s = %v, want 1", FencedMetric, n)
	}
}

func TestBadInputIsInvalidArgumentOrNotFound(t *testing.T) {
	e := newEnv(t, Options{Limits: Limits{MaxOpBytes: 8, MaxOpsPerAppend: 3}}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	cases := []struct {
		name   string
		shard  string
		ops    []string
		code   connect.Code
		reason string
	}{
		{"path escape", "../etc", []string{"x"}, connect.CodeInvalidArgument, "invalid_argument"},
		{"slash", "a/b", []string{"x"}, connect.CodeInvalidArgument, "invalid_argument"},
		{"empty shard", "", []string{"x"}, connect.CodeInvalidArgument, "invalid_argument"},
		{"probe folder", "shardfence-probe", []string{"x"}, connect.CodeInvalidArgument, "invalid_argument"},
		{"unknown shard", "nope", []string{"x"}, connect.CodeNotFound, "not_open"},
		{"no ops", "s", nil, connect.CodeInvalidArgument, "invalid_argument"},
		{"too many ops", "s", []string{"a", "b", "c", "d"}, connect.CodeInvalidArgument, "invalid_argument"},
		{"op too large", "s", []string{"123456789"}, connect.CodeInvalidArgument, "too_large"},
	}
	for _, c := range cases {
		_, err := appendOps(t.Context(), e.client, c.shard, c.ops...)
		if err == nil {
			t.Errorf("%s: append succeeded", c.name)
			continue
		}
		code, d := detailOf(t, err)
		if code != c.code || d.GetReason() != c.reason {
			t.Errorf("%s: code %v reason %q, want %v %q (%v)", c.name, code, d.GetReason(), c.code, c.reason, err)
		}
	}
	for _, req := range []*sidecarv1.OpenRequest{
		{Shard: "t", Term: 0, AllocationId: "a"},
		{Shard: "t", Term: 1, AllocationId: ""},
		{Shard: "t", Term: 1, AllocationId: "a|b"},
		{Shard: "t", Term: 1, AllocationId: "a", Settings: &sidecarv1.ShardSettings{MaxPipeline: -1}},
		{Shard: "t", Term: 1, AllocationId: "a", Settings: &sidecarv1.ShardSettings{Mode: 7}},
	} {
		st, err := e.client.Open(t.Context(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		for st.Receive() {
		}
		if code, _ := detailOf(t, st.Err()); code != connect.CodeInvalidArgument {
			t.Errorf("open %v: %v", req, st.Err())
		}
	}
	// A wrong expected term is refused before anything is written.
	_, err := e.client.Append(t.Context(), connect.NewRequest(&sidecarv1.AppendRequest{Shard: "s", Ops: [][]byte{[]byte("x")}, ExpectedTerm: 2}))
	if code, d := detailOf(t, err); code != connect.CodeFailedPrecondition || d.GetReason() != "wrong_term" {
		t.Errorf("expected_term mismatch: %v", err)
	}
	// Unfenced shards need the sidecar's permission.
	st, err := e.client.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "u", Term: 1, AllocationId: "a", Settings: &sidecarv1.ShardSettings{FencingDisabled: true}}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if code, d := detailOf(t, st.Err()); code != connect.CodeFailedPrecondition || d.GetReason() != "unfenced_refused" {
		t.Errorf("unfenced open: %v", st.Err())
	}
	// Handoff input.
	_, err = e.client.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "nope", TargetAllocationId: "b"}))
	if code, _ := detailOf(t, err); code != connect.CodeNotFound {
		t.Errorf("handoff of an unknown shard: %v", err)
	}
	_, err = e.client.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "s", TargetAllocationId: "a"}))
	if code, _ := detailOf(t, err); code != connect.CodeInvalidArgument {
		t.Errorf("handoff to itself: %v", err)
	}
	_, err = e.client.AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: []byte("{not a context")}))
	if code, _ := detailOf(t, err); code != connect.CodeInvalidArgument {
		t.Errorf("adopt of garbage: %v", err)
	}
}

func TestRequestSizeLimit(t *testing.T) {
	e := newEnv(t, Options{Limits: Limits{MaxRequestBytes: 4096}}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	_, err := appendOps(t.Context(), e.client, "s", strings.Repeat("x", 5000))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Fatalf("oversized request: %v", err)
	}
}

func TestFailedOpenLeavesNothingBehind(t *testing.T) {
	srv, err := New(t.Context(), mem.New(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if _, err := srv.Open(t.Context(), "s", 2, "a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	// A lower term is refused by the store's fence keys, not only by the
	// shard open here: a second sidecar on the same store says the same.
	other, err := New(t.Context(), srv.store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Shutdown(context.Background())
	_, err = other.Open(t.Context(), "s", 1, "b", Settings{}, nil)
	if !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("open of a lower term on another sidecar: %v", err)
	}
	if _, err := other.Status("s"); !errors.Is(err, ErrShardNotOpen) {
		t.Fatalf("a failed open left the shard behind: %v", err)
	}
}

func TestStoreWithoutPreconditionsIsRefused(t *testing.T) {
	f := faulty.New(mem.New(), 1)
	f.SetIgnorePreconditions(true)
	_, err := newServer(t.Context(), f.Container, Options{}, freshOpener{})
	if !errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
		t.Fatalf("start on a store ignoring preconditions: %v", err)
	}
	srv, err := newServer(t.Context(), f.Container, Options{AllowUnfenced: true}, freshOpener{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{}, nil); !errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
		t.Fatalf("fenced open on such a store: %v", err)
	}
	if _, err := srv.Open(t.Context(), "s", 1, "a", Settings{FencingDisabled: true}, nil); err != nil {
		t.Fatalf("unfenced open with --allow-unfenced: %v", err)
	}
}

func TestAuthToken(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{AuthToken: "s3cret-token"})
	_, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
		t.Fatalf("call without token: %v", err)
	}
	for _, tok := range []string{"wrong", "s3cret-token-longer", ""} {
		c := sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, e.http.URL, connect.WithInterceptors(BearerToken(tok)))
		if _, err := c.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"})); !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
			t.Errorf("token %q: %v", tok, err)
		}
	}
	c := sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, e.http.URL, connect.WithInterceptors(BearerToken("s3cret-token")))
	openShard(t, c, "s", 1, "a")
	if _, err := appendOps(t.Context(), c, "s", "x"); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401} {
		res, err := http.Get(e.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s without token: %d, want %d", path, res.StatusCode, want)
		}
	}
}

// TestJSONOverHTTP is what a curl user does: plain JSON POSTs.
func TestJSONOverHTTP(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	body := fmt.Sprintf(`{"shard":"s","ops":[%q,%q]}`, base64.StdEncoding.EncodeToString([]byte("hello")), base64.StdEncoding.EncodeToString([]byte("world")))
	res, err := http.Post(e.http.URL+sidecarv1connect.SidecarServiceAppendProcedure, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("JSON append: %d %s", res.StatusCode, b)
	}
	var ack struct {
		Term, Gen, FirstSeqNo, Count string
	}
	if err := json.Unmarshal(b, &ack); err != nil || ack.Term != "1" || ack.Count != "2" {
		t.Fatalf("JSON ack %s (%v)", b, err)
	}
	res, err = http.Post(e.http.URL+sidecarv1connect.SidecarServiceStatusProcedure, "application/json", strings.NewReader(`{"shard":"../x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte(`"invalid_argument"`)) {
		t.Fatalf("JSON bad shard: %d %s", res.StatusCode, b)
	}
}

func TestGracefulShutdownAnswersEveryAppendAndLosesNoAck(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				op := fmt.Sprintf("%d-%d", g, i)
				if _, err := appendOps(t.Context(), e.client, "s", op); err != nil {
					code, _ := detailOf(t, err)
					if code != connect.CodeUnavailable {
						t.Errorf("append during shutdown: %v", err)
					}
					return
				}
				mu.Lock()
				acked[op] = true
				n := len(acked)
				mu.Unlock()
				if n == 200 {
					close(stop)
				}
			}
		})
	}
	<-stop
	if err := e.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if res, err := http.Get(e.http.URL + "/readyz"); err != nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz while drained: %v %v", res, err)
	}
	// Read the translog straight from the store: every ack is there.
	sub, _ := blobstore.Sub(e.store, "s")
	r := translog.NewReader(sub, "s")
	gens, err := r.Gens(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	if err := r.Iterate(t.Context(), 1, 1, int64(len(gens)), func(b translog.Batch) error {
		for _, op := range b.Ops {
			stored[string(op)] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for op := range acked {
		if !stored[op] {
			t.Errorf("acked op %s lost at shutdown", op)
		}
	}
	if len(acked) < 200 {
		t.Fatalf("only %d acks", len(acked))
	}
}
