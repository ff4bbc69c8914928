package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/sidecarapi"
	"github.com/shardfence/shardfence/sidecar"
)

// clientFlags are the flags every sidecar client command shares.
type clientFlags struct {
	addr, tokenFile, caCert, shard string
	asJSON                         bool
	timeout                        time.Duration
}

// maxClientTimeout bounds --timeout.
const maxClientTimeout = 24 * time.Hour

func addClientFlags(fs *flag.FlagSet, withShard bool) *clientFlags {
	c := &clientFlags{}
	fs.StringVar(&c.addr, "addr", envOr("ADDR", "127.0.0.1:7400"), "sidecar address: HOST:PORT, http(s)://HOST[:PORT] or unix:///path (env SHARDFENCE_ADDR)")
	fs.StringVar(&c.tokenFile, "auth-token-file", os.Getenv(envPrefix+"AUTH_TOKEN_FILE"), "file holding the sidecar's bearer token (env SHARDFENCE_AUTH_TOKEN_FILE)")
	fs.StringVar(&c.caCert, "ca-cert", "", "CA bundle (PEM) to verify an HTTPS sidecar with")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "give up after this long (more than 0, at most 24h)")
	if withShard {
		fs.StringVar(&c.shard, "shard", "", "shard id (required)")
	}
	return c
}

func (c *clientFlags) check(fs *flag.FlagSet, withShard bool) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, clipArg(fs.Arg(0)))
	case withShard && c.shard == "":
		return fmt.Errorf("%w: --shard is required", errUsage)
	case c.timeout <= 0 || c.timeout > maxClientTimeout:
		return fmt.Errorf("%w: --timeout %v is outside (0, %v]", errUsage, c.timeout, maxClientTimeout)
	}
	_, _, err := sidecarBase(c.addr)
	return err
}

// clipArg bounds what a usage error repeats of an argument.
func clipArg(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// sidecarBase turns --addr into the base URL of the API and, for a unix
// socket, its path (sidecarapi.ParseAddr: a bare HOST without a port is
// refused, and so is user info: credentials go in --auth-token-file).
func sidecarBase(addr string) (base, socket string, err error) {
	a, err := sidecarapi.ParseAddr(addr)
	if errors.Is(err, sidecarapi.ErrUserInfo) {
		err = fmt.Errorf("%w; pass the token with --auth-token-file", err)
	}
	if err != nil {
		return "", "", fmt.Errorf("%w: --addr: %v (use %s)", errUsage, err, sidecarapi.AddrForms)
	}
	return a.Base, a.Socket, nil
}

// dial returns a client of the sidecar at c.addr.
func (c *clientFlags) dial() (sidecarv1connect.SidecarServiceClient, error) {
	base, socket, err := sidecarBase(c.addr)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if socket != "" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
	}
	if c.caCert != "" {
		pool, err := loadCAs("--ca-cert", c.caCert)
		if err != nil {
			return nil, err
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
// message, the stable reason and what to do about a missing token or a
// sidecar that is not there.
func (c *clientFlags) remoteErr(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("sidecar %s: %w", c.addr, err)
	}
	msg := fmt.Sprintf("sidecar %s: %s: %s", c.addr, ce.Code(), ce.Message())
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*sidecarv1.ErrorDetail); ok && ed.GetReason() != "" {
				msg += " [" + ed.GetReason() + "]"
			}
		}
	}
	switch {
	case ce.Code() == connect.CodeUnauthenticated && c.tokenFile == "":
		msg += " (the sidecar wants a token: pass --auth-token-file FILE or set SHARDFENCE_AUTH_TOKEN_FILE)"
	case ce.Code() == connect.CodeUnauthenticated:
		msg += fmt.Sprintf(" (the sidecar refused the token in %s)", c.tokenFile)
	case ce.Code() == connect.CodeUnavailable && strings.Contains(ce.Message(), "connection refused"):
		msg += " (is `shardfence serve` running there?)"
	}
	return errors.New(msg)
}

// clientCmd is one sidecar client command: its own flags, and what it
// does with a connected client. runClient does the rest, the same way for
// every command.
type clientCmd struct {
	name      string
	withShard bool
	// shardOptional: --shard may be left out (status lists every shard
	// then).
	shardOptional bool
	// flags adds the command's own flags; the returned check (optional)
	// validates them after parsing.
	flags func(fs *flag.FlagSet) func() error
	// perCall: run bounds each call by --timeout itself (append);
	// otherwise the whole run is.
	perCall bool
	run     func(ctx context.Context, e *clientEnv) error
}

// clientEnv is what a client command runs with.
type clientEnv struct {
	*clientFlags
	client         sidecarv1connect.SidecarServiceClient
	stdin          io.Reader
	stdout, stderr io.Writer
}

// runClient parses args, dials the sidecar and runs cmd; API errors come
// back as one line (remoteErr).
func runClient(ctx context.Context, cmd clientCmd, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags(cmd.name, stdout)
	c := addClientFlags(fs, cmd.withShard)
	var check func() error
	if cmd.flags != nil {
		check = cmd.flags(fs)
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if err := c.check(fs, cmd.withShard && !cmd.shardOptional); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	if !cmd.perCall {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	err = cmd.run(ctx, &clientEnv{clientFlags: c, client: client, stdin: stdin, stdout: stdout, stderr: stderr})
	var ce *connect.Error
	if errors.As(err, &ce) {
		return c.remoteErr(err)
	}
	return err
}

// output prints m as JSON with --json, else calls text.
func (e *clientEnv) output(m proto.Message, text func(w io.Writer)) error {
	if e.asJSON {
		return printJSON(e.stdout, m)
	}
	text(e.stdout)
	return nil
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

// printable shows s as it is when every character is printable, else
// quoted with escapes: a name or message never moves the cursor or turns
// the text around on an operator's terminal.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.QuoteToGraphic(s)
		}
	}
	return s
}

func ago(ms int64) string {
	if ms < 0 {
		return "never"
	}
	return (time.Duration(ms) * time.Millisecond).String() + " ago"
}

func printStatus(w io.Writer, s *sidecarv1.ShardStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fenced := "no"
	if s.GetFenced() {
		fenced = "yes"
		if s.GetSuccessorTerm() > 0 {
			fenced = fmt.Sprintf("yes, by term %d", s.GetSuccessorTerm())
		}
	}
	health := s.GetStoreHealth()
	if health == "" {
		health = "ok"
	}
	if s.GetRetryingMs() > 0 {
		health += fmt.Sprintf(" (syncs retrying store errors for %v)", time.Duration(s.GetRetryingMs())*time.Millisecond)
	}
	rows := [][2]string{
		{"shard", s.GetShard()}, {"state", s.GetState()}, {"term", fmt.Sprint(s.GetTerm())},
		{"allocation", s.GetAllocationId()}, {"owner", s.GetOwner()}, {"gen", fmt.Sprint(s.GetGen())},
		{"next seq", fmt.Sprint(s.GetNextSeqNo())}, {"last CAS", ago(s.GetLastCasAgeMs())}, {"fenced", fenced},
		{"store health", health}, {"last sync", ago(s.GetLastSyncAgeMs())},
		{"syncs", fmt.Sprint(s.GetSyncs())}, {"ops", fmt.Sprint(s.GetOps())}, {"bytes", fmt.Sprint(s.GetBytes())},
		{"backlog", fmt.Sprintf("%d bytes, %d generations after the newest checkpoint (a takeover replays them)", s.GetReplayBacklogBytes(), s.GetReplayBacklogGens())},
	}
	ckpt := "none"
	if s.GetCheckpointGen() > 0 {
		ckpt = fmt.Sprintf("generation %d, %s", s.GetCheckpointGen(), ago(s.GetCheckpointAgeMs()))
	}
	if g := s.GetCheckpointRequestedGen(); g > 0 {
		ckpt += fmt.Sprintf("; one covering generation %d requested through Watch", g)
	}
	rows = append(rows, [2]string{"checkpoint", ckpt})
	if s.GetLocality() != "" {
		writes := "open"
		if s.GetReplaying() {
			writes = "refused until the replay ends"
		}
		pct := 100.0
		if s.GetCheckpointBytesTotal() > 0 {
			pct = 100 * float64(s.GetCheckpointBytesLocal()) / float64(s.GetCheckpointBytesTotal())
		}
		rows = append(rows, [2]string{"locality", s.GetLocality()}, [2]string{"appends", writes},
			[2]string{"checkpoint local", fmt.Sprintf("%d of %d bytes (%.0f%%)", s.GetCheckpointBytesLocal(), s.GetCheckpointBytesTotal(), pct)},
			[2]string{"block cache", fmt.Sprintf("%d hits, %d misses", s.GetCacheHits(), s.GetCacheMisses())},
			[2]string{"on-demand fetches", fmt.Sprintf("%d (p50 %v, p99 %v)", s.GetFetches(), time.Duration(s.GetFetchP50Us())*time.Microsecond, time.Duration(s.GetFetchP99Us())*time.Microsecond)})
		if s.GetWarmError() != "" {
			rows = append(rows, [2]string{"warm error", s.GetWarmError()})
		}
	}
	if s.GetLastStoreError() != "" {
		rows = append(rows, [2]string{"store error", fmt.Sprintf("%s (%s, %d retried)", s.GetLastStoreError(), ago(s.GetLastStoreErrorAgeMs()), s.GetStoreRetries())})
	}
	if s.GetFencingObserved() != "" {
		rows = append(rows, [2]string{"fencing observed", fmt.Sprintf("%d acknowledged syncs per_sync would have failed (first refused CAS: %s)", s.GetFencingObservedSyncs(), s.GetFencingObserved())})
	}
	rows = append(rows, settingsRows(s.GetSettings())...)
	if s.GetError() != "" {
		rows = append(rows, [2]string{"error", s.GetError()})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], printable(r[1]))
	}
	tw.Flush()
}

// settingsRows are a shard's settings as status shows them; the fencing
// (mode and lease) is the shard's stored one.
func settingsRows(st *sidecarv1.ShardSettings) [][2]string {
	mode := strings.ToLower(strings.TrimPrefix(st.GetMode().String(), "FENCING_MODE_"))
	if st.GetFencingDisabled() {
		mode = "disabled (unfenced)"
	} else if st.GetMode() == sidecarv1.FencingMode_FENCING_MODE_LEASE {
		mode += fmt.Sprintf(" (%v)", time.Duration(st.GetLeaseIntervalMs())*time.Millisecond)
	}
	gather := (time.Duration(st.GetMaxGatherDelayUs()) * time.Microsecond).String()
	if st.GetMaxGatherDelayUs() < 0 {
		gather = "off"
	}
	return [][2]string{
		{"mode", mode},
		{"ack order", strings.ToLower(strings.TrimPrefix(st.GetAckOrder().String(), "ACK_ORDER_"))},
		{"settings", fmt.Sprintf("inline limit %d, max sync bytes %d, max in-flight bytes %d, max pipeline %d, max gather delay %s, freshness %v, retention %d gens",
			st.GetInlineLimitBytes(), st.GetMaxSyncBytes(), st.GetMaxInFlightBytes(), st.GetMaxPipeline(), gather,
			time.Duration(st.GetFreshnessIntervalMs())*time.Millisecond, st.GetRetentionGens())},
	}
}
