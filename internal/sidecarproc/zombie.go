package sidecarproc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// zombieRun is the clients' view: which sidecar is primary, and every op
// id acknowledged, by whom.
type zombieRun struct {
	phase   time.Duration
	current atomic.Pointer[Proc]
	mu      sync.Mutex
	acked   map[string]string // op id -> sidecar that acknowledged it
	fenced  atomic.Int64
}

func (z *zombieRun) client(ctx context.Context, g int) {
	for i := 0; ctx.Err() == nil; i++ {
		p := z.current.Load()
		op := fmt.Sprintf("c%d-%d", g, i)
		if err := p.Append(ctx, "z", []byte(op)); err != nil {
			// Not acknowledged: the op may or may not be durable, and
			// the client moves on with a new id, as a primary would
			// after failing over.
			if ReasonOf(err) == "fenced" {
				z.fenced.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		z.mu.Lock()
		z.acked[op] = p.Name
		z.mu.Unlock()
	}
}

// await lets the clients append to who for the phase, and longer, up to a
// bound, until who acknowledged a few ops: on a loaded machine an open can
// eat a short phase.
func (z *zombieRun) await(t *testing.T, who string) {
	t.Helper()
	time.Sleep(z.phase)
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

// RunZombie is the multi-process zombie scenario on storeURL, each phase
// appending for at least phase: clients append to A; B opens term 2 while A
// lives; B hands off to C; C is killed with SIGKILL and D opens term 3; D
// gets SIGTERM while its clients append, and term 4 on A reads the lineage.
// Every acknowledged op must be in that read, A must refuse appends once B's
// term is open, and B once it handed off. No sidecar may log secret.
//
// serveArgs are extra `shardfence serve` flags for every sidecar. With
// --fencing-mode the shard is created in that mode at A's first open; the
// scenario checks that the store holds it and that every term runs it, so
// a run meant for one mode cannot silently run another (default per_sync).
func RunZombie(t *testing.T, cmd Command, storeURL, secret string, phase time.Duration, serveArgs ...string) {
	z := &zombieRun{phase: phase, acked: map[string]string{}}
	mode := wantMode(t, serveArgs)
	a := Start(t, cmd, "A", storeURL, serveArgs...)
	b := Start(t, cmd, "B", storeURL, serveArgs...)
	c := Start(t, cmd, "C", storeURL, serveArgs...)
	d := Start(t, cmd, "D", storeURL, serveArgs...)
	a.Open(t, "z", 1, "alloc-a")
	a.expectMode(t, "z", mode)
	z.current.Store(a)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() { z.client(ctx, g) })
	}
	defer func() { cancel(); wg.Wait() }()

	z.await(t, "A")
	b.Open(t, "z", 2, "alloc-b")
	b.expectMode(t, "z", mode)
	// B's seal is stored before its Open returns: from here on A must
	// not acknowledge anything, while it is still alive.
	err := a.Append(t.Context(), "z", []byte("late-a"))
	if ReasonOf(err) != "fenced" {
		t.Fatalf("A after B's open: %v, want fenced", err)
	}
	z.current.Store(b)

	z.await(t, "B")
	hc, err := b.Client.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "z", TargetAllocationId: "alloc-c", TargetNode: "C"}))
	if err != nil {
		t.Fatalf("handoff on B: %v", err)
	}
	if _, err := c.Client.AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()})); err != nil {
		t.Fatalf("adopt on C: %v", err)
	}
	c.expectMode(t, "z", mode)
	err = b.Append(t.Context(), "z", []byte("late-b"))
	if ReasonOf(err) != "handed_off" {
		t.Fatalf("B after the handoff: %v, want handed_off", err)
	}
	z.current.Store(c)

	z.await(t, "C")
	if err := c.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.WaitExit(time.Minute)
	d.Open(t, "z", 3, "alloc-d")
	d.expectMode(t, "z", mode)
	z.current.Store(d)
	z.await(t, "D")

	// SIGTERM D while its clients append: it drains, answers every
	// pending append and exits 0; what it acknowledged survives.
	d.Terminate(t)
	cancel()
	wg.Wait()

	// The final reader: term 4 on A, the long-fenced zombie's sidecar.
	a.Open(t, "z", 4, "alloc-a4")
	read, err := a.ReadAll(t.Context(), "z")
	if err != nil {
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
	for _, p := range []*Proc{a, b, d} {
		if p != d {
			p.Terminate(t)
		}
		logs := p.Log()
		if secret != "" && strings.Contains(logs, secret) {
			t.Errorf("sidecar %s logged the store's secret", p.Name)
		}
		if !strings.Contains(logs, `"msg":"shard open"`) || !strings.Contains(logs, `"shard":"z"`) {
			t.Errorf("sidecar %s logs lack the shard-open event:\n%s", p.Name, logs)
		}
	}
}

// wantMode is the fencing mode serveArgs give new shards: their
// --fencing-mode, or serve's default, per_sync.
func wantMode(t *testing.T, serveArgs []string) sidecarv1.FencingMode {
	t.Helper()
	name := "per_sync"
	for i, arg := range serveArgs {
		if v, ok := strings.CutPrefix(arg, "--fencing-mode="); ok {
			name = v
		} else if arg == "--fencing-mode" && i+1 < len(serveArgs) {
			name = serveArgs[i+1]
		}
	}
	m, ok := sidecarv1.FencingMode_value["FENCING_MODE_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))]
	if !ok {
		t.Fatalf("unknown --fencing-mode %q in the serve flags", name)
	}
	return sidecarv1.FencingMode(m)
}

// expectMode fails the test unless the shard's stored fencing settings (as
// Inspect reads them from the store) and the settings its open writer runs
// on this sidecar (Status) are mode.
func (p *Proc) expectMode(t *testing.T, shard string, mode sidecarv1.FencingMode) {
	t.Helper()
	in, err := p.Client.Inspect(t.Context(), connect.NewRequest(&sidecarv1.InspectRequest{Shard: shard}))
	if err != nil {
		t.Fatalf("inspect %s on %s: %v", shard, p.Name, err)
	}
	st, err := p.Client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: shard}))
	if err != nil {
		t.Fatalf("status of %s on %s: %v", shard, p.Name, err)
	}
	stored, running := in.Msg.GetStoredSettings().GetMode(), st.Msg.GetStatus().GetSettings().GetMode()
	if stored != mode || running != mode {
		t.Fatalf("shard %s on %s: stored fencing mode %v, running %v; the scenario asked for %v", shard, p.Name, stored, running, mode)
	}
}
