package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/harness/testservers"
	"github.com/shardfence/shardfence/internal/reqlimit"
)

// logBuffer collects log lines for a test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func jsonLogger(w *logBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func openWith(t *testing.T, c interface {
	Open(context.Context, *connect.Request[sidecarv1.OpenRequest]) (*connect.ServerStreamForClient[sidecarv1.OpenResponse], error)
}, req *sidecarv1.OpenRequest) error {
	t.Helper()
	st, err := c.Open(t.Context(), connect.NewRequest(req))
	if err != nil {
		return err
	}
	for st.Receive() {
	}
	return st.Err()
}

// Every duration setting has a range; values outside it, and values whose
// unit conversion would overflow, are refused instead of stored or turned
// into something else (2^63-1 microseconds of gather delay used to come
// back as -1, disabled; an 87600h lease bricked the shard).
func TestSettingsOutOfRangeAreInvalidArgument(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	for name, s := range map[string]*sidecarv1.ShardSettings{
		"gather delay 2^63-1 us":   {MaxGatherDelayUs: math.MaxInt64},
		"gather delay 2s":          {MaxGatherDelayUs: 2e6},
		"lease 87600h":             {Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, LeaseIntervalMs: (87600 * time.Hour).Milliseconds()},
		"lease 2^63-1 ms":          {Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, LeaseIntervalMs: math.MaxInt64},
		"lease 1ms":                {Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, LeaseIntervalMs: 1},
		"negative lease":           {LeaseIntervalMs: -5},
		"freshness 2^63-1 ms":      {FreshnessIntervalMs: math.MaxInt64},
		"freshness 1h":             {FreshnessIntervalMs: time.Hour.Milliseconds()},
		"max sync bytes 2^62":      {MaxSyncBytes: 1 << 62},
		"max in-flight bytes 2^62": {MaxInFlightBytes: 1 << 62},
		"pipeline 65":              {MaxPipeline: 65},
		"retention 2^62":           {RetentionGens: 1 << 62},
	} {
		err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "r", Term: 1, AllocationId: "a", Settings: s})
		code, d := detailOf(t, err)
		if code != connect.CodeInvalidArgument || d.GetReason() != "invalid_argument" {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	// Negative gather delay disables it and reads back as -1.
	err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "g", Term: 1, AllocationId: "a", Settings: &sidecarv1.ShardSettings{MaxGatherDelayUs: -7}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "g"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetStatus().GetSettings().GetMaxGatherDelayUs(); got != -1 {
		t.Errorf("disabled gather delay reads back as %d, want -1", got)
	}
	// A sidecar's defaults have the same ranges.
	for _, d := range []Settings{{LeaseInterval: 87600 * time.Hour}, {FreshnessInterval: time.Hour}, {MaxGatherDelay: time.Minute}} {
		if _, err := New(t.Context(), mem.New(), Options{Defaults: d}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("defaults %v: %v, want invalid argument", d, err)
		}
	}
	if _, err := New(t.Context(), mem.New(), Options{StallAfter: time.Hour}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("stall-after 1h: %v", err)
	}
}

// Terms have headroom: above MaxTerm an Open is invalid; at MaxTerm it
// opens, and a lower term fenced by it is told the shard cannot fail over
// again rather than to pick a higher term.
func TestTermAboveTheMaximumIsRefused(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	for _, term := range []int64{MaxTerm + 1, math.MaxInt64, 0, -1} {
		err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "t", Term: term, AllocationId: "a"})
		if code, _ := detailOf(t, err); code != connect.CodeInvalidArgument || !strings.Contains(err.Error(), fmt.Sprint(int64(MaxTerm))) {
			t.Errorf("term %d: %v, want invalid argument naming the maximum", term, err)
		}
	}
	if err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "t", Term: MaxTerm, AllocationId: "a"}); err != nil {
		t.Fatalf("term MaxTerm: %v", err)
	}
	if got := openHint(&fence.FencedError{Shard: "t", Term: 5, Successor: MaxTerm}, 5); !strings.Contains(got, "can no longer fail over") {
		t.Errorf("hint when fenced by the maximum term: %q", got)
	}
}

// A name of any size is refused with an error of bounded size, and so is
// every log line about it; allocation ids are at most 255 printable bytes.
func TestHugeAndUnprintableNamesAreRefusedWithBoundedEchoes(t *testing.T) {
	var logs logBuffer
	e := newEnv(t, Options{Logger: jsonLogger(&logs)}, HandlerOptions{})
	huge := strings.Repeat("n", 4<<20)
	err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: huge, Term: 1, AllocationId: "a"})
	code, d := detailOf(t, err)
	if code != connect.CodeInvalidArgument || len(err.Error()) > 2048 || len(d.GetShard()) > 256 {
		t.Fatalf("open of a 4 MiB shard name: code %v, %d-byte message, %d-byte detail shard", code, len(err.Error()), len(d.GetShard()))
	}
	if err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "ok", Term: 1, AllocationId: huge}); err == nil || len(err.Error()) > 2048 {
		t.Fatalf("open with a 4 MiB allocation: %d-byte message", len(fmt.Sprint(err)))
	}
	_, err = e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: huge}))
	if err == nil || len(err.Error()) > 2048 {
		t.Fatalf("status of a 4 MiB shard name: %d-byte message", len(fmt.Sprint(err)))
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 8<<10 {
			t.Fatalf("a %d-byte log line", len(line))
		}
	}
	for name, alloc := range map[string]string{
		"256 bytes":      strings.Repeat("a", 256),
		"bidi override":  "a\u202eb",
		"C1 control":     "a\u0085b",
		"zero width":     "a\u200bb",
		"separator":      "a|b",
		"line feed":      "a\nb",
		"non-break spac": "a\u00a0b",
	} {
		err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "names", Term: 1, AllocationId: alloc})
		if code, _ := detailOf(t, err); code != connect.CodeInvalidArgument {
			t.Errorf("allocation %s: %v, want invalid argument", name, err)
		}
	}
	if err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "names", Term: 1, AllocationId: strings.Repeat("é", 127)}); err != nil {
		t.Errorf("254-byte printable allocation: %v", err)
	}
}

// A non-ASCII byte of a shard id is shown as a byte, not as the character
// that byte would be on its own.
func TestShardIDErrorShowsTheByte(t *testing.T) {
	err := ValidateShardID("\xd1\x8f-shard")
	if err == nil || !strings.Contains(err.Error(), "0xD1 at byte 0") || strings.Contains(err.Error(), "'Ñ'") {
		t.Fatalf("ValidateShardID: %v", err)
	}
}

// A fenced append names its shard once, its cause once and says what to do
// once.
func TestFencedAppendErrorHasOneSubjectOneCauseOneHint(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	openShard(t, e.client, "s1", 1, "a1")
	sub, err := blobstore.Sub(e.store, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Claim(t.Context(), sub, "s1", 2, "b"); err != nil {
		t.Fatal(err)
	}
	_, err = appendOps(t.Context(), e.client, "s1", "after")
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatal(err)
	}
	msg := ce.Message()
	if n := strings.Count(msg, `"s1"`); n != 1 {
		t.Errorf("the shard is named %d times: %s", n, msg)
	}
	if n := strings.Count(msg, "new primary"); n != 1 {
		t.Errorf("the hint appears %d times: %s", n, msg)
	}
	for _, want := range []string{"primary fenced at term 1", "successor term 2", "send appends to the new primary"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "current owner holds") || strings.Contains(msg, "must stop acknowledging") {
		t.Errorf("message repeats the hint: %s", msg)
	}
}

// The settings-mismatch error names the settings that differ, in the
// words of the API, not Go struct fields.
func TestSettingsMismatchErrorNamesTheDifference(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	if err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "m", Term: 1, AllocationId: "a", Settings: &sidecarv1.ShardSettings{AckOrder: sidecarv1.AckOrder_ACK_ORDER_SEQUENCED}}); err != nil {
		t.Fatal(err)
	}
	err := openWith(t, e.client, &sidecarv1.OpenRequest{Shard: "m", Term: 1, AllocationId: "a"})
	if code, _ := detailOf(t, err); code != connect.CodeInvalidArgument {
		t.Fatalf("reopen with other settings: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "ack order sequenced (not concurrent)") || strings.Contains(msg, "modeSet") || strings.Contains(msg, "{") {
		t.Fatalf("mismatch message: %s", msg)
	}
}

// faultedStore is a store that can be made to refuse writes for real: a
// tmpfs remounted read-only or filled up when the test may mount one, a
// folder without write permission for a non-root user, else injected
// faults (the writer then sees the same retryable errors).
type faultedStore struct {
	store *blobstore.Container
	start func(t *testing.T)
	stop  func(t *testing.T)
	// want is what the store's error says.
	want string
}

func writeFaultStore(t *testing.T, kind string) faultedStore {
	t.Helper()
	dir, err := smallDisk(t)
	if err != nil {
		t.Logf("no real device for the fault (%v): injecting it", err)
		f := faulty.New(mem.New(), 1)
		var id faulty.RuleID
		return faultedStore{store: f.Container, want: "injected",
			start: func(t *testing.T) { id = f.MustAdd(faulty.Rule{Ops: faulty.Writes, Fault: faulty.Unavailable}) },
			stop:  func(t *testing.T) { f.Remove(id) }}
	}
	ro := dir
	if kind == "read-only" {
		// The store keeps files of its root open for writing (its
		// create log, its pooled files), and a device with a file open
		// for writing refuses a read-only remount: the object tree gets
		// a device of its own, which the test turns read-only.
		ro = filepath.Join(dir, "objects")
		if err := os.Mkdir(ro, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := testservers.MountSmallDisk(t, ro, 4<<20); err != nil {
			t.Fatal(err)
		}
	}
	store := openFS(t, dir)
	switch kind {
	case "read-only":
		var undo func() error
		return faultedStore{store: store, want: "read-only file system",
			start: func(t *testing.T) {
				if undo, err = setReadOnly(ro); err != nil {
					t.Fatal(err)
				}
			},
			stop: func(t *testing.T) {
				if err := undo(); err != nil {
					t.Fatal(err)
				}
			}}
	default:
		var stop func()
		return faultedStore{store: store, want: "store full",
			start: func(t *testing.T) { stop = fillDevice(t, dir) },
			stop:  func(t *testing.T) { stop() }}
	}
}

// While the store refuses writes, an operator sees it: status names the
// store error and the shard's health goes retrying, then stalled; /readyz
// answers 503 for the sidecar and the shard; the metrics count retries
// and flag the stall; a WARN, then an ERROR line is logged, rate-limited;
// an append whose deadline runs out gets unavailable with the cause. Once
// the store takes writes again, everything recovers and the appends land.
func TestStoreFaultsAreVisible(t *testing.T) {
	for _, kind := range []string{"read-only", "full"} {
		t.Run(kind, func(t *testing.T) {
			fs := writeFaultStore(t, kind)
			var logs logBuffer
			e := newEnvOn(t, fs.store, Options{StallAfter: time.Second, Logger: jsonLogger(&logs)}, HandlerOptions{})
			openShard(t, e.client, "s1", 1, "a1")
			if _, err := appendOps(t.Context(), e.client, "s1", "before"); err != nil {
				t.Fatal(err)
			}
			fs.start(t)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			_, err := appendOps(ctx, e.client, "s1", "during")
			cancel()
			code, d := detailOf(t, err)
			if code != connect.CodeUnavailable || d.GetReason() != "unavailable" || !strings.Contains(err.Error(), fs.want) || !strings.Contains(err.Error(), "outcome is unknown") {
				t.Fatalf("append during the fault: code %v reason %q: %v", code, d.GetReason(), err)
			}
			var st *sidecarv1.ShardStatus
			waitFor(t, "status shows the shard stalled", func() bool {
				res, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s1"}))
				if err != nil {
					t.Fatal(err)
				}
				st = res.Msg.GetStatus()
				return st.GetStoreHealth() == HealthStalled
			})
			if !strings.Contains(st.GetLastStoreError(), fs.want) || st.GetRetryingMs() < 1000 || st.GetStoreRetries() == 0 || st.GetLastSyncAgeMs() < 0 {
				t.Errorf("status during the fault: %v", st)
			}
			if code, body := get(t, e.http.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "stalled") {
				t.Errorf("/readyz during the fault: %d %s", code, body)
			}
			if code, body := get(t, e.http.URL+"/readyz?shard=s1&format=json"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"store_health":"stalled"`) {
				t.Errorf("/readyz?shard=s1 during the fault: %d %s", code, body)
			}
			if code, _ := get(t, e.http.URL+"/readyz?shard=other"); code != http.StatusNotFound {
				t.Errorf("/readyz of a shard not open here: %d", code)
			}
			if v := counterValue(t, e, StalledMetric, map[string]string{"shard": "s1"}); v != 1 {
				t.Errorf("%s = %v", StalledMetric, v)
			}
			if v := counterValue(t, e, StoreRetriesMetric, map[string]string{"shard": "s1"}); v == 0 {
				t.Errorf("%s = 0", StoreRetriesMetric)
			}
			waitFor(t, "a WARN and an ERROR line", func() bool {
				l := logs.String()
				return strings.Contains(l, `"level":"WARN","msg":"store errors`) && strings.Contains(l, `"level":"ERROR","msg":"shard stalled`)
			})
			if n := strings.Count(logs.String(), `"msg":"shard stalled`); n > 2 {
				t.Errorf("the stall was logged %d times within seconds", n)
			}

			fs.stop(t)
			if _, err := appendOps(t.Context(), e.client, "s1", "after"); err != nil {
				t.Fatalf("append after the fault: %v", err)
			}
			waitFor(t, "the shard recovered", func() bool {
				res, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s1"}))
				return err == nil && res.Msg.GetStatus().GetStoreHealth() == HealthOK
			})
			if code, body := get(t, e.http.URL+"/readyz?shard=s1"); code != http.StatusOK {
				t.Errorf("/readyz after the fault: %d %s", code, body)
			}
			waitFor(t, "a recovery line", func() bool { return strings.Contains(logs.String(), "store recovered") })
			ops, err := readAll(t, e.client, "s1", 0, 0)
			if err != nil || len(ops) < 2 || ops[0] != "before" || ops[len(ops)-1] != "after" {
				t.Fatalf("read after the fault: %v, %v", ops, err)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	return res.StatusCode, b.String()
}

// rawRequest writes an HTTP/1.1 request head to the server and returns the
// connection, so a test can play a slow or lying client.
func rawRequest(t *testing.T, base string, contentLength int64, body string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /shardfence.sidecar.v1.SidecarService/Append HTTP/1.1\r\nHost: %s\r\nContent-Type: application/proto\r\nContent-Length: %d\r\n\r\n%s", u.Host, contentLength, body)
	return conn
}

// A body announced larger than the limit is refused before any of it is
// read: the answer comes while the client has sent only the head.
func TestOversizedBodyIsRefusedFromItsContentLength(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	conn := rawRequest(t, e.http.URL, 40<<20, "")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a 40 MiB announcement without its body: %v", err)
	}
	res.Body.Close()
	if res.StatusCode < 400 {
		t.Fatalf("status %d", res.StatusCode)
	}
}

// A client that sends its body too slowly is cut off after the body read
// timeout; a call whose body arrived is not, however long its answer takes.
func TestSlowBodyIsCutOffButALongAppendIsNot(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	e := newEnvOn(t, store.Container, Options{Limits: Limits{BodyReadTimeout: 200 * time.Millisecond}}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	conn := rawRequest(t, e.http.URL, 1000, "0123456789")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	if _, err := conn.Read(buf); err != nil && reqlimit.IsTimeout(err) {
		t.Fatal("a client that stopped sending its body still holds the connection after 10s")
	}
	store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Latency: faulty.Fixed(600 * time.Millisecond)})
	if _, err := appendOps(t.Context(), e.client, "s", "slow to land"); err != nil {
		t.Fatalf("an append acknowledged after the body read timeout: %v", err)
	}
}

// Request bytes held at once are capped: with the cap taken by a call
// waiting for its ack, another large call gets sidecar_busy (nothing done)
// instead of more memory; once the first returns, calls go through again.
func TestConcurrentRequestBytesAreCapped(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	e := newEnvOn(t, store.Container, Options{Limits: Limits{MaxRequestBytes: 1 << 20, MaxConcurrentRequestBytes: 1 << 20, BodyReadTimeout: 2 * time.Second}}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, r faulty.Request) error {
		if r.Op == blobstore.OpCreateIfAbsent || r.Op == blobstore.OpPut {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}})
	big := strings.Repeat("x", 700<<10)
	first := make(chan error, 1)
	go func() {
		_, err := appendOps(context.Background(), e.client, "s", big)
		first <- err
	}()
	// The first append holds its bytes until its md create is released;
	// should it fail before it gets there (its body late on a loaded
	// machine), say so rather than wait for ever.
	select {
	case <-held:
	case err := <-first:
		t.Fatalf("the first append ended before it reached the store: %v", err)
	}
	_, err := appendOps(t.Context(), e.client, "s", big)
	if err == nil || !strings.Contains(err.Error(), "sidecar busy") {
		t.Errorf("a second large append while the first holds the cap: %v, want sidecar busy", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	store.SetHooks(faulty.Hooks{})
	if _, err := appendOps(t.Context(), e.client, "s", big); err != nil {
		t.Fatalf("after the first returned: %v", err)
	}
}

// Without the token, a client is told what to pass.
func TestMissingTokenSaysWhatToPass(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{AuthToken: "s3cret-token-0123"})
	_, err := e.client.Status(t.Context(), connect.NewRequest(&sidecarv1.StatusRequest{Shard: "s"}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || !strings.Contains(ce.Message(), "--auth-token-file") {
		t.Fatalf("call without token: %v", err)
	}
}

// Inspect shows the stored fencing: what every term runs.
func TestInspectShowsStoredSettings(t *testing.T) {
	c := sidecarOn(t, mem.New())
	err := openWith(t, c, &sidecarv1.OpenRequest{Shard: "i", Term: 1, AllocationId: "a",
		Settings: &sidecarv1.ShardSettings{Mode: sidecarv1.FencingMode_FENCING_MODE_LEASE, LeaseIntervalMs: 3000}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Inspect(t.Context(), connect.NewRequest(&sidecarv1.InspectRequest{Shard: "i"}))
	if err != nil {
		t.Fatal(err)
	}
	s := res.Msg.GetStoredSettings()
	if s.GetMode() != sidecarv1.FencingMode_FENCING_MODE_LEASE || s.GetLeaseIntervalMs() != 3000 {
		t.Fatalf("stored settings %v", s)
	}
	if !strings.Contains(strings.Join(res.Msg.GetLines(), "\n"), "settings: fencing lease (3s)") {
		t.Fatalf("inspect lines %q", res.Msg.GetLines())
	}
}

// Bodies without a Content-Length (gRPC, chunked uploads) take their bytes
// from the gate as they arrive: over-limit ones are stopped at the limit
// instead of read to the end, and many at once never wait on one another
// (each fails with resource_exhausted instead); a small one goes through.
func TestChunkedBodiesAreCappedWithoutDeadlock(t *testing.T) {
	e := newEnv(t, Options{Limits: Limits{MaxRequestBytes: 1 << 20, MaxConcurrentRequestBytes: 1 << 20}}, HandlerOptions{})
	openShard(t, e.client, "s", 1, "a")
	post := func(size int) (int, string) {
		body := io.MultiReader(strings.NewReader(strings.Repeat("x", size))) // no length: chunked
		req, err := http.NewRequest(http.MethodPost, e.http.URL+"/shardfence.sidecar.v1.SidecarService/Append", body)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		req.Header.Set("Content-Type", "application/proto")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			if code, body := post(3 << 20); code != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") {
				t.Errorf("chunked 3 MiB body: %d %s", code, body)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("8 over-limit chunked bodies took %v: waiting on one another?", took)
	}
	var req bytes.Buffer
	req.Write([]byte{0x0a, 1, 's', 0x12, 2, 'o', 'k'}) // AppendRequest{shard: "s", ops: ["ok"]}
	r, err := http.NewRequest(http.MethodPost, e.http.URL+"/shardfence.sidecar.v1.SidecarService/Append", io.MultiReader(&req))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/proto")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("small chunked append after the flood: %d %s", res.StatusCode, b)
	}
}
