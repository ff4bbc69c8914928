package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/translog"
)

func TestServeConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(cfg, []byte("store: mem://from-file\nlisten: 127.0.0.1:1111\nnode: file-node\nmax-op-bytes: 100\nfencing-mode: lease\nlease-interval: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SHARDFENCE_NODE": "env-node", "SHARDFENCE_MAX_OP_BYTES": "200"}
	fs, f := serveFlagSet(os.Stderr)
	if err := loadConfig(fs, []string{"--config", cfg, "--max-op-bytes", "300"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if f.store != "mem://from-file" || f.listen != "127.0.0.1:1111" || f.node != "env-node" || f.limits.MaxOpBytes != 300 ||
		f.mode != "lease" || f.defaults.LeaseInterval != 3*time.Second {
		t.Fatalf("config: store %q listen %q node %q max-op-bytes %d mode %q lease %v", f.store, f.listen, f.node, f.limits.MaxOpBytes, f.mode, f.defaults.LeaseInterval)
	}
	if err := os.WriteFile(cfg, []byte("stor: typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, _ = serveFlagSet(os.Stderr)
	if err := loadConfig(fs, []string{"--config", cfg}, func(string) string { return "" }); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `"stor"`) {
		t.Fatalf("unknown config key: %v", err)
	}
	fs, _ = serveFlagSet(os.Stderr)
	if err := loadConfig(fs, nil, func(k string) string {
		if k == "SHARDFENCE_MAX_OP_BYTES" {
			return "lots"
		}
		return ""
	}); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "SHARDFENCE_MAX_OP_BYTES") {
		t.Fatalf("bad environment value: %v", err)
	}
}

func TestServeRefusesUnsafeListen(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "mem://x", "--listen", "0.0.0.0:0"}, "--auth-token-file"},
		{[]string{"--store", "mem://x", "--listen", "127.0.0.1:0", "--tls-cert", "c.pem"}, "--tls-key"},
		{[]string{"--listen", "127.0.0.1:0"}, "--store is required"},
		{[]string{"--store", "mem://x", "--fencing-mode", "sometimes"}, "fencing mode"},
		{[]string{"--store", "mem://x", "--cache-block-bytes", "3000"}, "cache block 3000 bytes: a power of two"},
		{[]string{"--store", "mem://x", "--cache-bytes", "1048576", "--cache-block-bytes", "1048576"}, "fewer than two blocks"},
		{[]string{"--store", "mem://x", "--cache-dir", "/nonexistent/cache"}, "cache-dir"},
		{[]string{"--store", "mem://x", "--warm-hydrate-parallelism", "-2"}, "hydrate parallelism"},
	} {
		var out, errOut syncBuffer
		err := runServe(t.Context(), c.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want a usage error about %s", c.args, err, c.want)
		}
	}
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	if err := runServe(t.Context(), []string{"--store", "mem://x", "--auth-token-file", tok}, &out, &errOut); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("short token: %v", err)
	}
}

// startServe runs the serve command in-process until the test ends and
// returns its address.
func startServe(t *testing.T, args ...string) (string, func() error) {
	t.Helper()
	addr, stop, _ := startServeLogs(t, args...)
	return addr, stop
}

// startServeLogs is startServe that also returns serve's stderr (its log).
func startServeLogs(t *testing.T, args ...string) (string, func() error, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, args, &out, &errOut) }()
	re := regexp.MustCompile(`listening on (\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve exited early: %v; stderr: %s", err, errOut.String())
		default:
		}
	}
	if addr == "" {
		cancel()
		t.Fatalf("serve did not report its address; stderr: %s", errOut.String())
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				stopErr = errors.New("serve did not stop within 30s")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return addr, stop, &errOut
}

func TestServeOverUnixSocketWithJSONLogsAndMetrics(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sc.sock")
	addr, stop := startServe(t, "--store", "file://"+t.TempDir(), "--listen", "unix://"+sock)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	cf := &clientFlags{addr: addr, timeout: 10 * time.Second}
	client, err := cf.dial()
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "nope"}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound {
		t.Fatalf("status of an unknown shard over the socket: %v", err)
	}
	var out, errOut syncBuffer
	err = runStatus(t.Context(), []string{"--addr", addr, "--shard", "nope"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "not_found") && !strings.Contains(err.Error(), "[not_open]") {
		t.Fatalf("status command on an unknown shard: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve exited with %v after its context ended", err)
	}
}

func TestServeWithTokenOnTCP(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startServe(t, "--store", "mem://tok", "--listen", "127.0.0.1:0", "--auth-token-file", tok)
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without token: %d", res.StatusCode)
	}
	c := sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, "http://"+addr)
	_, err = c.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
		t.Errorf("status without token: %v", err)
	}
	var out, errOut syncBuffer
	err = runStatus(t.Context(), []string{"--addr", addr, "--auth-token-file", tok, "--shard", "s"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "not_open") {
		t.Errorf("status with token: %v", err)
	}
}

func TestParseModeAndOrder(t *testing.T) {
	if m, err := parseMode("lease"); err != nil || m != translog.Lease {
		t.Errorf("lease: %v %v", m, err)
	}
	if o, err := parseAckOrder("sequenced"); err != nil || o != translog.Sequenced {
		t.Errorf("sequenced: %v %v", o, err)
	}
	if _, err := parseAckOrder("random"); !errors.Is(err, errUsage) {
		t.Errorf("random ack order: %v", err)
	}
}
