package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// bufCurl runs `buf curl` (a third-party gRPC client, installed by `make
// tools`) with args and returns its stdout.
func bufCurl(t *testing.T, buf string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, buf, append([]string{"curl"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String(), &bufError{err: err, stderr: errOut.String()}
	}
	return out.String(), nil
}

type bufError struct {
	err    error
	stderr string
}

func (e *bufError) Error() string { return e.err.Error() + ": " + e.stderr }

// The gRPC ecosystem's endpoints answer a real third-party client against
// a real `shardfence serve`: server reflection (listing the services and
// describing the API to buf curl, which reads the schema from it) and the
// health checking protocol for the process, the sidecar's readiness and
// one shard, over gRPC with HTTP/2 prior knowledge as Kubernetes probes
// and grpc-health-probe speak it. The health checks need no token; the
// API and reflection do.
func TestGRPCHealthAndReflectionAnswerBufCurl(t *testing.T) {
	buf, err := testservers.Tool("buf")
	if err != nil {
		testservers.Unavailable(t, "buf", err)
		return
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("grpc-ecosystem-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := spawn(t, "sidecar", "sidecar listening on ", nil, "serve", "--store", "file://"+t.TempDir(), "--listen", "127.0.0.1:0", "--auth-token-file", tokenFile)
	base := "http://" + p.addr
	auth := []string{"-H", "Authorization: Bearer grpc-ecosystem-token-0123456789", "--reflect-header", "Authorization: Bearer grpc-ecosystem-token-0123456789"}
	grpc := []string{"--protocol", "grpc", "--http2-prior-knowledge"}

	out, err := bufCurl(t, buf, append(append(append([]string{}, grpc...), auth...), "--list-services", base)...)
	if err != nil {
		t.Fatalf("list services by reflection: %v", err)
	}
	for _, svc := range []string{"shardfence.sidecar.v1.SidecarService", "grpc.health.v1.Health"} {
		if !strings.Contains(out, svc) {
			t.Errorf("reflection lists %q, want %s", out, svc)
		}
	}
	if _, err := bufCurl(t, buf, append(append([]string{}, grpc...), "--list-services", base)...); err == nil || !strings.Contains(err.Error(), "not authenticated") {
		t.Errorf("reflection without the token: %v", err)
	}

	check := func(service string) (string, error) {
		// Probes carry no token: the health checks answer without one.
		// buf curl reads the health service's schema by reflection,
		// which needs it.
		args := append(append([]string{}, grpc...), "--reflect-header", "Authorization: Bearer grpc-ecosystem-token-0123456789")
		args = append(args, "-d", `{"service":"`+service+`"}`, base+"/grpc.health.v1.Health/Check")
		out, err := bufCurl(t, buf, args...)
		if err != nil {
			return "", err
		}
		var res struct{ Status string }
		if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
			t.Fatalf("health answer %q: %v", out, jerr)
		}
		return res.Status, nil
	}
	for _, svc := range []string{"", "shardfence.sidecar.v1.SidecarService"} {
		if st, err := check(svc); err != nil || st != "SERVING" {
			t.Errorf("health of %q: %q, %v", svc, st, err)
		}
	}
	if _, err := check("shardfence.sidecar.v1.SidecarService/s1"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("health of a shard not open here: %v, want not_found", err)
	}

	c, err := client.New(p.addr, client.WithToken("grpc-ecosystem-token-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Open(t.Context(), &sidecarv1.OpenRequest{Shard: "s1", Term: 1, AllocationId: "a1"}, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := check("shardfence.sidecar.v1.SidecarService/s1"); err != nil || st != "SERVING" {
		t.Errorf("health of an open shard: %q, %v", st, err)
	}
	if _, err := c.API().Close(t.Context(), connect.NewRequest(&sidecarv1.CloseRequest{Shard: "s1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := check("shardfence.sidecar.v1.SidecarService/s1"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("health of a closed shard: %v, want not_found", err)
	}

	// A unary call and the append stream through buf curl, by reflection.
	if _, err := c.Open(t.Context(), &sidecarv1.OpenRequest{Shard: "s2", Term: 1, AllocationId: "a1"}, nil); err != nil {
		t.Fatal(err)
	}
	out, err = bufCurl(t, buf, append(append(append([]string{}, grpc...), auth...), "-d",
		`{"shard":"s2","request_id":1,"ops":["aGk="]} {"request_id":2,"ops":["aG8="]}`, base+"/shardfence.sidecar.v1.SidecarService/AppendStream")...)
	if err != nil || !strings.Contains(out, `"requestId": "2"`) || !strings.Contains(out, `"firstSeqNo": "1"`) {
		t.Errorf("AppendStream through buf curl: %q, %v", out, err)
	}
}
