package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/sidecar"
)

// clientFlags are the flags every sidecar client command shares.
type clientFlags struct {
	addr, tokenFile, caCert, shard string
	asJSON                         bool
	timeout                        time.Duration
}

func addClientFlags(fs *flag.FlagSet, withShard bool) *clientFlags {
	c := &clientFlags{}
	def := os.Getenv(envPrefix + "ADDR")
	if def == "" {
		def = "127.0.0.1:7400"
	}
	fs.StringVar(&c.addr, "addr", def, "sidecar address: HOST:PORT, http(s)://HOST:PORT or unix:///path (env SHARDFENCE_ADDR)")
	fs.StringVar(&c.tokenFile, "auth-token-file", os.Getenv(envPrefix+"AUTH_TOKEN_FILE"), "file holding the sidecar's bearer token")
	fs.StringVar(&c.caCert, "ca-cert", "", "CA bundle (PEM) to verify an HTTPS sidecar with")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "give up after this long")
	if withShard {
		fs.StringVar(&c.shard, "shard", "", "shard id (required)")
	}
	return c
}

func (c *clientFlags) check(fs *flag.FlagSet, withShard bool) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if withShard && c.shard == "" {
		return fmt.Errorf("%w: --shard is required", errUsage)
	}
	return nil
}

// dial returns a client of the sidecar at c.addr.
func (c *clientFlags) dial() (sidecarv1connect.SidecarServiceClient, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	base := c.addr
	switch {
	case strings.HasPrefix(base, "unix://"):
		path := strings.TrimPrefix(base, "unix://")
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		base = "http://sidecar"
	case strings.HasPrefix(base, "http://"), strings.HasPrefix(base, "https://"):
	default:
		base = "http://" + base
	}
	if c.caCert != "" {
		pem, err := os.ReadFile(c.caCert)
		if err != nil {
			return nil, fmt.Errorf("%w: --ca-cert: %v", errUsage, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --ca-cert %s holds no PEM certificate", errUsage, c.caCert)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var opts []connect.ClientOption
	if c.tokenFile != "" {
		tok, err := readToken(c.tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, connect.WithInterceptors(sidecar.BearerToken(tok)))
	}
	return sidecarv1connect.NewSidecarServiceClient(&http.Client{Transport: tr}, base, opts...), nil
}

// remoteErr turns an API error into one line that keeps the sidecar's
// message and, when fenced, the successor term.
func remoteErr(addr string, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("sidecar %s: %w", addr, err)
	}
	msg := fmt.Sprintf("sidecar %s: %s: %s", addr, ce.Code(), ce.Message())
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*sidecarv1.ErrorDetail); ok && ed.GetReason() != "" {
				msg += " [" + ed.GetReason() + "]"
			}
		}
	}
	if ce.Code() == connect.CodeUnavailable && strings.Contains(ce.Message(), "connection refused") {
		msg += " (is `shardfence serve` running there?)"
	}
	return errors.New(msg)
}

// printJSON writes m as one line of protobuf JSON.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func printStatus(w io.Writer, s *sidecarv1.ShardStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cas := "never"
	if s.GetLastCasAgeMs() >= 0 {
		cas = (time.Duration(s.GetLastCasAgeMs()) * time.Millisecond).String() + " ago"
	}
	fenced := "no"
	if s.GetFenced() {
		fenced = "yes"
		if s.GetSuccessorTerm() > 0 {
			fenced = fmt.Sprintf("yes, by term %d", s.GetSuccessorTerm())
		}
	}
	rows := [][2]string{
		{"shard", s.GetShard()}, {"state", s.GetState()}, {"term", fmt.Sprint(s.GetTerm())},
		{"allocation", s.GetAllocationId()}, {"owner", s.GetOwner()}, {"gen", fmt.Sprint(s.GetGen())},
		{"next seq", fmt.Sprint(s.GetNextSeqNo())}, {"last CAS", cas}, {"fenced", fenced},
		{"syncs", fmt.Sprint(s.GetSyncs())}, {"ops", fmt.Sprint(s.GetOps())}, {"bytes", fmt.Sprint(s.GetBytes())},
		{"mode", strings.ToLower(strings.TrimPrefix(s.GetSettings().GetMode().String(), "FENCING_MODE_"))},
		{"ack order", strings.ToLower(strings.TrimPrefix(s.GetSettings().GetAckOrder().String(), "ACK_ORDER_"))},
	}
	if s.GetError() != "" {
		rows = append(rows, [2]string{"error", s.GetError()})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
}
