package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/harness/demo"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// The fencing rewrite across processes, on a real store: sidecar A runs
// term 1 in lease mode and keeps appending while `shardfence settings`, a
// separate process, switches the shard to per-sync at term 2. Shortening
// the successors' wait while a lease may run, the rewrite must wait out
// A's lease after fencing it; meanwhile no term opens (B's open is
// refused). Afterwards A is fenced, term 3 opens per-sync on sidecar B
// without a lease wait of the old mode, and every op A acknowledged, in
// its lease after the rewrite's sweep included, is in term 3's lineage.
func TestSettingsRewriteAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sidecar processes")
	}
	dir := t.TempDir()
	storeURL := "file://" + filepath.Join(dir, "store")
	const lease = 2 * time.Second
	a := sidecarproc.Start(t, thisBinary(), "a", storeURL, "--fencing-mode", "lease", "--lease-interval", lease.String())
	b := sidecarproc.Start(t, thisBinary(), "b", storeURL)
	a.Open(t, "z", 1, "a1")

	ctx, stop := context.WithCancel(t.Context())
	var mu sync.Mutex
	var acked []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			op := fmt.Sprintf("a-%d", i)
			_, err := a.Client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte(op)}}))
			if err == nil {
				mu.Lock()
				acked = append(acked, op)
				mu.Unlock()
			} else if sidecarproc.ReasonOf(err) == "fenced" {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 5 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	cmd := exec.Command(os.Args[0], "settings", "--store", storeURL, "--shard", "z", "--term", "2", "--allocation", "admin", "--fencing-mode", "per_sync")
	cmd.Env = append(os.Environ(), asBinaryEnv+"=1")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	// While the rewrite waits, no term opens.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errOut.String(), "wait") {
		select {
		case err := <-waited:
			t.Fatalf("the rewrite finished without waiting out term 1's lease (%v):\n%s%s", err, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rewrite never started its wait:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := demo.OpenShard(t.Context(), b.Client, "z", 3, "b3"); sidecarproc.ReasonOf(err) != "settings_rewrite" {
		t.Errorf("open during the rewrite: %v, want [settings_rewrite]", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("settings: %v\n%s%s", err, out.String(), errOut.String())
	}
	if took := time.Since(start); took < lease {
		t.Errorf("the rewrite took %v, less than term 1's lease %v", took, lease)
	}
	if !strings.Contains(out.String(), "lease (2s) -> per_sync") {
		t.Errorf("settings printed %q", out.String())
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("term 1 still acknowledges after the rewrite fenced it and its lease ran out")
	}
	stop()

	opened, _, err := demo.OpenShard(t.Context(), b.Client, "z", 3, "b3")
	if err != nil {
		t.Fatal(err)
	}
	if m := opened.GetStatus().GetSettings().GetMode(); m != sidecarv1.FencingMode_FENCING_MODE_PER_SYNC {
		t.Errorf("term 3 runs %v, want per_sync", m)
	}
	st, err := b.Client.Read(t.Context(), connect.NewRequest(&sidecarv1.ReadRequest{Shard: "z"}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for st.Receive() {
		for _, op := range st.Msg().GetBatch().GetOps() {
			got[string(op)] = true
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, op := range acked {
		if !got[op] {
			t.Fatalf("op %q acknowledged by term 1 is not in term 3's lineage (%d acked, %d read)", op, len(acked), len(got))
		}
	}
	t.Logf("term 1 acknowledged %d ops; the rewrite took %v", len(acked), time.Since(start).Round(time.Millisecond))
}

// `settings` moves a shard between fenced and unfenced, one term at a
// time: an unfenced shard opened by a sidecar becomes observe, then
// create_only, then unfenced again; each open after a rewrite runs the
// stored mode.
func TestSettingsSwitchesBetweenFencedAndUnfenced(t *testing.T) {
	storeURL := "file://" + t.TempDir()
	addr, _ := startServe(t, "--store", storeURL, "--listen", "127.0.0.1:0", "--allow-unfenced")
	var o, e syncBuffer
	if err := runOpen(t.Context(), []string{"--addr", addr, "--shard", "m", "--term", "1", "--allocation", "a1", "--unfenced"}, &o, &e); err != nil {
		t.Fatalf("open unfenced: %v\n%s", err, e.String())
	}
	term := 1
	for _, mode := range []string{"observe", "create_only", "unfenced"} {
		term++
		var out, errb strings.Builder
		args := []string{"settings", "--store", storeURL, "--shard", "m", "--term", fmt.Sprint(term), "--allocation", "admin", "--fencing-mode", mode}
		if code := dispatch(t.Context(), args, &out, &errb); code != 0 {
			t.Fatalf("settings --fencing-mode %s: exit %d\n%s", mode, code, errb.String())
		}
		want := mode
		if mode == "unfenced" {
			want = "disabled"
		}
		if !strings.Contains(out.String(), "-> "+want) {
			t.Fatalf("settings --fencing-mode %s printed %q", mode, out.String())
		}
		term++
		openArgs := []string{"--addr", addr, "--shard", "m", "--term", fmt.Sprint(term), "--allocation", fmt.Sprint("a", term)}
		if mode == "unfenced" {
			openArgs = append(openArgs, "--unfenced")
		} else {
			openArgs = append(openArgs, "--fencing-mode", mode)
		}
		if err := runOpen(t.Context(), openArgs, &o, &e); err != nil {
			t.Fatalf("open after the rewrite to %s: %v\n%s", mode, err, e.String())
		}
		var st strings.Builder
		if err := runStatus(t.Context(), []string{"--addr", addr, "--shard", "m"}, &st, &e); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(st.String(), want) {
			t.Fatalf("status after the rewrite to %s:\n%s", mode, st.String())
		}
	}
	// A rewrite at a term the shard already passed changes nothing and
	// says which term to use.
	var out, errb strings.Builder
	args := []string{"settings", "--store", storeURL, "--shard", "m", "--term", "1", "--allocation", "admin", "--fencing-mode", "per_sync"}
	if code := dispatch(t.Context(), args, &out, &errb); code != 1 || !strings.Contains(errb.String(), "nothing changed") || !strings.Contains(errb.String(), fmt.Sprintf("--term %d or higher", term+1)) {
		t.Fatalf("settings at a stale term: exit %d\n%s", code, errb.String())
	}
	out.Reset()
	if code := dispatch(t.Context(), []string{"settings", "--store", storeURL, "--shard", "m"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "fencing disabled") {
		t.Fatalf("the setting after a refused rewrite: exit %d, %q", code, out.String())
	}
}

// A rewrite with an unknown mode names every mode a rewrite may store,
// unfenced included.
func TestSettingsBadModeNamesUnfenced(t *testing.T) {
	err := runSettings(t.Context(), []string{"--store", "file://" + t.TempDir(), "--shard", "s", "--term", "2", "--allocation", "admin", "--fencing-mode", "fenced"}, &syncBuffer{}, &syncBuffer{})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "observe or unfenced") {
		t.Fatalf("a rewrite to mode \"fenced\": %v", err)
	}
}
