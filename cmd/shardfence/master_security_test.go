package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/httpauth"
)

// The master has the sidecar's security model: off loopback it refuses
// to start without a token; with a token, TLS and a client CA, a sidecar
// without the right token or certificate cannot register (so it can
// neither ping nor take a shard), /metrics needs the token, and one with
// both registers.
func TestMasterSecurityForSidecars(t *testing.T) {
	var out, errOut syncBuffer
	err := runMaster(t.Context(), []string{"--listen", "0.0.0.0:0"}, &out, &errOut)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--auth-token-file") {
		t.Fatalf("a public master without a token: %v", err)
	}

	dir := t.TempDir()
	caCert, _, ca := writeCert(t, dir, "ca", nil)
	srvCert, srvKey, _ := writeCert(t, dir, "server", &ca)
	cliCert, cliKey, cli := writeCert(t, dir, "client", &ca)
	tok, wrong := filepath.Join(dir, "token"), filepath.Join(dir, "wrong")
	if err := os.WriteFile(tok, []byte("the-master-token-0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrong, []byte("not-the-token-987654"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := thisBinary()
	m, err := startFleetProc(c, "master", "master listening on ", nil, "master", "--listen", "127.0.0.1:0", "--store", "file://"+filepath.Join(dir, "m"),
		"--cluster", "sec", "--auth-token-file", tok, "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caCert)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.kill)
	base := "https://" + m.addr
	side := func(name string, extra ...string) *fleetProc {
		args := append([]string{"serve", "--store", "file://" + filepath.Join(dir, "s"), "--listen", "127.0.0.1:0", "--node", name, "--master", base, "--master-ca-cert", caCert}, extra...)
		p, err := startFleetProc(c, "sidecar "+name, "sidecar listening on ", nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.kill)
		return p
	}
	side("good", "--master-token-file", tok, "--master-client-cert", cliCert, "--master-client-key", cliKey)
	bad := side("badtoken", "--master-token-file", wrong, "--master-client-cert", cliCert, "--master-client-key", cliKey)
	nocert := side("nocert", "--master-token-file", tok)

	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cli}}}}
	admin := masterv1connect.NewMasterFleetServiceClient(hc, base, connect.WithInterceptors(httpauth.BearerToken("the-master-token-0123")))
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := admin.ListNodes(t.Context(), connect.NewRequest(&masterv1.ListNodesRequest{}))
		if err == nil && len(res.Msg.GetNodes()) == 1 && res.Msg.GetNodes()[0].GetName() == "good" && res.Msg.GetNodes()[0].GetState() == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes: %v %v\nmaster log:\n%s", res, err, tail(m.Log(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for !strings.Contains(bad.Log(), "unauthenticated") || !strings.Contains(bad.Log(), "refused this sidecar's credentials") || !strings.Contains(nocert.Log(), "TLS handshake with the master failed") {
		if time.Now().After(deadline) {
			t.Fatalf("the refused sidecars do not say why:\n%s\n%s", tail(bad.Log(), 5), tail(nocert.Log(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	res, err := admin.ListNodes(t.Context(), connect.NewRequest(&masterv1.ListNodesRequest{}))
	if err != nil || len(res.Msg.GetNodes()) != 1 {
		t.Fatalf("a sidecar without the right credentials registered: %v %v", res, err)
	}
	if _, err := admin.AssignShard(t.Context(), connect.NewRequest(&masterv1.AssignShardRequest{Shard: "s", Node: "badtoken", AutoRestore: true})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("assign to the refused sidecar: %v", err)
	}
	// /metrics needs the token; /healthz does not.
	for path, want := range map[string]int{"/metrics": http.StatusUnauthorized, "/healthz": http.StatusOK} {
		r, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != want {
			t.Errorf("%s without the token: %d, want %d", path, r.StatusCode, want)
		}
	}
	// An admin call without the token is refused too.
	noTok := masterv1connect.NewMasterFleetServiceClient(hc, base)
	if _, err := noTok.ListShards(t.Context(), connect.NewRequest(&masterv1.ListShardsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("admin call without the token: %v", err)
	}
}
