package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/sidecarproc"
	"github.com/shardfence/shardfence/internal/testservers"
)

// Network partitions between shardfence processes and their store: a
// TCP proxy (testservers.TCPProxy) stands between one process and MinIO
// and drops the link (blackhole: connections held open, nothing
// forwarded, as a partition that drops packets) while everything else
// still reaches both.

// startMinIOBehindProxy starts MinIO and a proxy in front of it; direct is
// the server itself, cut the same server reached through the proxy.
func startMinIOBehindProxy(t *testing.T) (direct, cut *testservers.S3Server, proxy *testservers.TCPProxy) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts MinIO and shardfence processes")
	}
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	proxy = testservers.NewTCPProxy(t, srv.Host)
	through := *srv
	through.Host = proxy.Addr
	return srv, &through, proxy
}

// partitionOp is what a client saw of one append.
type partitionOp struct {
	who         string
	sent, acked time.Time
}

// partitionLoad is the clients' ledger: every acknowledged op, by whom,
// when it was sent and when acknowledged.
type partitionLoad struct {
	mu    sync.Mutex
	acked map[string]partitionOp
	wg    sync.WaitGroup
}

// appendTo appends unique ops to shard on whichever sidecar target returns,
// each with a deadline, until ctx ends.
func (l *partitionLoad) appendTo(ctx context.Context, name, shard string, target func() *sidecarproc.Proc) {
	l.wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			p := target()
			op := fmt.Sprintf("%s-%d", name, i)
			sent := time.Now()
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := p.Append(actx, shard, []byte(op))
			cancel()
			if err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			l.mu.Lock()
			l.acked[op] = partitionOp{who: p.Name, sent: sent, acked: time.Now()}
			l.mu.Unlock()
		}
	})
}

func (l *partitionLoad) ackedBy(who string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.acked {
		if o.who == who {
			n++
		}
	}
	return n
}

// waitAckedBy waits until who acknowledged n ops.
func (l *partitionLoad) waitAckedBy(t *testing.T, who string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); l.ackedBy(who) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s acknowledged %d ops in 30s, want %d", who, l.ackedBy(who), n)
		}
	}
}

// sidecarReadyz is the status code and body of a sidecar's /readyz (code
// 0 when it does not answer).
func sidecarReadyz(addr string) (int, string) {
	res, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

// TestPartitionSidecarFromStore: sidecar A appends under load through a
// proxy to MinIO; the proxy blackholes A's store link while A's clients
// still reach it. A reports not ready within a bound derived from its
// --stall-after; sidecar B, direct to MinIO, opens the shard at term 2
// meanwhile and takes the load. On the heal A's held requests reach the
// store and A finds itself fenced. No op sent to A after B's open is
// acknowledged (a zombie ack), and a reader at term 3 finds every
// acknowledged op, A's included, exactly once.
func TestPartitionSidecarFromStore(t *testing.T) {
	direct, cut, proxy := startMinIOBehindProxy(t)
	const stallAfter = 2 * time.Second
	a := sidecarproc.Start(t, thisBinary(), "A", cut.MinioURL("part"), "--stall-after", stallAfter.String())
	b := sidecarproc.Start(t, thisBinary(), "B", direct.MinioURL("part"), "--stall-after", stallAfter.String())
	a.Open(t, "p", 1, "alloc-a")

	l := &partitionLoad{acked: map[string]partitionOp{}}
	ctx, cancel := context.WithCancel(t.Context())
	defer func() { cancel(); l.wg.Wait() }()
	var mu sync.Mutex
	current := a
	target := func() *sidecarproc.Proc { mu.Lock(); defer mu.Unlock(); return current }
	onA := func() *sidecarproc.Proc { return a }
	for g := range 4 {
		l.appendTo(ctx, fmt.Sprint("c", g), "p", target) // follow the primary
	}
	for g := range 2 {
		l.appendTo(ctx, fmt.Sprint("z", g), "p", onA) // A's clients, cut or not
	}
	l.waitAckedBy(t, "A", 30)

	// The cut: A's store link drops; its clients still reach it.
	proxy.SetMode(testservers.ProxyBlackhole)
	cutAt := time.Now()
	bound := stallAfter + 5*time.Second // the stall, plus a loaded machine's slack
	for {
		code, body := sidecarReadyz(a.Addr)
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "stalled") {
				t.Fatalf("A's /readyz during the cut: %d %q, want stalled", code, body)
			}
			t.Logf("A not ready %v after the cut: %s", time.Since(cutAt).Round(time.Millisecond), body)
			break
		}
		if time.Since(cutAt) > bound {
			t.Fatalf("A still answers /readyz %d %q %v after its store link was cut (--stall-after %v)", code, body, bound, stallAfter)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ackedBeforeCut := l.ackedBy("A")

	// B takes the shard over at term 2 while A is cut off.
	b.Open(t, "p", 2, "alloc-b")
	takeover := time.Now()
	mu.Lock()
	current = b
	mu.Unlock()
	l.waitAckedBy(t, "B", 30)
	t.Logf("A acknowledged %d ops before the cut and %d in all while cut off (before B's open)", ackedBeforeCut, l.ackedBy("A")-ackedBeforeCut)

	// The heal: A's held requests reach the store, and A learns it is
	// fenced.
	proxy.SetMode(testservers.ProxyPass)
	healed := time.Now()
	for {
		res, err := a.Client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "p"}))
		if err == nil && res.Msg.GetStatus().GetState() == "fenced" {
			break
		}
		// An append on A now must not be acknowledged.
		pctx, pcancel := context.WithTimeout(t.Context(), 2*time.Second)
		perr := a.Append(pctx, "p", []byte("probe-after-heal"))
		pcancel()
		if perr == nil {
			t.Fatal("A acknowledged an append after B's takeover")
		}
		if sidecarproc.ReasonOf(perr) == "fenced" {
			break
		}
		if time.Since(healed) > 30*time.Second {
			t.Fatalf("A did not find itself fenced 30s after the heal: status %v, %v; append %v", res, err, perr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("A fenced %v after the heal", time.Since(healed).Round(time.Millisecond))
	l.waitAckedBy(t, "B", l.ackedBy("B")+20)
	cancel()
	l.wg.Wait()

	// A reader at term 3 reads the lineage from the store.
	reader := sidecarproc.Start(t, thisBinary(), "R", direct.MinioURL("part"))
	reader.Open(t, "p", 3, "alloc-r")
	read, err := reader.ReadAll(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for op, o := range l.acked {
		by[o.who]++
		if read[op] == 0 {
			t.Errorf("op %s acknowledged by %s (sent %v, acknowledged %v after the cut) is missing from the lineage",
				op, o.who, o.sent.Sub(cutAt), o.acked.Sub(cutAt))
		}
		if o.who == "A" && o.sent.After(takeover) {
			t.Errorf("zombie ack: A acknowledged op %s sent %v after B's takeover", op, o.sent.Sub(takeover))
		}
	}
	for op, n := range read {
		if n > 1 {
			t.Errorf("op %s appears %d times in the lineage", op, n)
		}
	}
	if read["probe-after-heal"] > 0 {
		t.Error("an append refused by A after the heal is in the lineage")
	}
	t.Logf("acknowledged: A %d, B %d; lineage %d ops", by["A"], by["B"], len(read))
}
