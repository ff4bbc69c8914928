package sidecarproc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// ack is one acknowledged op: who acknowledged it, the epoch the client
// read before it sent the append (so an ack of epoch >= e was sent after
// the scenario stepped to e), and the ack's fencing_observed.
type ack struct {
	who      string
	epoch    int64
	observed string
}

// clientRun is the clients' view of a scenario on shard "z": the current
// primary, the scenario's epoch, and every op acknowledged.
type clientRun struct {
	prefix  string        // of the op ids: prefix<client>-<n>
	phase   time.Duration // how long a phase appends at least
	current atomic.Pointer[Proc]
	epoch   atomic.Int64
	mu      sync.Mutex
	acked   map[string]ack
	refused atomic.Int64 // appends not acknowledged
	fenced  atomic.Int64 // of those, refused as fenced
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newClientRun(prefix string, phase time.Duration) *clientRun {
	return &clientRun{prefix: prefix, phase: phase, acked: map[string]ack{}, cancel: func() {}}
}

// start runs n clients appending to the current primary (to) until stop.
func (r *clientRun) start(ctx context.Context, to *Proc, n int) {
	r.current.Store(to)
	ctx, r.cancel = context.WithCancel(ctx)
	for g := range n {
		r.wg.Go(func() { r.client(ctx, g) })
	}
}

// stop ends the clients and waits for them.
func (r *clientRun) stop() {
	r.cancel()
	r.wg.Wait()
}

func (r *clientRun) client(ctx context.Context, g int) {
	for i := 0; ctx.Err() == nil; i++ {
		// The epoch is read before the primary: an ack recorded with
		// epoch e was sent after the step that set e.
		e := r.epoch.Load()
		p := r.current.Load()
		op := fmt.Sprintf("%s%d-%d", r.prefix, g, i)
		res, err := p.Client.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: "z", Ops: [][]byte{[]byte(op)}}))
		if err != nil {
			// Not acknowledged: the op may or may not be durable, and
			// the client moves on with a new id, as a primary would
			// after failing over.
			r.refused.Add(1)
			if ReasonOf(err) == "fenced" {
				r.fenced.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		r.acked[op] = ack{who: p.Name, epoch: e, observed: res.Msg.GetFencingObserved()}
		r.mu.Unlock()
	}
}

// step starts a new epoch and returns it: every append a client sends from
// now on is recorded with it or a later one.
func (r *clientRun) step() int64 { return r.epoch.Add(1) }

// acks returns the acks by who sent in epoch since or later.
func (r *clientRun) acks(who string, since int64) []ack {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ack
	for _, a := range r.acked {
		if a.who == who && a.epoch >= since {
			out = append(out, a)
		}
	}
	return out
}

// await lets the clients append for the phase, and longer, up to a bound,
// until who acknowledged a few ops sent in epoch since or later: on a
// loaded machine an open can eat a short phase.
func (r *clientRun) await(t *testing.T, who string, since int64, what string) {
	t.Helper()
	time.Sleep(r.phase)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(r.acks(who, since)) >= 20 {
			return
		}
	}
	if what != "" {
		what = " " + what
	}
	t.Fatalf("sidecar %s acknowledged fewer than 20 ops in 30s%s", who, what)
}

// noAcks fails the test if who acknowledged an op sent in epoch since or
// later: it was fenced before that epoch began.
func (r *clientRun) noAcks(t *testing.T, who string, since int64, what string) {
	t.Helper()
	if n := len(r.acks(who, since)); n > 0 {
		t.Errorf("sidecar %s acknowledged %d ops sent after %s", who, n, what)
	}
}

// checkLineage fails the test for every problem lineageProblems finds in
// the final read and returns the acks by sidecar.
func (r *clientRun) checkLineage(t *testing.T, read map[string]int, refused []string, sidecars []string) map[string]int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	by, problems := lineageProblems(r.acked, read, refused, sidecars)
	for _, p := range problems {
		t.Error(p)
	}
	return by
}

// lineageProblems checks a final read of the lineage (op -> times read)
// against what was acknowledged: every acknowledged op is there exactly
// once, no op twice, no refused op at all, and every sidecar named
// acknowledged something (or the run did not exercise its phase). by
// counts the acks per sidecar.
func lineageProblems(acked map[string]ack, read map[string]int, refused, sidecars []string) (by map[string]int, problems []string) {
	by = map[string]int{}
	for _, op := range sortedKeys(acked) {
		a := acked[op]
		by[a.who]++
		if n := read[op]; n != 1 {
			problems = append(problems, fmt.Sprintf("op %s acknowledged by %s (epoch %d) is in the final lineage %d times, want once", op, a.who, a.epoch, n))
		}
	}
	for _, op := range sortedKeys(read) {
		if n := read[op]; n > 1 {
			problems = append(problems, fmt.Sprintf("op %s appears %d times in the lineage", op, n))
		}
	}
	for _, op := range refused {
		if read[op] > 0 {
			problems = append(problems, fmt.Sprintf("the refused append %s made it into the lineage", op))
		}
	}
	for _, who := range sidecars {
		if by[who] == 0 {
			problems = append(problems, fmt.Sprintf("no op was acknowledged by %s: the run did not exercise its phase", who))
		}
	}
	return by, problems
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
