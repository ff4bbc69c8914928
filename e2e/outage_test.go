package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardfence/shardfence/e2e/internal/containers"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// An outage takes the store away from a running sidecar and gives it back.
type outage struct {
	down, up func(context.Context) error
}

// MinIO frozen (`docker pause`) under a sidecar while clients append: its
// socket accepts connections but nothing answers, the way a store hangs.
func TestMinIOPausedUnderASidecar(t *testing.T) {
	srv := startMinIO(t)
	runOutage(t, srv.MinioURL("paused"), srv.SecretKey, outage{down: srv.Pause, up: srv.Unpause})
}

// The store stopped and started again (same container, same data) under a
// sidecar while clients append: connections are refused, then the server
// comes back with what it had stored.
func TestStoreRestartedUnderASidecar(t *testing.T) {
	restart := func(srv *containers.Server) outage { return outage{down: srv.Stop, up: srv.Start} }
	t.Run("minio", func(t *testing.T) {
		srv := startMinIO(t)
		runOutage(t, srv.MinioURL("restarted"), srv.SecretKey, restart(srv))
	})
	t.Run("versitygw", func(t *testing.T) {
		srv := startVersityGW(t)
		runOutage(t, srv.S3URL("restarted"), srv.SecretKey, restart(srv))
	})
}

// runOutage: clients append to shard "s" on sidecar A (a real `shardfence
// serve` process) until it acknowledged some; the store goes down and
// stays down until a few appends sent after that failed; it comes back and
// the clients go on until A acknowledged appends sent after that. Then:
//   - an append sent while the store was down is never acknowledged before
//     it is back (nothing can have been stored);
//   - every failed append failed cleanly: the client's deadline, or an
//     error carrying the sidecar's reason, never an untyped one;
//   - A is still running;
//   - a new sidecar B opening term 2 reads every acknowledged op, once.
func runOutage(t *testing.T, storeURL, secret string, o outage) {
	a := sidecarproc.Start(t, shardfence, "A", storeURL)
	a.Open(t, "s", 1, "alloc-a")
	load := &appendLoad{}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() { load.client(ctx, a, g) })
	}
	stop := func() { cancel(); wg.Wait() }
	defer stop()

	load.await(t, "before the outage", time.Minute, func() bool { return load.ackedSentSince(time.Time{}) >= 20 })
	if err := o.down(t.Context()); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	load.await(t, "while the store is down", 2*time.Minute, func() bool { return load.failedSentSince(down) >= 8 })
	up := time.Now()
	if err := o.up(t.Context()); err != nil {
		t.Fatal(err)
	}
	load.await(t, "after the store is back", 2*time.Minute, func() bool { return load.ackedSentSince(up) >= 20 })
	stop()

	load.mu.Lock()
	acks, fails := load.acks, load.fails
	load.mu.Unlock()
	for _, r := range acks {
		if !r.sent.Before(down) && r.done.Before(up) {
			t.Errorf("op %s sent %s after the store went down was acknowledged %s before it came back", r.op, r.sent.Sub(down), up.Sub(r.done))
		}
	}
	unclean := 0
	kinds := map[string]int{}
	for _, r := range fails {
		kinds[failureKind(r.err)]++
		if !cleanFailure(r.err) {
			if unclean++; unclean <= 5 {
				t.Errorf("append of %s failed with an untyped error: %v", r.op, r.err)
			}
		}
	}
	if a.Exited() {
		t.Fatalf("sidecar A exited during the outage")
	}

	b := sidecarproc.Start(t, shardfence, "B", storeURL)
	b.Open(t, "s", 2, "alloc-b")
	read, err := b.ReadAll(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range acks {
		if read[r.op] == 0 {
			t.Errorf("op %s acknowledged by A is missing from the lineage B reads", r.op)
		}
	}
	for op, n := range read {
		if n > 1 {
			t.Errorf("op %s appears %d times in the lineage", op, n)
		}
	}
	for _, p := range []*sidecarproc.Proc{a, b} {
		if strings.Contains(p.Log(), secret) {
			t.Errorf("sidecar %s logged the store's secret", p.Name)
		}
	}
	t.Logf("acknowledged %d ops (%d sent before the outage, %d after it); %d appends failed %v, %d of them sent while the store was down (%s); lineage %d ops",
		len(acks), countSent(acks, time.Time{}, down), countSent(acks, up, time.Now()), len(fails), kinds, countSent(fails, down, up), up.Sub(down).Round(time.Millisecond), len(read))
}

// failureKind names a failed append's error for the summary: its code and
// the sidecar's reason, if any.
func failureKind(err error) string {
	if r := sidecarproc.ReasonOf(err); r != "" {
		return connect.CodeOf(err).String() + "/" + r
	}
	return connect.CodeOf(err).String()
}

// cleanFailure: the client's own deadline, or an error the sidecar typed.
func cleanFailure(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded || sidecarproc.ReasonOf(err) != ""
}

type appendResult struct {
	op         string
	sent, done time.Time
	err        error
}

// appendLoad is what the clients saw: every append acknowledged or failed.
type appendLoad struct {
	mu    sync.Mutex
	acks  []appendResult
	fails []appendResult
}

// client appends unique ops one at a time, each with a 3s deadline, until
// ctx ends; an op that fails is never sent again.
func (l *appendLoad) client(ctx context.Context, p *sidecarproc.Proc, g int) {
	for i := 0; ctx.Err() == nil; i++ {
		r := appendResult{op: fmt.Sprintf("c%d-%d", g, i), sent: time.Now()}
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r.err = p.Append(actx, "s", []byte(r.op))
		cancel()
		r.done = time.Now()
		if ctx.Err() != nil {
			return // the test stopped the clients: not an outcome
		}
		l.mu.Lock()
		if r.err == nil {
			l.acks = append(l.acks, r)
		} else {
			l.fails = append(l.fails, r)
		}
		l.mu.Unlock()
		if r.err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func countSent(rs []appendResult, from, to time.Time) int {
	n := 0
	for _, r := range rs {
		if !r.sent.Before(from) && r.sent.Before(to) {
			n++
		}
	}
	return n
}

func (l *appendLoad) ackedSentSince(t0 time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return countSent(l.acks, t0, time.Now().Add(time.Hour))
}

func (l *appendLoad) failedSentSince(t0 time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return countSent(l.fails, t0, time.Now().Add(time.Hour))
}

// await polls cond until it holds, failing the test after limit.
func (l *appendLoad) await(t *testing.T, phase string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.mu.Lock()
			acks, fails := len(l.acks), len(l.fails)
			var last error
			if fails > 0 {
				last = l.fails[fails-1].err
			}
			l.mu.Unlock()
			t.Fatalf("%s: condition not met in %s (%d appends acknowledged, %d failed, last failure: %v)", phase, limit, acks, fails, last)
		}
	}
}
