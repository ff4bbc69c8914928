package sidecarproc

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// zombie is one run of the zombie scenario: its sidecars and clients.
type zombie struct {
	t          *testing.T
	run        *clientRun
	mode       sidecarv1.FencingMode
	a, b, c, d *Proc
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
	z := &zombie{t: t, run: newClientRun("c", phase), mode: wantMode(t, serveArgs)}
	z.a = Start(t, cmd, "A", storeURL, serveArgs...)
	z.b = Start(t, cmd, "B", storeURL, serveArgs...)
	z.c = Start(t, cmd, "C", storeURL, serveArgs...)
	z.d = Start(t, cmd, "D", storeURL, serveArgs...)
	z.a.Open(t, "z", 1, "alloc-a")
	z.a.expectMode(t, "z", z.mode)
	z.run.start(t.Context(), z.a, 8)
	defer z.run.stop()
	z.run.await(t, "A", 0, "")
	z.fenceA()
	z.run.await(t, "B", 0, "")
	z.handOff()
	z.run.await(t, "C", 0, "")
	z.killC()
	z.run.await(t, "D", 0, "")
	// SIGTERM D while its clients append: it drains, answers every
	// pending append and exits 0; what it acknowledged survives.
	z.d.Terminate(t)
	z.run.stop()
	z.finalRead()
	z.checkLogs(secret)
}

// fenceA opens term 2 on B while A lives: B's seal is stored before its
// Open returns, so from here on A must not acknowledge anything.
func (z *zombie) fenceA() {
	t := z.t
	z.b.Open(t, "z", 2, "alloc-b")
	z.b.expectMode(t, "z", z.mode)
	if err := z.a.Append(t.Context(), "z", []byte("late-a")); ReasonOf(err) != "fenced" {
		t.Fatalf("A after B's open: %v, want fenced", err)
	}
	z.run.current.Store(z.b)
}

// handOff hands the shard off from B to C at the same term; B refuses
// from then on.
func (z *zombie) handOff() {
	t := z.t
	hc, err := z.b.Client.StartHandoff(t.Context(), connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: "z", TargetAllocationId: "alloc-c", TargetNode: "C"}))
	if err != nil {
		t.Fatalf("handoff on B: %v", err)
	}
	if _, err := z.c.Client.AdoptHandoff(t.Context(), connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()})); err != nil {
		t.Fatalf("adopt on C: %v", err)
	}
	z.c.expectMode(t, "z", z.mode)
	if err := z.b.Append(t.Context(), "z", []byte("late-b")); ReasonOf(err) != "handed_off" {
		t.Fatalf("B after the handoff: %v, want handed_off", err)
	}
	z.run.current.Store(z.c)
}

// killC SIGKILLs C and opens term 3 on D.
func (z *zombie) killC() {
	t := z.t
	if err := z.c.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	z.c.WaitExit(time.Minute)
	z.d.Open(t, "z", 3, "alloc-d")
	z.d.expectMode(t, "z", z.mode)
	z.run.current.Store(z.d)
}

// finalRead opens term 4 on A, the long-fenced zombie's sidecar, and
// checks the lineage against what was acknowledged.
func (z *zombie) finalRead() {
	t := z.t
	z.a.Open(t, "z", 4, "alloc-a4")
	read, err := z.a.ReadAll(t.Context(), "z")
	if err != nil {
		t.Fatal(err)
	}
	by := z.run.checkLineage(t, read, []string{"late-a", "late-b"}, []string{"A", "B", "C", "D"})
	t.Logf("acknowledged: A %d, B %d, C %d, D %d; lineage %d ops; fenced answers %d", by["A"], by["B"], by["C"], by["D"], len(read), z.run.fenced.Load())
}

// checkLogs terminates the survivors (SIGTERM drains: they exit 0) and
// checks their logs: the shard-open event, and never the secret.
func (z *zombie) checkLogs(secret string) {
	t := z.t
	for _, p := range []*Proc{z.a, z.b, z.d} {
		if p != z.d {
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
