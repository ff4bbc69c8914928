// Package sidecarproc runs real `shardfence serve` processes for
// multi-process tests, and the scenarios those tests share. The
// cmd/shardfence tests run their own test binary as the command; the e2e
// module builds the command and runs the same scenarios against stores in
// containers, so a scenario is written once whatever store it runs on.
package sidecarproc

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/launcher"
	"github.com/shardfence/shardfence/internal/sidecarapi"
)

// StoreEnv is the environment variable `shardfence serve` reads its store
// URL from; passing the URL there keeps credentials out of process listings.
const StoreEnv = "SHARDFENCE_STORE"

// Command is how to run the shardfence command: an executable and the
// environment it needs besides the test's own.
type Command = launcher.Command

// Proc is one `shardfence serve` (or `shardfence master`, or another
// program's) process, killed when its test ends: a launcher.Proc (Addr,
// Log, Signal, Pause, Kill, WaitExit, ...) with its name and, for a
// sidecar, an API client.
type Proc struct {
	*launcher.Proc
	Name   string
	Client sidecarv1connect.SidecarServiceClient
}

// Start runs `shardfence serve` named name on a free port of 127.0.0.1 with
// storeURL as its store and extra flags, and waits until it reports its
// address. Its log (stderr) is shown if the test fails.
func Start(t testing.TB, cmd Command, name, storeURL string, extra ...string) *Proc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--node", name}, extra...)
	p := start(t, cmd, "sidecar "+name, "sidecar listening on ", StoreEnv+"="+storeURL, args)
	p.Name = name
	p.Client = sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, "http://"+p.Addr)
	return p
}

// MasterStoreEnv is the environment variable `shardfence master` reads its
// store URL from.
const MasterStoreEnv = "SHARDFENCE_MASTER_STORE"

// StartMaster runs `shardfence master` named name of cluster on listen
// (127.0.0.1:0 for a free port) with storeURL as its store and extra
// flags, and waits until it reports its address. Its Client is nil: use
// the master's API at "http://"+Addr.
func StartMaster(t testing.TB, cmd Command, name, cluster, listen, storeURL string, extra ...string) *Proc {
	t.Helper()
	args := append([]string{"master", "--listen", listen, "--node", name, "--cluster", cluster}, extra...)
	p := start(t, cmd, "master "+name, "master listening on ", MasterStoreEnv+"="+storeURL, args)
	p.Name = name
	return p
}

// StartProgram runs cmd with args (and env, NAME=VALUE, added) as label,
// and waits until it prints a line starting with ready; the rest of that
// line is its Addr. It is killed when the test ends.
func StartProgram(t testing.TB, cmd Command, label, ready, env string, args ...string) *Proc {
	t.Helper()
	p := start(t, cmd, label, ready, env, args)
	p.Name = label
	return p
}

// start launches the command with args and env added, waits for the line
// that starts with ready (the rest is the address), and kills the process
// when the test ends, showing its log if the test failed.
func start(t testing.TB, cmd Command, label, ready, env string, args []string) *Proc {
	t.Helper()
	spec := launcher.Spec{Label: label, Args: args, Ready: ready} // waits launcher.DefaultTimeout
	if env != "" {
		spec.Env = []string{env}
	}
	lp, err := launcher.Start(cmd, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lp.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", label, lp.Log())
		}
	})
	return &Proc{Proc: lp}
}

// Terminate sends SIGTERM and fails the test unless the process drains and
// exits 0 within 30s.
func (p *Proc) Terminate(t testing.TB) {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to sidecar %s: %v", p.Name, err)
	}
	err, ok := p.WaitExit(30 * time.Second)
	switch {
	case !ok:
		t.Errorf("sidecar %s did not exit within 30s of SIGTERM", p.Name)
	case err != nil:
		t.Errorf("sidecar %s exited with %v after SIGTERM", p.Name, err)
	}
}

// Open opens shard at term for alloc on this sidecar, failing the test if
// the open stream ends without its opened event.
func (p *Proc) Open(t testing.TB, shard string, term int64, alloc string) {
	t.Helper()
	if err := OpenShard(t.Context(), p.Client, shard, term, alloc); err != nil {
		t.Fatalf("open %s term %d on %s: %v", shard, term, p.Name, err)
	}
}

// OpenShard runs an Open and drains its stream (the replayed ops), which
// ends with the opened event once the shard accepts appends.
func OpenShard(ctx context.Context, c sidecarv1connect.SidecarServiceClient, shard string, term int64, alloc string) error {
	_, _, err := sidecarapi.OpenShard(ctx, c, shard, term, alloc)
	return err
}

// Append appends ops to shard and returns the error, if any.
func (p *Proc) Append(ctx context.Context, shard string, ops ...[]byte) error {
	_, err := p.Client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: shard, Ops: ops}))
	return err
}

// ReadAll reads shard's whole lineage and counts each op.
func (p *Proc) ReadAll(ctx context.Context, shard string) (map[string]int, error) {
	st, err := p.Client.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: shard}))
	if err != nil {
		return nil, fmt.Errorf("read %s on %s: %w", shard, p.Name, err)
	}
	defer st.Close()
	read := map[string]int{}
	for st.Receive() {
		for _, op := range st.Msg().GetBatch().GetOps() {
			read[string(op)]++
		}
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("read %s on %s: %w", shard, p.Name, err)
	}
	return read, nil
}

// ReasonOf is the machine-readable reason a sidecar attached to err
// ("fenced", "handed_off", ...), or "" if there is none.
func ReasonOf(err error) string { return sidecarapi.Reason(err) }
