package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/httpauth"
	"github.com/shardfence/shardfence/internal/sidecarapi"
)

// Client talks to one sidecar (and, with WithRedirect, to the sidecars its
// shards are handed off to). It is safe for concurrent use; Close releases
// its streams and connections.
type Client struct {
	cfg  config
	conn *conn

	mu     sync.Mutex
	conns  map[string]*conn // by address: the sidecar's and redirects'
	shards map[shardKey]*Shard
	closed bool
}

// conn is the API of one sidecar address.
type conn struct {
	addr string
	svc  sidecarv1connect.SidecarServiceClient
	tr   *http.Transport
}

type shardKey struct {
	name string
	term int64
}

// Owner is where a shard went in a handoff: the target allocation and, if
// the handoff named it, the target's node.
type Owner struct {
	Allocation string
	Node       string
}

type config struct {
	token         string
	tls           *tls.Config
	linger        time.Duration
	maxBatchBytes int
	maxBatchOps   int
	httpClient    *http.Client
	redirect      func(ctx context.Context, shard string, to Owner) (string, error)
	idleStream    time.Duration
}

// Option configures a Client.
type Option func(*config)

// WithToken sends token as the bearer token of every call (the sidecar's
// --auth-token-file).
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithTLS dials the sidecar over TLS with cfg (its RootCAs for a private
// CA, Certificates for mutual TLS). An https:// address uses TLS with the
// system's roots without it.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithLinger makes a shard's sender wait up to d after the first waiting
// Append for more to join its request (like a Kafka producer's linger).
// Default 0: send what is waiting as soon as the sender is free, which
// already coalesces callers that arrive while a request is being sent.
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithMaxBatch bounds one coalesced request: at most bytes of ops and ops
// ops (defaults 4 MiB and 1,000). A single call larger than that is sent
// alone. Keep them within the sidecar's --max-request-bytes and
// --max-ops-per-append.
func WithMaxBatch(bytes, ops int) Option {
	return func(c *config) { c.maxBatchBytes, c.maxBatchOps = bytes, ops }
}

// WithHTTPClient uses hc instead of the client's own transport (its
// transport must speak HTTP/2 for AppendStream).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithRedirect follows a handoff: when a shard's Append finds it handed off
// to another allocation, resolve names that owner's sidecar address, and
// the calls that were not written are sent there (an unknown outcome is
// still returned as such). Without it, Append returns the handed_off error
// and IsHandedOff names the new owner.
func WithRedirect(resolve func(ctx context.Context, shard string, to Owner) (addr string, err error)) Option {
	return func(c *config) { c.redirect = resolve }
}

// New returns a client of the sidecar at addr: HOST:PORT or
// http://HOST:PORT (h2c), https://HOST[:PORT] (TLS), or unix:///path (h2c
// over a unix socket). It does not dial: the first call does.
func New(addr string, opts ...Option) (*Client, error) {
	cfg := config{maxBatchBytes: 4 << 20, maxBatchOps: 1000, idleStream: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxBatchBytes < 1 || cfg.maxBatchOps < 1 || cfg.linger < 0 {
		return nil, fmt.Errorf("shardfence client: batch bounds must be positive and the linger not negative")
	}
	c := &Client{cfg: cfg, conns: map[string]*conn{}, shards: map[shardKey]*Shard{}}
	cn, err := c.dial(addr)
	if err != nil {
		return nil, err
	}
	c.conn = cn
	c.conns[addr] = cn
	return c, nil
}

// dial makes the API client of addr.
func (c *Client) dial(addr string) (*conn, error) {
	base, socket, secure, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	cn := &conn{addr: addr}
	hc := c.cfg.httpClient
	if hc == nil {
		tr := &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
			// A stream on a connection that silently died is noticed
			// within these, not at the next TCP timeout.
			HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second},
		}
		var d net.Dialer
		if socket != "" {
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", socket)
			}
		} else {
			tr.DialContext = d.DialContext
		}
		tr.Protocols = new(http.Protocols)
		if secure || c.cfg.tls != nil {
			tr.TLSClientConfig = c.cfg.tls
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			tr.Protocols.SetHTTP2(true)
			tr.Protocols.SetHTTP1(true)
			base = strings.Replace(base, "http://", "https://", 1)
		} else {
			// Plain TCP or a unix socket: HTTP/2 with prior knowledge.
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
		cn.tr = tr
		hc = &http.Client{Transport: tr}
	}
	var copts []connect.ClientOption
	if c.cfg.token != "" {
		copts = append(copts, connect.WithInterceptors(httpauth.BearerToken(c.cfg.token)))
	}
	cn.svc = sidecarv1connect.NewSidecarServiceClient(hc, base, copts...)
	return cn, nil
}

// connTo returns the client of addr, dialling it once.
func (c *Client) connTo(addr string) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn := c.conns[addr]; cn != nil {
		return cn, nil
	}
	cn, err := c.dial(addr)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cn
	return cn, nil
}

// parseAddr turns an address into the API's base URL, the unix socket's
// path if any, and whether it asks for TLS.
func parseAddr(addr string) (base, socket string, secure bool, err error) {
	a, err := sidecarapi.ParseAddr(addr)
	if errors.Is(err, sidecarapi.ErrUserInfo) {
		err = fmt.Errorf("%w; pass the token with WithToken", err)
	}
	if err != nil {
		return "", "", false, fmt.Errorf("shardfence client: address %q: %w (use %s)", addr, err, sidecarapi.AddrForms)
	}
	return a.Base, a.Socket, a.Secure, nil
}

// Close ends the client's streams (each answers what it was sent first,
// unless ctx... they are cut) and closes its idle connections. Appends
// waiting to be sent fail as not written; appends in flight end with an
// unknown outcome.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	shards := make([]*Shard, 0, len(c.shards))
	for _, sh := range c.shards {
		shards = append(shards, sh)
	}
	conns := c.conns
	c.mu.Unlock()
	for _, sh := range shards {
		sh.close()
	}
	for _, cn := range conns {
		if cn.tr != nil {
			cn.tr.CloseIdleConnections()
		}
	}
	return nil
}

// API is the sidecar's full API (PublishCheckpoint, handoffs, Close,
// Inspect, GC, ...) over the client's connection.
func (c *Client) API() sidecarv1connect.SidecarServiceClient { return c.conn.svc }

// Open claims the shard at req's term, seals its predecessors, restores
// and opens it (the API's Open): onEvent gets the progress, checkpoint
// files and replayed ops as they stream (nil ignores them); the result is
// where the new term starts. Open is not retried: a retried Open of the
// same shard, term and allocation is safe, so the caller may.
func (c *Client) Open(ctx context.Context, req *sidecarv1.OpenRequest, onEvent func(*sidecarv1.OpenResponse) error) (*sidecarv1.Opened, error) {
	st, err := c.conn.svc.Open(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, apiError("Open", req.GetShard(), err)
	}
	defer st.Close()
	for st.Receive() {
		m := st.Msg()
		if o := m.GetOpened(); o != nil {
			return o, nil
		}
		if onEvent != nil {
			if err := onEvent(m); err != nil {
				return nil, err
			}
		}
	}
	if err := st.Err(); err != nil {
		return nil, apiError("Open", req.GetShard(), err)
	}
	return nil, &Error{Op: "Open", Shard: req.GetShard(), Code: connect.CodeInternal, Err: errors.New("the stream ended without Opened")}
}

// Batch is the ops of one generation, as Read returns them.
type Batch struct {
	Term, Gen, FirstSeqNo int64
	Ops                   [][]byte
}

// readRetries bounds how often Read resumes after a broken connection.
const readRetries = 3

// Read calls fn with the ops of the shard's lineage from fromSeq on, up to
// the last acknowledged op when the read started, at most maxOps in all (0:
// no bound). A connection that breaks is read again from after the last
// batch fn got, so fn sees every op once.
func (c *Client) Read(ctx context.Context, shard string, fromSeq, maxOps int64, fn func(Batch) error) error {
	next, left := fromSeq, maxOps
	for attempt := 0; ; attempt++ {
		st, err := c.conn.svc.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: shard, FromSeq: next, MaxOps: left}))
		if err == nil {
			for st.Receive() {
				b := st.Msg().GetBatch()
				if err := fn(Batch{Term: b.GetTerm(), Gen: b.GetGen(), FirstSeqNo: b.GetFirstSeqNo(), Ops: b.GetOps()}); err != nil {
					st.Close()
					return err
				}
				next = b.GetFirstSeqNo() + int64(len(b.GetOps()))
				if maxOps > 0 {
					left -= int64(len(b.GetOps()))
				}
			}
			err = st.Err()
			st.Close()
			if err == nil {
				return nil
			}
		}
		if attempt >= readRetries || ctx.Err() != nil || !transportFailure(err) || (maxOps > 0 && left <= 0) {
			return apiError("Read", shard, err)
		}
		select {
		case <-time.After(retryDelay(attempt)):
		case <-ctx.Done():
			return apiError("Read", shard, ctx.Err())
		}
	}
}

// Watch calls fn with the events of the shards named (every shard when
// none) until ctx ends, fn fails or the sidecar ends the watch (a watcher
// that falls behind is cut off: watch again and Read what you missed).
func (c *Client) Watch(ctx context.Context, shards []string, fn func(*sidecarv1.WatchResponse) error) error {
	st, err := c.conn.svc.Watch(ctx, connect.NewRequest(&sidecarv1.WatchRequest{Shards: shards}))
	if err != nil {
		return apiError("Watch", "", err)
	}
	defer st.Close()
	for st.Receive() {
		if err := fn(st.Msg()); err != nil {
			return err
		}
	}
	if err := st.Err(); err != nil && ctx.Err() == nil {
		return apiError("Watch", "", err)
	}
	return nil
}

// Status is the shard's status on the sidecar.
func (c *Client) Status(ctx context.Context, shard string) (*sidecarv1.ShardStatus, error) {
	res, err := c.conn.svc.Status(ctx, connect.NewRequest(&sidecarv1.StatusRequest{Shard: shard}))
	if err != nil {
		return nil, apiError("Status", shard, err)
	}
	return res.Msg.GetStatus(), nil
}

// BarrierResult is what a read barrier proved: the sidecar held the
// shard's Term at a point after the call, and every op acknowledged before
// the call has a sequence number below NextSeqNo.
type BarrierResult struct {
	Term      int64
	Gen       int64
	NextSeqNo int64
	// Local: answered inside the lease with no store request (lease mode).
	Local bool
}

// Barrier returns once the sidecar proved, after the call started, that it
// still holds the shard (at term, unless term is 0). A primary that serves
// a read from its state after a successful Barrier, with every op below
// NextSeqNo applied, serves a linearizable read; after a failed one
// (IsFenced: a successor took the shard) it must serve none. Cost: one
// fence key read per barrier, shared by concurrent ones (per_sync,
// create_only, observe), none inside the lease (lease mode).
func (c *Client) Barrier(ctx context.Context, shard string, term int64) (BarrierResult, error) {
	res, err := c.conn.svc.Barrier(ctx, connect.NewRequest(&sidecarv1.BarrierRequest{Shard: shard, ExpectedTerm: term}))
	if err != nil {
		return BarrierResult{}, apiError("Barrier", shard, err)
	}
	m := res.Msg
	return BarrierResult{Term: m.GetTerm(), Gen: m.GetGen(), NextSeqNo: m.GetNextSeqNo(), Local: m.GetLocal()}, nil
}

// callRetry paces a call's retries: 25ms doubling, at most 1s.
var callRetry = backoff.Policy{Initial: 25 * time.Millisecond, Max: time.Second}

// retryDelay is the wait before retry attempt n (counting from 0).
func retryDelay(n int) time.Duration { return callRetry.Delay(n + 1) }
