package sidecarproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/launcher"
	"github.com/shardfence/shardfence/internal/sidecarapi"
	"github.com/shardfence/shardfence/internal/syncbuf"
)

// rolloutPhase is how long each phase of the rollout appends at least.
const rolloutPhase = 300 * time.Millisecond

// The fencing of each step of the rollout.
var (
	unfenced   = &sidecarv1.ShardSettings{FencingDisabled: true}
	observe    = &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_OBSERVE}
	perSync    = &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_PER_SYNC}
	createOnly = &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_CREATE_ONLY}
)

// rollout is one run of the mode rollout: its sidecars, clients, the
// epochs at which each writer was fenced, and what every process printed
// (checked for the secret at the end).
type rollout struct {
	t          *testing.T
	cmd        Command
	storeURL   string
	run        *clientRun
	a, b, c, d *Proc
	outputs    []string
	// The epochs that began when B opened, when term 4's claim took B's
	// fence key, when C opened, and when term 6's claim took C's.
	afterB, afterClaim, afterC, afterRewrite6 int64
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
	r := &rollout{t: t, cmd: cmd, storeURL: storeURL, run: newClientRun("r", rolloutPhase)}
	serve := []string{"--allow-unfenced"}
	r.a = Start(t, cmd, "A", storeURL, serve...)
	r.b = Start(t, cmd, "B", storeURL, serve...)
	r.c = Start(t, cmd, "C", storeURL, serve...)
	r.d = Start(t, cmd, "D", storeURL, serve...)
	r.a.openWith(t, "z", 1, "alloc-a", unfenced)
	r.a.expectFencing(t, "z", unfenced, true)
	r.run.start(t.Context(), r.a, 8)
	defer r.run.stop()
	r.run.await(t, "A", 0, "unfenced at term 1")
	r.toObserve()
	r.toPerSync()
	r.toCreateOnly()
	r.run.stop()
	// The fenced writers acknowledged nothing sent after they were fenced.
	r.run.noAcks(t, "A", r.afterB, "B opened term 3")
	r.run.noAcks(t, "B", r.afterC, "C opened term 5")
	r.run.noAcks(t, "C", r.afterRewrite6, "the rewrite claimed term 6")
	r.finalRead()
	for _, p := range []*Proc{r.a, r.b, r.c, r.d} {
		p.Terminate(t)
		r.outputs = append(r.outputs, p.Log())
	}
	for _, out := range r.outputs {
		if secret != "" && strings.Contains(out, secret) {
			t.Errorf("a process printed the store's secret:\n%s", out)
		}
	}
}

// toObserve rewrites unfenced -> observe at term 2 while A acknowledges
// (A sends no CAS and reads no fence key, so it goes on), then opens term
// 3 on B in observe mode: B's seal (its poison) is stored before its Open
// returns, and A's next md create meets it, unfenced as A is.
func (r *rollout) toObserve() {
	t := r.t
	r.outputs = append(r.outputs, runSettings(t, r.cmd, r.storeURL, 2, "observe"))
	r.a.expectStored(t, "z", observe)
	r.run.await(t, "A", r.run.step(), "after the rewrite to observe")

	r.afterB = r.takeOver(r.a, r.b, 3, "alloc-b", observe, "late-a", "poisoned by successor term 3", "in observe mode at term 3")
	for _, ack := range r.run.acks("B", 0) {
		if ack.observed != "" {
			t.Fatalf("B observed a refused CAS before anyone claimed above term 3: %s", ack.observed)
		}
	}
}

// toPerSync rewrites observe -> per_sync at term 4 while B acknowledges:
// the claim takes B's fence key, so each CAS of B's is refused, which
// observe mode reports on the ack (and in its status, the `status` row,
// the metric and the log) instead of failing it.
func (r *rollout) toPerSync() {
	t := r.t
	r.outputs = append(r.outputs, runSettings(t, r.cmd, r.storeURL, 4, "per_sync"))
	r.afterClaim = r.run.step()
	r.b.expectStored(t, "z", perSync)
	r.run.await(t, "B", r.afterClaim, "after the rewrite to per_sync claimed term 4")
	var observed string
	for _, ack := range r.run.acks("B", r.afterClaim) {
		if ack.observed == "" {
			t.Errorf("B acknowledged an op sent after term 4 was claimed without fencing_observed")
			break
		}
		observed = ack.observed
	}
	t.Logf("B's acks after the claim of term 4: %d, fencing_observed %q", len(r.run.acks("B", r.afterClaim)), observed)
	st, err := r.b.Client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "z"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Msg.GetStatus(); s.GetFencingObserved() == "" || s.GetFencingObservedSyncs() == 0 || s.GetFenced() {
		t.Errorf("B's status after the claim of term 4: fencing_observed %q, %d syncs, fenced %v; want observed syncs and not fenced",
			s.GetFencingObserved(), s.GetFencingObservedSyncs(), s.GetFenced())
	}
	statusOut := runCommand(t, r.cmd, "status", "--addr", r.b.Addr, "--shard", "z")
	r.outputs = append(r.outputs, statusOut)
	if !strings.Contains(statusOut, "fencing observed") {
		t.Errorf("`shardfence status` on B lacks the fencing observed row:\n%s", statusOut)
	}
	if m := metric(t, r.b, `shardfence_sidecar_fencing_observed_total{shard="z"}`); m == "" || m == "0" {
		t.Errorf("B's %s is %q, want above 0", "shardfence_sidecar_fencing_observed_total", m)
	}
	if !strings.Contains(r.b.Log(), "fencing observed") {
		t.Errorf("B did not log the observed fencing")
	}
}

// toCreateOnly opens term 5 on C per_sync (B's next md create meets C's
// poison, and its error says so, not the refused CAS of term 4's claim,
// which observe mode only reported); rewrites per_sync -> create_only at
// term 6, whose claim takes C's fence key so C's next CAS fails; and opens
// term 7 on D create_only.
func (r *rollout) toCreateOnly() {
	t := r.t
	r.afterC = r.takeOver(r.b, r.c, 5, "alloc-c", perSync, "late-b", "poison", "per_sync at term 5")

	r.outputs = append(r.outputs, runSettings(t, r.cmd, r.storeURL, 6, "create_only"))
	r.afterRewrite6 = r.run.step()
	r.c.expectStored(t, "z", createOnly)
	if err := r.c.Append(t.Context(), "z", []byte("late-c")); ReasonOf(err) != "fenced" {
		t.Errorf("C after the rewrite claimed term 6: %v, want fenced", err)
	}

	r.d.openWith(t, "z", 7, "alloc-d", createOnly)
	afterD := r.run.step()
	r.d.expectFencing(t, "z", createOnly, true)
	r.run.current.Store(r.d)
	r.run.await(t, "D", afterD, "create_only at term 7")
}

// takeOver opens term on to with settings (its seal, the poison, is
// stored before its Open returns), checks that from's next append, late,
// is fenced with an error that says poison, and moves the clients to to
// until it acknowledged a few; it returns the epoch that began with to's
// open.
func (r *rollout) takeOver(from, to *Proc, term int64, alloc string, settings *sidecarv1.ShardSettings, late, poison, what string) int64 {
	t := r.t
	t.Helper()
	to.openWith(t, "z", term, alloc, settings)
	epoch := r.run.step()
	to.expectFencing(t, "z", settings, true)
	if err := from.Append(t.Context(), "z", []byte(late)); ReasonOf(err) != "fenced" || !strings.Contains(err.Error(), poison) {
		t.Fatalf("%s after %s's open: %v, want fenced by the poison (%q)", from.Name, to.Name, err, poison)
	}
	r.run.current.Store(to)
	r.run.await(t, to.Name, epoch, what)
	return epoch
}

// finalRead opens term 8 on A, the first, long-fenced writer, and checks
// the lineage against what was acknowledged.
func (r *rollout) finalRead() {
	t := r.t
	r.a.openWith(t, "z", 8, "alloc-a8", createOnly)
	r.a.expectFencing(t, "z", createOnly, true)
	read, err := r.a.ReadAll(t.Context(), "z")
	if err != nil {
		t.Fatal(err)
	}
	by := r.run.checkLineage(t, read, []string{"late-a", "late-b", "late-c"}, []string{"A", "B", "C", "D"})
	t.Logf("acknowledged: A %d, B %d (%d observed), C %d, D %d; lineage %d ops; refused answers %d",
		by["A"], by["B"], len(r.run.acks("B", r.afterClaim)), by["C"], by["D"], len(read), r.run.refused.Load())
}

// openWith opens shard at term for alloc on this sidecar with settings,
// failing the test if the open stream ends without its opened event.
func (p *Proc) openWith(t *testing.T, shard string, term int64, alloc string, settings *sidecarv1.ShardSettings) {
	t.Helper()
	if _, _, err := sidecarapi.Open(t.Context(), p.Client, &sidecarv1.OpenRequest{Shard: shard, Term: term, AllocationId: alloc, Settings: settings}); err != nil {
		t.Fatalf("open %s term %d on %s: %v", shard, term, p.Name, err)
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
	var out syncbuf.Buffer
	p, err := launcher.Start(cmd, launcher.Spec{Label: "shardfence " + args[0], Args: args, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	err, ok := p.WaitExit(time.Minute)
	if !ok {
		p.Kill()
		err = errors.New("still running after a minute")
	}
	if err != nil {
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
