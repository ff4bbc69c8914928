package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/testservers"
)

// asBinaryEnv makes the test binary run as the shardfence command, so the
// multi-process tests start real `shardfence serve` processes without a
// separate build.
const asBinaryEnv = "SHARDFENCE_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinaryEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// serveProc is one `shardfence serve` process.
type serveProc struct {
	*proc
	client sidecarv1connect.SidecarServiceClient
}

// startServeProc starts `shardfence serve` with storeURL passed through the
// environment, so credentials never appear in a process listing.
func startServeProc(t *testing.T, name, storeURL string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--node", name}, extra...)
	p := &serveProc{proc: spawn(t, "sidecar "+name, "sidecar listening on ", []string{envPrefix + "STORE=" + storeURL}, args...)}
	p.name = name
	p.client = sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, "http://"+p.addr)
	return p
}

func (p *serveProc) open(t *testing.T, shard string, term int64, alloc string) {
	t.Helper()
	if _, _, err := demoOpen(t.Context(), p.client, shard, term, alloc); err != nil {
		t.Fatalf("open %s term %d on %s: %v", shard, term, p.name, err)
	}
}

func reasonOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*sidecarv1.ErrorDetail); ok {
				return ed.GetReason()
			}
		}
	}
	return ""
}

// zombieRun is the clients' view: which sidecar is primary, and every op
// id acknowledged, by whom.
type zombieRun struct {
	current atomic.Pointer[serveProc]
	mu      sync.Mutex
	acked   map[string]string // op id -> sidecar that acknowledged it
	fenced  atomic.Int64
}

func (z *zombieRun) client(ctx context.Context, g int) {
	for i := 0; ctx.Err() == nil; i++ {
		p := z.current.Load()
		op := fmt.Sprintf("c%d-%d", g, i)
		_, err := p.client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte(op)}}))
		if err != nil {
			// Not acknowledged: the op may or may not be durable, and
			// the client moves on with a new id, as a primary would
			// after failing over.
			if reasonOf(err) == "fenced" {
				z.fenced.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		z.mu.Lock()
		z.acked[op] = p.name
		z.mu.Unlock()
	}
}

// phase lets the clients append to who for zombiePhase, and longer, up to
// a bound, until who acknowledged a few ops: on a loaded machine an open
// can eat a short phase.
func (z *zombieRun) phase(t *testing.T, who string) {
	t.Helper()
	time.Sleep(zombiePhase)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		z.mu.Lock()
		n := 0
		for _, w := range z.acked {
			if w == who {
				n++
			}
		}
		z.mu.Unlock()
		if n >= 20 {
			return
		}
	}
	t.Fatalf("sidecar %s acknowledged fewer than 20 ops in 30s", who)
}

// runZombie: clients append to A; B opens term 2 while A lives; B hands
// off to C; C is killed with SIGKILL and D opens term 3; D gets SIGTERM
// while its clients append, and term 4 on A reads the lineage. Every
// acknowledged op must be in that read, A must refuse appends once B's
// term is open, and B once it handed off.
func runZombie(t *testing.T, storeURL, secret string) {
	z := &zombieRun{acked: map[string]string{}}
	a := startServeProc(t, "A", storeURL)
	b := startServeProc(t, "B", storeURL)
	c := startServeProc(t, "C", storeURL)
	d := startServeProc(t, "D", storeURL)
	a.open(t, "z", 1, "alloc-a")
	z.current.Store(a)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() { z.client(ctx, g) })
	}
	defer func() { cancel(); wg.Wait() }()

	z.phase(t, "A")
	b.open(t, "z", 2, "alloc-b")
	// B's seal is stored before its Open returns: from here on A must
	// not acknowledge anything, while it is still alive.
	_, err := a.client.Append(t.Context(), connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte("late-a")}}))
	if reasonOf(err) != "fenced" {
		t.Fatalf("A after B's open: %v, want fenced", err)
	}
	z.current.Store(b)

	z.phase(t, "B")
	hc, err := b.client.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "z", TargetAllocationId: "alloc-c", TargetNode: "C"}))
	if err != nil {
		t.Fatalf("handoff on B: %v", err)
	}
	if _, err := c.client.AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()})); err != nil {
		t.Fatalf("adopt on C: %v", err)
	}
	_, err = b.client.Append(t.Context(), connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte("late-b")}}))
	if reasonOf(err) != "handed_off" {
		t.Fatalf("B after the handoff: %v, want handed_off", err)
	}
	z.current.Store(c)

	z.phase(t, "C")
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	d.open(t, "z", 3, "alloc-d")
	z.current.Store(d)
	z.phase(t, "D")

	// SIGTERM D while its clients append: it drains, answers every
	// pending append and exits 0; what it acknowledged survives.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("sidecar D exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sidecar D did not exit within 30s of SIGTERM")
	}
	cancel()
	wg.Wait()

	// The final reader: term 4 on A, the long-fenced zombie's sidecar.
	a.open(t, "z", 4, "alloc-a4")
	st, err := a.client.Read(t.Context(), connect.NewRequest(&sidecarv1.ReadRequest{Shard: "z"}))
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]int{}
	for st.Receive() {
		for _, op := range st.Msg().GetBatch().GetOps() {
			read[string(op)]++
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for op, who := range z.acked {
		by[who]++
		if read[op] == 0 {
			t.Errorf("op %s acknowledged by %s is missing from the final lineage", op, who)
		}
	}
	for op, n := range read {
		if n > 1 {
			t.Errorf("op %s appears %d times in the lineage", op, n)
		}
	}
	if read["late-a"] > 0 || read["late-b"] > 0 {
		t.Errorf("an append refused by A or B made it into the lineage")
	}
	for _, who := range []string{"A", "B", "C", "D"} {
		if by[who] == 0 {
			t.Errorf("no op was acknowledged by %s: the run did not exercise its phase", who)
		}
	}
	t.Logf("acknowledged: A %d, B %d, C %d, D %d; lineage %d ops; fenced answers %d", by["A"], by["B"], by["C"], by["D"], len(read), z.fenced.Load())

	// SIGTERM drains: the survivors exit 0.
	for _, p := range []*serveProc{a, b, d} {
		if p != d {
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-p.done:
				if err != nil {
					t.Errorf("sidecar %s exited with %v after SIGTERM", p.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("sidecar %s did not exit within 30s of SIGTERM", p.name)
			}
		}
		logs := p.stderr.String()
		if secret != "" && strings.Contains(logs, secret) {
			t.Errorf("sidecar %s logged the store's secret", p.name)
		}
		if !strings.Contains(logs, `"msg":"shard open"`) || !strings.Contains(logs, `"shard":"z"`) {
			t.Errorf("sidecar %s logs lack the shard-open event:\n%s", p.name, logs)
		}
	}
}

func TestZombieProcessesOnFS(t *testing.T) {
	runZombie(t, "file://"+t.TempDir(), "")
}

func TestZombieProcessesOnMinIO(t *testing.T) {
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	runZombie(t, srv.MinioURL("zombie"), srv.SecretKey)
}
