package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shardfence/shardfence/examples/kv/kvclient"
)

// The nemesis test: the example key-value service (examples/kv) on real
// processes (MinIO, a primary master and a standby, three sidecars, three
// kv processes), clients that know only the masters, and a nemesis that
// kills and freezes processes on a schedule drawn from a seed. Every
// client operation is recorded with its invocation and completion time
// and checked for linearizability with porcupine, per key.
//
// The short form runs in `make test`; the long one (`make jepsen`, or
// SHARDFENCE_JEPSEN=1) runs several seeds for longer. A failing run writes
// its history and porcupine's visualisation under a folder it names, with
// the seed (SHARDFENCE_NEMESIS_SEED replays one).

type runConfig struct {
	seed     uint64
	duration time.Duration // of the nemesis
	broken   string        // the kv's --broken
	clients  int
	keys     int
	faults   []fault // the kinds the nemesis draws from
}

type fault string

const (
	killKV       fault = "kill kv"
	killSidecar  fault = "kill sidecar"
	pauseSidecar fault = "pause sidecar"
	killMaster   fault = "kill primary master"
	pauseStore   fault = "pause store"
)

var allFaults = []fault{killKV, killSidecar, pauseSidecar, killMaster, pauseStore}

func TestKVLinearizableThroughFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	if os.Getenv("SHARDFENCE_JEPSEN") != "" {
		seeds := []uint64{1, 2, 3, 4}
		if s := os.Getenv("SHARDFENCE_NEMESIS_SEED"); s != "" {
			n, _ := strconv.ParseUint(s, 10, 64)
			seeds = []uint64{n}
		}
		total := report{}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
				r := run(t, runConfig{seed: seed, duration: 4 * time.Minute, clients: 8, keys: 8, faults: allFaults})
				r.log(t)
				if r.violations > 0 {
					t.Fatalf("seed %d: %d keys with non-linearizable histories (see %s)", seed, r.violations, r.out)
				}
				total.add(r)
			})
		}
		total.log(t)
		return
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SHARDFENCE_NEMESIS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	r := run(t, runConfig{seed: seed, duration: 45 * time.Second, clients: 6, keys: 6, faults: allFaults})
	r.log(t)
	if r.violations > 0 {
		t.Fatalf("seed %d: %d keys with non-linearizable histories (see %s; replay with SHARDFENCE_NEMESIS_SEED=%d)", seed, r.violations, r.out, seed)
	}
	if r.failovers() < 5 {
		t.Fatalf("seed %d: only %d failovers in the run (want at least 5): %v", seed, r.failovers(), r.faults)
	}
}

// The checker has teeth: a kv process that answers a write before the log
// acknowledged it is caught, through the same clients and faults (killing
// kv processes is what loses such writes).
func TestBrokenKVIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	seed := uint64(time.Now().UnixNano())
	r := run(t, runConfig{seed: seed, duration: 25 * time.Second, broken: "early-ack", clients: 6, keys: 4, faults: []fault{killKV}})
	r.log(t)
	if r.violations == 0 {
		t.Fatalf("seed %d: the checker found nothing wrong with a kv that acknowledges writes before the log does (history in %s)", seed, r.out)
	}
}

// report is one run's figures.
type report struct {
	seed       uint64
	ops        int
	unknown    int
	faults     map[fault]int
	violations int // keys whose history is not linearizable (an acknowledged write lost is one)
	windows    int // 1 s windows
	writable   int // windows in which a write succeeded
	out        string
	gaps       []time.Duration // longest write unavailability around each fault
	kindGaps   map[fault][]time.Duration
}

// failovers counts the faults that move a shard or the master: a killed or
// frozen sidecar's shards go to another node, a killed primary master is
// replaced by an election. (A killed kv process, or a frozen store, moves
// nothing: the shard stays where it is.)
func (r report) failovers() int {
	return r.faults[killSidecar] + r.faults[pauseSidecar] + r.faults[killMaster]
}

func (r *report) add(o report) {
	if r.faults == nil {
		r.faults = map[fault]int{}
	}
	r.ops += o.ops
	r.unknown += o.unknown
	r.violations += o.violations
	r.windows += o.windows
	r.writable += o.writable
	for f, c := range o.faults {
		r.faults[f] += c
	}
	r.gaps = append(r.gaps, o.gaps...)
	if r.kindGaps == nil {
		r.kindGaps = map[fault][]time.Duration{}
	}
	for f, g := range o.kindGaps {
		r.kindGaps[f] = append(r.kindGaps[f], g...)
	}
}

func (r report) log(t *testing.T) {
	t.Helper()
	avail := 0.0
	if r.windows > 0 {
		avail = float64(r.writable) / float64(r.windows)
	}
	sort.Slice(r.gaps, func(i, j int) bool { return r.gaps[i] < r.gaps[j] })
	pct := func(p float64) time.Duration {
		if len(r.gaps) == 0 {
			return 0
		}
		return r.gaps[min(len(r.gaps)-1, int(p*float64(len(r.gaps))))]
	}
	which := fmt.Sprintf("seed %d", r.seed)
	if r.seed == 0 {
		which = "all seeds"
	}
	t.Logf("%s: %d operations (%d of unknown outcome), faults %v (%d failovers), violations %d, availability %.1f%% of %d 1-s windows with a write acknowledged, write unavailability per fault p50 %v p90 %v max %v",
		which, r.ops, r.unknown, r.faults, r.failovers(), r.violations, 100*avail, r.windows, pct(0.5).Round(time.Millisecond), pct(0.9).Round(time.Millisecond), pct(1).Round(time.Millisecond))
	for _, f := range allFaults {
		g := append([]time.Duration(nil), r.kindGaps[f]...)
		if len(g) == 0 {
			continue
		}
		sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
		t.Logf("  %s: %d times, write unavailability p50 %v max %v", f, len(g), g[len(g)/2].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond))
	}
}

// history records the clients' operations.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	acks  []time.Time // when writes were acknowledged
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in kvInput, out kvOutput, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if out.Unknown {
		ret = math.MaxInt64 // it may take effect at any point after the call
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	if in.Kind != "get" && !out.Unknown {
		h.acks = append(h.acks, h.start.Add(time.Duration(ret)))
	}
}

// run starts a cluster, runs the clients and the nemesis for cfg.duration,
// then a quiet period, and checks the history.
func run(t *testing.T, cfg runConfig) report {
	c := startCluster(t, cfg.broken)
	rng := rand.New(rand.NewPCG(cfg.seed, 17))
	h := &history{start: time.Now()}
	kc, err := kvclient.New(c.masterURLs(), numShards)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range cfg.clients {
		crng := rand.New(rand.NewPCG(cfg.seed, uint64(i)+100))
		wg.Go(func() { clientLoop(ctx, kc, h, i, cfg.keys, crng) })
	}
	// Let the cluster settle and the clients start before any fault.
	time.Sleep(3 * time.Second)
	faults := map[fault]int{}
	var faultTimes []time.Time
	var faultKinds []fault
	deadline := time.Now().Add(cfg.duration)
	var round []fault
	for time.Now().Before(deadline) {
		// Every kind once per round, in an order the seed draws.
		if len(round) == 0 {
			round = append(round, cfg.faults...)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		f := round[0]
		round = round[1:]
		at := time.Now()
		if !c.inject(t, f, rng) {
			continue
		}
		faultTimes, faultKinds = append(faultTimes, at), append(faultKinds, f)
		faults[f]++
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // quiet: everything heals
	stop()
	wg.Wait()
	// A final read of every key, through the system.
	for k := range cfg.keys {
		key := fmt.Sprintf("k%d", k)
		for attempt := 0; attempt < 20; attempt++ {
			rctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			call := h.now()
			v, found, err := kc.Get(rctx, key)
			cancel()
			if err == nil {
				h.add(cfg.clients, kvInput{Kind: "get", Key: key}, kvOutput{Found: found, Value: v}, call, h.now())
				break
			}
		}
	}
	r := report{seed: cfg.seed, faults: faults}
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	acks := append([]time.Time(nil), h.acks...)
	h.mu.Unlock()
	r.ops = len(ops)
	for _, op := range ops {
		if op.Output.(kvOutput).Unknown {
			r.unknown++
		}
	}
	r.windows, r.writable = availability(h.start, time.Now(), acks)
	r.gaps = gaps(faultTimes, acks)
	r.kindGaps = map[fault][]time.Duration{}
	for i, g := range r.gaps {
		r.kindGaps[faultKinds[i]] = append(r.kindGaps[faultKinds[i]], g)
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel.ToModel(), ops, 2*time.Minute)
	if res != porcupine.Ok {
		r.violations = countViolations(ops)
		if r.violations == 0 {
			r.violations = 1 // timed out or unknown: count it as failed
		}
		dir, err := os.MkdirTemp("", fmt.Sprintf("shardfence-nemesis-seed-%d-", cfg.seed))
		if err == nil {
			r.out = dir
			_ = porcupine.VisualizePath(kvModel.ToModel(), info, filepath.Join(dir, "history.html"))
			if b, err := json.MarshalIndent(ops, "", " "); err == nil {
				_ = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
			}
		}
		t.Logf("checker result %v; history and visualisation in %s", res, dir)
	}
	return r
}

// countViolations checks each key's history on its own and counts those
// that are not linearizable.
func countViolations(ops []porcupine.Operation) int {
	n := 0
	for _, part := range kvModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(kvModel.ToModel(), part, 30*time.Second) != porcupine.Ok {
			n++
		}
	}
	return n
}

// clientLoop runs operations one after the other on a small key space,
// so that they conflict: gets, puts of unique values, CAS from the last
// value read, deletes.
func clientLoop(ctx context.Context, kc *kvclient.Client, h *history, id, keys int, rng *rand.Rand) {
	last := map[string]string{}
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("k%d", rng.IntN(keys))
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		call := h.now()
		var in kvInput
		var out kvOutput
		var err error
		switch p := rng.IntN(100); {
		case p < 40:
			in = kvInput{Kind: "get", Key: key}
			out.Value, out.Found, err = kc.Get(octx, key)
			if err == nil && out.Found {
				last[key] = out.Value
			}
		case p < 75:
			in = kvInput{Kind: "put", Key: key, Value: fmt.Sprintf("c%d-%d", id, i)}
			err = kc.Put(octx, key, in.Value)
		case p < 92:
			exp, ok := last[key]
			in = kvInput{Kind: "cas", Key: key, Expect: exp, Absent: !ok, Value: fmt.Sprintf("c%d-%d", id, i)}
			out.OK, err = kc.CAS(octx, key, exp, !ok, in.Value)
		default:
			in = kvInput{Kind: "del", Key: key}
			out.OK, err = kc.Delete(octx, key)
		}
		cancel()
		ret := h.now()
		switch {
		case err == nil:
			h.add(id, in, out, call, ret)
		case in.Kind != "get" && (errors.Is(err, kvclient.ErrUnknown) || errors.Is(err, context.DeadlineExceeded)):
			// A write that may have taken effect: recorded as such. (A
			// deadline may end a write that was sent.)
			h.add(id, in, kvOutput{Unknown: true}, call, ret)
		}
		// Failed reads and writes refused with nothing written tell
		// nothing: they are not recorded.
		if ctx.Err() != nil {
			return
		}
	}
}

// inject runs one fault; it reports false when the fault could not run
// (no primary master to kill, say).
func (c *cluster) inject(t *testing.T, f fault, rng *rand.Rand) bool {
	n := c.nodes[rng.IntN(len(c.nodes))]
	switch f {
	case killKV:
		n.kvproc.Kill()
		time.Sleep(time.Second)
		c.startKV(n)
	case killSidecar:
		n.sidecar.Kill()
		time.Sleep(2 * time.Second)
		c.startSidecar(n)
	case pauseSidecar:
		// Past both client TTLs: its shards move, and it resumes a zombie.
		pause(n.sidecar, 3500*time.Millisecond)
	case killMaster:
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		name, err := c.primaryMaster(ctx)
		cancel()
		if err != nil {
			return false
		}
		c.mu.Lock()
		p := c.masters[name]
		c.mu.Unlock()
		p.Kill()
		time.Sleep(2 * time.Second)
		c.startMaster(name, false) // a standby by itself: the log has a primary
	case pauseStore:
		pause(signaler{c.minio.Cmd}, 1500*time.Millisecond)
	}
	return true
}

// availability counts the 1 s windows of the run and those in which a
// write was acknowledged.
func availability(start, end time.Time, acks []time.Time) (windows, writable int) {
	windows = int(end.Sub(start) / time.Second)
	seen := map[int]bool{}
	for _, a := range acks {
		seen[int(a.Sub(start)/time.Second)] = true
	}
	return windows, len(seen)
}

// gaps is, for each fault, the longest time without an acknowledged
// write from the fault until the next one (at most 15 s).
func gaps(faults, acks []time.Time) []time.Duration {
	sorted := append([]time.Time(nil), acks...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Before(sorted[j]) })
	var out []time.Duration
	for i, f := range faults {
		end := f.Add(15 * time.Second)
		if i+1 < len(faults) && faults[i+1].Before(end) {
			end = faults[i+1]
		}
		prev, longest := f, time.Duration(0)
		for _, a := range sorted {
			if a.Before(f) {
				continue
			}
			if a.After(end) {
				break
			}
			longest = max(longest, a.Sub(prev))
			prev = a
		}
		out = append(out, longest)
	}
	return out
}
