package sidecarproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/syncbuf"
)

// rolloutPhase is how long each phase of the rollout appends at least.
const rolloutPhase = 300 * time.Millisecond

// rolloutAck is one acknowledged op: who acknowledged it, the epoch the
// client read before it sent the append (so an ack of epoch >= e was sent
// after the test stepped to e), and the ack's fencing_observed.
type rolloutAck struct {
	who      string
	epoch    int64
	observed string
}

// rolloutRun is the clients' view of the rollout: the current primary,
// the scenario's epoch, and every op id acknowledged.
type rolloutRun struct {
	current atomic.Pointer[Proc]
	epoch   atomic.Int64
	mu      sync.Mutex
	acked   map[string]rolloutAck
	refused atomic.Int64
}

func (r *rolloutRun) client(ctx context.Context, g int) {
	for i := 0; ctx.Err() == nil; i++ {
		// The epoch is read before the primary: an ack recorded with
		// epoch e was sent after the step that set e.
		e := r.epoch.Load()
		p := r.current.Load()
		op := fmt.Sprintf("r%d-%d", g, i)
		res, err := p.Client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte(op)}}))
		if err != nil {
			// Not acknowledged: the op may or may not be durable;
			// the client moves on with a new id.
			r.refused.Add(1)
			time.Sleep(2 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		r.acked[op] = rolloutAck{who: p.Name, epoch: e, observed: res.Msg.GetFencingObserved()}
		r.mu.Unlock()
	}
}

// step starts a new epoch and returns it: every append a client sends from
// now on is recorded with it or a later one.
func (r *rolloutRun) step() int64 { return r.epoch.Add(1) }

// acks returns the acks by who sent in epoch since or later.
func (r *rolloutRun) acks(who string, since int64) []rolloutAck {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []rolloutAck
	for _, a := range r.acked {
		if a.who == who && a.epoch >= since {
			out = append(out, a)
		}
	}
	return out
}

// await lets the clients append for the phase, and longer, up to a bound,
// until who acknowledged a few ops sent in epoch since or later, so a
// loaded machine does not flake.
func (r *rolloutRun) await(t *testing.T, who string, since int64, what string) {
	t.Helper()
	time.Sleep(rolloutPhase)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(r.acks(who, since)) >= 20 {
			return
		}
	}
	t.Fatalf("sidecar %s acknowledged fewer than 20 ops in 30s %s", who, what)
}

// noAcks fails the test if who acknowledged an op sent in epoch since or
// later: it was fenced before that epoch began.
func (r *rolloutRun) noAcks(t *testing.T, who string, since int64, what string) {
	t.Helper()
	if n := len(r.acks(who, since)); n > 0 {
		t.Errorf("sidecar %s acknowledged %d ops sent after %s", who, n, what)
	}
}

// RunModeRollout is the rollout of fencing on a live shard, across
// processes, on storeURL: sidecars serving --allow-unfenced, clients
// appending to the current primary all along.
//
//   - A opens the shard unfenced at term 1;
//   - `shardfence settings` rewrites it to observe at term 2; A, unfenced,
//     does not notice and keeps acknowledging;
//   - B opens term 3 in observe mode; A refuses from then on (its next md
//     create meets B's poison);
//   - settings rewrites to per_sync at term 4; B keeps acknowledging, and
//     every ack it gives from then on carries fencing_observed (status,
//     the `status` row, the metric and the log line show it too);
//   - C opens term 5 per_sync; B refuses from then on;
//   - settings rewrites to create_only at term 6: C's next CAS fails;
//   - D opens term 7 create_only; its clients append;
//   - term 8 on A reads the lineage: every acknowledged op of every phase
//     is in it exactly once, and no refused probe is.
//
// After each open and rewrite the stored mode (Inspect) and the running
// mode (Status) are checked. No process may print secret.
func RunModeRollout(t *testing.T, cmd Command, storeURL, secret string) {
	r := &rolloutRun{acked: map[string]rolloutAck{}}
	serve := []string{"--allow-unfenced"}
	a := Start(t, cmd, "A", storeURL, serve...)
	b := Start(t, cmd, "B", storeURL, serve...)
	c := Start(t, cmd, "C", storeURL, serve...)
	d := Start(t, cmd, "D", storeURL, serve...)
	var (
		unfenced   = &sidecarv1.ShardSettings{FencingDisabled: true}
		observe    = &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_OBSERVE}
		perSync    = &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC}
		createOnly = &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_CREATE_ONLY}
	)
	var outputs []string // the settings and status processes' output

	a.openWith(t, "z", 1, "alloc-a", unfenced)
	a.expectFencing(t, "z", unfenced, true)
	r.current.Store(a)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() { r.client(ctx, g) })
	}
	defer func() { cancel(); wg.Wait() }()
	r.await(t, "A", 0, "unfenced at term 1")

	// unfenced -> observe at term 2, while A acknowledges: A sends no CAS
	// and reads no fence key, so it goes on.
	outputs = append(outputs, runSettings(t, cmd, storeURL, 2, "observe"))
	a.expectStored(t, "z", observe)
	r.await(t, "A", r.step(), "after the rewrite to observe")

	b.openWith(t, "z", 3, "alloc-b", observe)
	afterB := r.step()
	b.expectFencing(t, "z", observe, true)
	// B's seal (its poison) is stored before its Open returns: A's next
	// md create meets it, unfenced as A is.
	if err := a.Append(t.Context(), "z", []byte("late-a")); ReasonOf(err) != "fenced" || !strings.Contains(err.Error(), "poisoned by successor term 3") {
		t.Fatalf("A after B's open: %v, want fenced by term 3's poison", err)
	}
	r.current.Store(b)
	r.await(t, "B", afterB, "in observe mode at term 3")
	for _, ack := range r.acks("B", 0) {
		if ack.observed != "" {
			t.Fatalf("B observed a refused CAS before anyone claimed above term 3: %s", ack.observed)
		}
	}

	// observe -> per_sync at term 4, while B acknowledges: the claim
	// takes B's fence key, so each CAS of B's is refused, which observe
	// mode reports on the ack instead of failing it.
	outputs = append(outputs, runSettings(t, cmd, storeURL, 4, "per_sync"))
	afterClaim := r.step()
	b.expectStored(t, "z", perSync)
	r.await(t, "B", afterClaim, "after the rewrite to per_sync claimed term 4")
	var observed string
	for _, ack := range r.acks("B", afterClaim) {
		if ack.observed == "" {
			t.Errorf("B acknowledged an op sent after term 4 was claimed without fencing_observed")
			break
		}
		observed = ack.observed
	}
	t.Logf("B's acks after the claim of term 4: %d, fencing_observed %q", len(r.acks("B", afterClaim)), observed)
	st, err := b.Client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "z"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Msg.GetStatus(); s.GetFencingObserved() == "" || s.GetFencingObservedSyncs() == 0 || s.GetFenced() {
		t.Errorf("B's status after the claim of term 4: fencing_observed %q, %d syncs, fenced %v; want observed syncs and not fenced",
			s.GetFencingObserved(), s.GetFencingObservedSyncs(), s.GetFenced())
	}
	statusOut := runCommand(t, cmd, "status", "--addr", b.Addr, "--shard", "z")
	outputs = append(outputs, statusOut)
	if !strings.Contains(statusOut, "fencing observed") {
		t.Errorf("`shardfence status` on B lacks the fencing observed row:\n%s", statusOut)
	}
	if m := metric(t, b, `shardfence_sidecar_fencing_observed_total{shard="z"}`); m == "" || m == "0" {
		t.Errorf("B's %s is %q, want above 0", "shardfence_sidecar_fencing_observed_total", m)
	}
	if !strings.Contains(b.Log(), "fencing observed") {
		t.Errorf("B did not log the observed fencing")
	}

	c.openWith(t, "z", 5, "alloc-c", perSync)
	afterC := r.step()
	c.expectFencing(t, "z", perSync, true)
	// B's next md create meets C's poison, and its error says so (not
	// the refused CAS of term 4's claim, which observe mode only
	// reported).
	if err := b.Append(t.Context(), "z", []byte("late-b")); ReasonOf(err) != "fenced" || !strings.Contains(err.Error(), "poison") {
		t.Fatalf("B after C's open: %v, want fenced by C's poison", err)
	}
	r.current.Store(c)
	r.await(t, "C", afterC, "per_sync at term 5")

	// per_sync -> create_only at term 6: the claim takes C's fence key,
	// and C's next CAS fails.
	outputs = append(outputs, runSettings(t, cmd, storeURL, 6, "create_only"))
	afterRewrite6 := r.step()
	c.expectStored(t, "z", createOnly)
	if err := c.Append(t.Context(), "z", []byte("late-c")); ReasonOf(err) != "fenced" {
		t.Errorf("C after the rewrite claimed term 6: %v, want fenced", err)
	}

	d.openWith(t, "z", 7, "alloc-d", createOnly)
	afterD := r.step()
	d.expectFencing(t, "z", createOnly, true)
	r.current.Store(d)
	r.await(t, "D", afterD, "create_only at term 7")
	cancel()
	wg.Wait()

	// The fenced writers acknowledged nothing sent after they were fenced.
	r.noAcks(t, "A", afterB, "B opened term 3")
	r.noAcks(t, "B", afterC, "C opened term 5")
	r.noAcks(t, "C", afterRewrite6, "the rewrite claimed term 6")

	// The final reader: term 8 on A, the first, long-fenced writer.
	a.openWith(t, "z", 8, "alloc-a8", createOnly)
	a.expectFencing(t, "z", createOnly, true)
	read, err := a.ReadAll(t.Context(), "z")
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for op, ack := range r.acked {
		by[ack.who]++
		if read[op] != 1 {
			t.Errorf("op %s acknowledged by %s (epoch %d) is in the final lineage %d times, want once", op, ack.who, ack.epoch, read[op])
		}
	}
	for op, n := range read {
		if n > 1 {
			t.Errorf("op %s appears %d times in the lineage", op, n)
		}
	}
	for _, late := range []string{"late-a", "late-b", "late-c"} {
		if read[late] > 0 {
			t.Errorf("the refused append %s made it into the lineage", late)
		}
	}
	for _, who := range []string{"A", "B", "C", "D"} {
		if by[who] == 0 {
			t.Errorf("no op was acknowledged by %s: the run did not exercise its phase", who)
		}
	}
	t.Logf("acknowledged: A %d, B %d (%d observed), C %d, D %d; lineage %d ops; refused answers %d",
		by["A"], by["B"], len(r.acks("B", afterClaim)), by["C"], by["D"], len(read), r.refused.Load())

	for _, p := range []*Proc{a, b, c, d} {
		p.Terminate(t)
		outputs = append(outputs, p.Log())
	}
	for _, out := range outputs {
		if secret != "" && strings.Contains(out, secret) {
			t.Errorf("a process printed the store's secret:\n%s", out)
		}
	}
}

// openWith opens shard at term for alloc on this sidecar with settings,
// failing the test if the open stream ends without its opened event.
func (p *Proc) openWith(t *testing.T, shard string, term int64, alloc string, settings *sidecarv1.ShardSettings) {
	t.Helper()
	st, err := p.Client.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: shard, Term: term, AllocationId: alloc, Settings: settings}))
	if err != nil {
		t.Fatalf("open %s term %d on %s: %v", shard, term, p.Name, err)
	}
	defer st.Close()
	opened := false
	for st.Receive() {
		opened = opened || st.Msg().GetOpened() != nil
	}
	if err := st.Err(); err != nil {
		t.Fatalf("open %s term %d on %s: %v", shard, term, p.Name, err)
	}
	if !opened {
		t.Fatalf("open %s term %d on %s: the stream ended without the opened event", shard, term, p.Name)
	}
}

// sameFencing reports whether got is the fencing want asks for: disabled,
// or the same mode.
func sameFencing(got, want *sidecarv1.ShardSettings) bool {
	if got.GetFencingDisabled() || want.GetFencingDisabled() {
		return got.GetFencingDisabled() == want.GetFencingDisabled()
	}
	return got.GetMode() == want.GetMode()
}

func fencingName(s *sidecarv1.ShardSettings) string {
	if s.GetFencingDisabled() {
		return "unfenced"
	}
	return s.GetMode().String()
}

// expectStored fails the test unless the shard's stored fencing, as
// Inspect reads it from the store, is want.
func (p *Proc) expectStored(t *testing.T, shard string, want *sidecarv1.ShardSettings) {
	t.Helper()
	in, err := p.Client.Inspect(t.Context(), connect.NewRequest(&sidecarv1.InspectRequest{Shard: shard}))
	if err != nil {
		t.Fatalf("inspect %s on %s: %v", shard, p.Name, err)
	}
	if got := in.Msg.GetStoredSettings(); !sameFencing(got, want) {
		t.Fatalf("shard %s: stored fencing %s, want %s", shard, fencingName(got), fencingName(want))
	}
}

// expectFencing fails the test unless the stored fencing and, if running,
// the fencing the shard's writer runs on this sidecar (Status) are want.
func (p *Proc) expectFencing(t *testing.T, shard string, want *sidecarv1.ShardSettings, running bool) {
	t.Helper()
	p.expectStored(t, shard, want)
	if !running {
		return
	}
	st, err := p.Client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: shard}))
	if err != nil {
		t.Fatalf("status of %s on %s: %v", shard, p.Name, err)
	}
	if got := st.Msg.GetStatus().GetSettings(); !sameFencing(got, want) {
		t.Fatalf("shard %s on %s runs fencing %s, want %s", shard, p.Name, fencingName(got), fencingName(want))
	}
}

// runSettings runs `shardfence settings` as its own process, rewriting
// shard z's fencing to mode at term, and returns what it printed.
func runSettings(t *testing.T, cmd Command, storeURL string, term int64, mode string) string {
	t.Helper()
	out := runCommand(t, cmd, "settings", "--store", storeURL, "--shard", "z", "--term", fmt.Sprint(term), "--allocation", "admin", "--fencing-mode", mode)
	want := "-> " + mode
	if !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("term %d is claimed", term)) {
		t.Fatalf("settings --fencing-mode %s at term %d printed:\n%s", mode, term, out)
	}
	return out
}

// runCommand runs the shardfence command with args and returns its output,
// failing the test if it does not exit 0 within a minute.
func runCommand(t *testing.T, cmd Command, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, args...)
	c.Env = append(os.Environ(), cmd.Env...)
	var out syncbuf.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("shardfence %s: %v\n%s", args[0], err, out.String())
	}
	return out.String()
}

// metric is the value of the sample named series (name and labels, as the
// exposition prints them) on p's /metrics, "" if it has none.
func metric(t *testing.T, p *Proc, series string) string {
	t.Helper()
	res, err := http.Get("http://" + p.Addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", p.Name, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("metrics of %s: %v", p.Name, err)
	}
	for _, line := range bytes.Split(body, []byte("\n")) {
		if v, ok := strings.CutPrefix(string(line), series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
