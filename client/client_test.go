package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	_ "github.com/shardfence/shardfence/blobstore/drivers"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/harness/testservers"
	"github.com/shardfence/shardfence/sidecar"
)

// sidecarAt serves a real sidecar over store on ln (h2c and HTTP/1.1, as
// `shardfence serve` does) until the test ends.
type served struct {
	srv *sidecar.Server
	hs  *http.Server
}

func serve(t *testing.T, store *blobstore.Container, ln net.Listener, node, token string) *served {
	t.Helper()
	srv, err := sidecar.New(t.Context(), store, sidecar.Options{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	s := &served{srv: srv}
	s.hs = startHTTP(srv, ln, token)
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		_ = s.hs.Close()
	})
	return s
}

func startHTTP(srv *sidecar.Server, ln net.Listener, token string) *http.Server {
	hs := &http.Server{Handler: srv.Handler(sidecar.HandlerOptions{AuthToken: token}), ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(ln) }()
	return hs
}

func listenTCP(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func newClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func open(t *testing.T, c *client.Client, shard string, term int64, alloc string) *sidecarv1.Opened {
	t.Helper()
	o, err := c.Open(t.Context(), &sidecarv1.OpenRequest{Shard: shard, Term: term, AllocationId: alloc}, nil)
	if err != nil {
		t.Fatalf("open %s term %d: %v", shard, term, err)
	}
	return o
}

// readLog reads the whole lineage: op -> sequence numbers it is at.
func readLog(t *testing.T, c *client.Client, shard string) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	err := c.Read(t.Context(), shard, 0, 0, func(b client.Batch) error {
		for i, op := range b.Ops {
			out[string(op)] = append(out[string(op)], b.FirstSeqNo+int64(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// history records what every Append was told, to check against the log.
type history struct {
	mu         sync.Mutex
	acked      map[string]int64 // op -> the sequence number its ack gave
	unknown    map[string]bool
	notWritten map[string]bool
}

func newHistory() *history {
	return &history{acked: map[string]int64{}, unknown: map[string]bool{}, notWritten: map[string]bool{}}
}

func (h *history) record(t *testing.T, op string, ack client.Ack, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		if _, dup := h.acked[op]; dup {
			t.Errorf("%s acknowledged twice", op)
		}
		h.acked[op] = ack.FirstSeqNo
	case client.IsOutcomeUnknown(err):
		h.unknown[op] = true
	default:
		h.notWritten[op] = true
	}
}

// check holds the log to what the appends were told: every acknowledged op
// exactly once, at its acknowledged sequence number; an op of unknown
// outcome at most once; an op said not written never.
func (h *history) check(t *testing.T, log map[string][]int64) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for op, seq := range h.acked {
		if got := log[op]; len(got) != 1 || got[0] != seq {
			t.Errorf("acknowledged %s at seq %d; the log has it at %v", op, seq, got)
		}
	}
	for op := range h.unknown {
		if len(log[op]) > 1 {
			t.Errorf("%s (outcome unknown) is in the log %d times", op, len(log[op]))
		}
	}
	for op := range h.notWritten {
		if len(log[op]) > 0 {
			t.Errorf("%s was said not written, but the log has it at %v", op, log[op])
		}
	}
	t.Logf("%d acknowledged, %d of unknown outcome, %d not written; %d ops in the log", len(h.acked), len(h.unknown), len(h.notWritten), len(log))
}

// Concurrent callers share one stream: every ack is exactly once, at the
// sequence number the log has the op at, and one caller's appends are in
// the log in the order it made them. On the filesystem and MinIO.
func TestConcurrentAppendsAreOrderedAndExactlyOnce(t *testing.T) {
	stores := map[string]func(t *testing.T) *blobstore.Container{
		"fs": func(t *testing.T) *blobstore.Container {
			return testservers.OpenStore(t, "file://"+t.TempDir())
		},
		"minio": func(t *testing.T) *blobstore.Container {
			srv, err := testservers.StartMinIO(t)
			if err != nil {
				testservers.Unavailable(t, "minio", err)
				return nil
			}
			return testservers.OpenStore(t, srv.MinioURL("client-test"))
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			store := mk(t)
			ln := listenTCP(t)
			serve(t, store, ln, "n1", "")
			c := newClient(t, ln.Addr().String())
			open(t, c, "s", 1, "a1")
			const callers, each = 64, 12
			h := newHistory()
			seqs := make([][]int64, callers)
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						op := fmt.Sprintf("g%d-%d", g, i)
						ack, err := c.Shard("s").Append(t.Context(), []byte(op))
						h.record(t, op, ack, err)
						if err != nil {
							t.Errorf("append %s: %v", op, err)
							return
						}
						seqs[g] = append(seqs[g], ack.FirstSeqNo)
					}
				})
			}
			wg.Wait()
			for g, s := range seqs {
				for i := 1; i < len(s); i++ {
					if s[i] <= s[i-1] {
						t.Errorf("caller %d: append %d at seq %d, after its previous one at %d", g, i, s[i], s[i-1])
					}
				}
			}
			log := readLog(t, c, "s")
			if len(log) != callers*each {
				t.Errorf("the log has %d ops, %d were acknowledged", len(log), callers*each)
			}
			h.check(t, log)
		})
	}
}

// A unix socket with a token, and TLS: the same appends.
func TestUnixSocketWithToken(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef-token"
	serve(t, mem.New(), ln, "n1", token)
	c := newClient(t, "unix://"+sock, client.WithToken(token), client.WithLinger(time.Millisecond))
	open(t, c, "s", 1, "a1")
	ack, err := c.Shard("s").Append(t.Context(), []byte("x"), []byte("y"))
	if err != nil || ack.Count != 2 || ack.Term != 1 {
		t.Fatalf("append over the socket: %v %v", ack, err)
	}
	st, err := c.Status(t.Context(), "s")
	if err != nil || st.GetNextSeqNo() != 2 {
		t.Fatalf("status %v %v", st, err)
	}
	anon := newClient(t, "unix://"+sock)
	if _, err := anon.Shard("s").Append(t.Context(), []byte("z")); err == nil || client.IsOutcomeUnknown(err) {
		t.Fatalf("append without the token: %v, want a refusal that wrote nothing", err)
	}
}

// A successor term fences the shard under a stream: the callers learn it
// (IsFenced, the successor's term), and the log is what they were told.
func TestFencedMidStream(t *testing.T) {
	store := mem.New()
	lnA, lnB := listenTCP(t), listenTCP(t)
	serve(t, store, lnA, "a", "")
	serve(t, store, lnB, "b", "")
	ca, cb := newClient(t, lnA.Addr().String()), newClient(t, lnB.Addr().String())
	open(t, ca, "s", 1, "a1")
	h := newHistory()
	var wg sync.WaitGroup
	var fenced sync.Map
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				op := fmt.Sprintf("g%d-%d", g, i)
				ack, err := ca.Shard("s").Append(t.Context(), []byte(op))
				h.record(t, op, ack, err)
				if client.IsFenced(err) {
					var e *client.Error
					errors.As(err, &e)
					fenced.Store(g, e.SuccessorTerm)
					return
				}
				if err != nil && !client.IsOutcomeUnknown(err) {
					t.Errorf("append %s: %v", op, err)
					return
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	open(t, cb, "s", 2, "b1")
	wg.Wait()
	n := 0
	fenced.Range(func(_, succ any) bool {
		n++
		if succ.(int64) != 2 && succ.(int64) != 0 {
			t.Errorf("fenced by term %d, want 2", succ)
		}
		return true
	})
	if n != 16 {
		t.Errorf("%d of 16 callers learned they were fenced", n)
	}
	h.check(t, readLog(t, cb, "s"))
}

// A handoff under a stream: with WithRedirect the appends follow the shard
// to its new owner; without, IsHandedOff names it. Nothing acknowledged is
// lost and nothing is in the log twice.
func TestHandoffMidStreamRedirects(t *testing.T) {
	store := mem.New()
	lnA, lnB := listenTCP(t), listenTCP(t)
	serve(t, store, lnA, "na", "")
	serve(t, store, lnB, "nb", "")
	addrs := map[string]string{"b1": lnB.Addr().String()}
	var redirects sync.Map
	c := newClient(t, lnA.Addr().String(), client.WithRedirect(func(_ context.Context, shard string, to client.Owner) (string, error) {
		redirects.Store(to, true)
		if a, ok := addrs[to.Allocation]; ok {
			return a, nil
		}
		return "", fmt.Errorf("no sidecar for %v", to)
	}))
	plain := newClient(t, lnA.Addr().String())
	open(t, c, "s", 1, "a1")
	h := newHistory()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				op := fmt.Sprintf("g%d-%d", g, i)
				for {
					ack, err := c.Shard("s").Append(t.Context(), []byte(op))
					h.record(t, op, ack, err)
					// Only an op that was not written is sent again.
					if err == nil || client.IsOutcomeUnknown(err) || ctx.Err() != nil {
						break
					}
					op += "'"
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	hc, err := c.API().StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "s", TargetAllocationId: "b1", TargetNode: "nb"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Shard("s").Append(t.Context(), []byte("plain")); err != nil {
		to, ok := client.IsHandedOff(err)
		if !ok || to.Allocation != "b1" || to.Node != "nb" || client.IsOutcomeUnknown(err) {
			t.Errorf("append on the handed-off source: %v (owner %v)", err, to)
		}
	} else {
		t.Errorf("an append on the handed-off source was acknowledged")
	}
	cb := newClient(t, lnB.Addr().String())
	if _, err := cb.API().AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	wg.Wait()
	if _, ok := redirects.Load(client.Owner{Allocation: "b1", Node: "nb"}); !ok {
		t.Errorf("the client never followed the handoff")
	}
	st, err := cb.Status(t.Context(), "s")
	if err != nil || st.GetOps() == 0 {
		t.Errorf("the new owner took no appends: %v %v", st, err)
	}
	h.check(t, readLog(t, cb, "s"))
}

// Streams cut in flight, from both sides: the sidecar's HTTP server closes
// every connection (and comes back on the same address), callers give up
// on their calls after a few milliseconds while the store is slow, and the
// client is closed under them. Acknowledged ops are in the log exactly
// once, an op said not written is not in it, and an op of unknown outcome
// is in it at most once.
func TestStreamCutMidFlight(t *testing.T) {
	f := faulty.New(mem.New(), 7)
	f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Latency: faulty.Uniform(time.Millisecond, 15*time.Millisecond)})
	ln := listenTCP(t)
	addr := ln.Addr().String()
	s := serve(t, f.Container, ln, "n1", "")
	c := newClient(t, addr)
	open(t, c, "s", 1, "a1")
	h := newHistory()
	var cmu sync.Mutex
	current := c
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				op := fmt.Sprintf("g%d-%d", g, i)
				timeout := 200 * time.Millisecond
				if i%3 == 0 {
					timeout = time.Duration(1+i%10) * time.Millisecond
				}
				cctx, cancel := context.WithTimeout(ctx, timeout)
				cmu.Lock()
				cl := current
				cmu.Unlock()
				ack, err := cl.Shard("s").Append(cctx, []byte(op))
				cancel()
				h.record(t, op, ack, err)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	// Server side: every connection closed under the streams.
	_ = s.hs.Close()
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s.hs = startHTTP(s.srv, ln2, "")
	time.Sleep(300 * time.Millisecond)
	// Client side: the client closed under its callers, a new one takes
	// over.
	cmu.Lock()
	old := current
	current = newClient(t, addr)
	cmu.Unlock()
	_ = old.Close()
	time.Sleep(300 * time.Millisecond)
	stop()
	wg.Wait()
	// Every sync in flight has landed or failed once a later append is
	// acknowledged.
	if _, err := current.Shard("s").Append(t.Context(), []byte("last")); err != nil {
		t.Fatal(err)
	}
	log := readLog(t, current, "s")
	h.check(t, log)
	if len(h.acked) == 0 || len(h.unknown)+len(h.notWritten) == 0 {
		t.Errorf("the cuts hit no call in flight (%d acknowledged, %d unknown, %d not written)", len(h.acked), len(h.unknown), len(h.notWritten))
	}
}

// Open, Watch, Read and Status through the client.
func TestOpenWatchReadStatus(t *testing.T) {
	ln := listenTCP(t)
	serve(t, mem.New(), ln, "n1", "")
	c := newClient(t, ln.Addr().String())
	events := make(chan *sidecarv1.WatchResponse, 64)
	wctx, wstop := context.WithCancel(t.Context())
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- c.Watch(wctx, nil, func(ev *sidecarv1.WatchResponse) error {
			events <- ev
			return nil
		})
	}()
	var steps []string
	o, err := c.Open(t.Context(), &sidecarv1.OpenRequest{Shard: "w", Term: 1, AllocationId: "a1"}, func(ev *sidecarv1.OpenResponse) error {
		steps = append(steps, ev.GetProgress().GetStep())
		return nil
	})
	if err != nil || o.GetStatus().GetState() != "open" || len(steps) == 0 {
		t.Fatalf("open: %v %v (steps %v)", o, err, steps)
	}
	for ev := range events {
		if ev.GetKind() == sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED && ev.GetShard() == "w" {
			break
		}
	}
	for i := range 5 {
		if _, err := c.Shard("w").Append(t.Context(), fmt.Appendf(nil, "op%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := c.Read(t.Context(), "w", 1, 3, func(b client.Batch) error {
		for _, op := range b.Ops {
			got = append(got, string(op))
		}
		return nil
	}); err != nil || strings.Join(got, ",") != "op1,op2,op3" {
		t.Fatalf("read from 1, 3 ops: %v %v", got, err)
	}
	if _, err := c.Status(t.Context(), "nope"); client.Reason(err) != client.ReasonNotOpen {
		t.Errorf("status of an unknown shard: %v", err)
	}
	if _, err := c.ShardAt("w", 7).Append(t.Context(), []byte("x")); client.Reason(err) != client.ReasonWrongTerm || client.IsOutcomeUnknown(err) {
		t.Errorf("append at a term the shard is not open at: %v", err)
	}
	wstop()
	if err := <-watchDone; err != nil {
		t.Errorf("watch: %v", err)
	}
}
