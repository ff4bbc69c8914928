package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/harness/demo"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// writeCert writes a certificate for 127.0.0.1 signed by ca (self-signed
// when ca is nil) and returns its cert and key paths.
func writeCert(t *testing.T, dir, name string, ca *tls.Certificate) (string, string, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	parent, signer := tmpl, any(key)
	if ca == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		parent, signer = ca.Leaf, ca.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pair.Leaf, _ = x509.ParseCertificate(der)
	return certPath, keyPath, pair
}

// Off loopback the sidecar takes TLS, a client CA for mutual TLS and a
// bearer token; a client without a certificate is turned away by the
// handshake, one with it reaches the API.
func TestServeMutualTLSWithToken(t *testing.T) {
	dir := t.TempDir()
	caCert, _, ca := writeCert(t, dir, "ca", nil)
	srvCert, srvKey, _ := writeCert(t, dir, "server", &ca)
	_, _, cli := writeCert(t, dir, "client", &ca)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startServe(t, "--store", "mem://tls", "--listen", "127.0.0.1:0", "--auth-token-file", tok,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caCert)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)

	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if _, err := noCert.Get("https://" + addr + "/healthz"); err == nil {
		t.Fatal("a client without a certificate got through mutual TLS")
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cli}}}}
	res, err := withCert.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	c := sidecarv1connect.NewSidecarServiceClient(withCert, "https://"+addr)
	_, err = c.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
		t.Fatalf("mTLS without the token: %v", err)
	}
}

// gRPC clients reach the same handlers over h2c on loopback.
func TestServeAnswersGRPC(t *testing.T) {
	addr, _ := startServe(t, "--store", "file://"+t.TempDir(), "--listen", "127.0.0.1:0")
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: tr}
	c := sidecarv1connect.NewSidecarServiceClient(h2c, "http://"+addr, connect.WithGRPC())
	if _, _, err := demo.OpenShard(t.Context(), c, "g", 1, "a"); err != nil {
		t.Fatalf("open over gRPC: %v", err)
	}
	res, err := c.Append(t.Context(), connect.NewRequest(&sidecarv1.AppendRequest{Shard: "g", Ops: [][]byte{[]byte("x")}}))
	if err != nil || res.Msg.GetCount() != 1 {
		t.Fatalf("append over gRPC: %v %v", res, err)
	}
	_, err = c.Append(t.Context(), connect.NewRequest(&sidecarv1.AppendRequest{Shard: "../g", Ops: [][]byte{[]byte("x")}}))
	if sidecarproc.ReasonOf(err) != "invalid_argument" || connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad shard over gRPC: %v", err)
	}
	if !strings.Contains(err.Error(), "shard id") {
		t.Errorf("gRPC error message lost its detail: %v", err)
	}
}
