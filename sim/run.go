package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/ha"
)

// Stats count what one run (or many) did.
type Stats struct {
	Seeds         int
	Simulated     time.Duration
	Faults        int
	Messages      int
	Dropped       int
	StoreRequests int
	Acked         int
	Moves         int
	Failovers     int
}

func (s *Stats) add(o Stats) {
	s.Seeds += o.Seeds
	s.Simulated += o.Simulated
	s.Faults += o.Faults
	s.Messages += o.Messages
	s.Dropped += o.Dropped
	s.StoreRequests += o.StoreRequests
	s.Acked += o.Acked
	s.Moves += o.Moves
	s.Failovers += o.Failovers
}

// Result is one run: its trace, and the invariant it broke (nil if none).
type Result struct {
	Plan      Plan
	Trace     []string
	Violation error
	Stats     Stats
}

// DefaultShape is the cluster of make test's seeds: a primary master and
// a standby, three sidecars, three auto-restore shards.
var DefaultShape = Shape{Masters: 2, Sidecars: 3, Shards: 3, Warmup: 3 * time.Second, Window: 16 * time.Second,
	Quiet: 12 * time.Second, MaxFaults: 4, MaxDur: 6 * time.Second, Takeover: 2 * time.Second}

// DefaultTiming: the shortest TTLs a node may have (1 s + 1 s).
var DefaultTiming = Timing{ActiveTTL: time.Second, SuspicionTTL: time.Second, ElectionTimeout: time.Second, AppendEvery: 300 * time.Millisecond}

// sampleEvery is how often the driver checks the invariants.
const sampleEvery = 100 * time.Millisecond

// run is the state the driver keeps between samples.
type run struct {
	w         *World
	plan      Plan
	shards    []string
	primaries map[int64]string
	owners    map[string]Row
	moves     []Move
	acks      map[string][]Acked
	bySeq     map[string]map[int64]Acked
	ackErr    error // the first two acknowledgements of one position
	acksMu    sync.Mutex
}

// RunPlan runs plan inside the caller's synctest bubble. dir is a scratch
// directory for snapshot and hydration files.
func RunPlan(plan Plan, s Shape, t Timing, dir string) (res Result) {
	w := newWorld(plan.Seed, s, t, mem.New(), dir)
	r := &run{w: w, plan: plan, primaries: map[int64]string{}, owners: map[string]Row{}, acks: map[string][]Acked{}, bySeq: map[string]map[int64]Acked{}}
	for i := range s.Shards {
		r.shards = append(r.shards, fmt.Sprintf("shard%d", i+1))
		r.bySeq[r.shards[i]] = map[int64]Acked{}
	}
	res.Plan = plan
	defer func() {
		w.teardown()
		w.mu.Lock()
		res.Trace = append([]string(nil), w.trace...)
		st := w.stats
		w.mu.Unlock()
		st.Seeds, st.Simulated, st.Faults, st.Moves = 1, plan.End, len(plan.Faults), len(r.moves)
		r.acksMu.Lock()
		for _, a := range r.acks {
			st.Acked += len(a)
		}
		r.acksMu.Unlock()
		res.Stats = st
	}()
	res.Violation = r.drive()
	if res.Violation != nil {
		w.Note("VIOLATION: %v", res.Violation)
	}
	return res
}

// drive starts the cluster, injects the plan's faults at their times,
// checks the invariants every sample, and the final ones at the end.
func (r *run) drive() error {
	w := r.w
	for i, n := range w.shape.masterNames() {
		if err := w.startMaster(n, i > 0); err != nil {
			return err
		}
	}
	for _, n := range w.shape.sidecarNames() {
		if err := w.startSidecar(n); err != nil {
			return err
		}
	}
	app := w.newProc("app")
	close(app.done) // no Run of its own: the router's goroutines end with Close
	hc := w.net.Client(app)
	router, err := client.NewRouter(w.masterURLs(), client.WithMasterHTTPClient(hc), client.WithSidecarOptions(client.WithHTTPClient(hc)))
	if err != nil {
		return err
	}
	defer router.Close()
	if err := r.assign(); err != nil {
		return err
	}
	actx, stopApps := context.WithCancel(context.Background())
	var apps sync.WaitGroup
	for _, s := range r.shards {
		apps.Go(func() { r.appender(actx, router, s) })
	}
	events := r.events()
	for w.now() < r.plan.End {
		next := min(w.now().Truncate(sampleEvery)+sampleEvery, r.plan.End)
		if len(events) > 0 && events[0].at <= next {
			next = events[0].at
		}
		time.Sleep(next - w.now())
		for len(events) > 0 && events[0].at <= w.now() {
			if err := events[0].do(); err != nil {
				stopApps()
				apps.Wait()
				return err
			}
			events = events[1:]
		}
		synctest.Wait()
		if err := r.sample(); err != nil {
			stopApps()
			apps.Wait()
			return err
		}
	}
	stopApps()
	apps.Wait()
	synctest.Wait()
	return r.final(router)
}

// assign makes every shard an auto-restore shard of the first primary.
func (r *run) assign() error {
	w := r.w
	deadline := w.now() + w.shape.Warmup
	for _, s := range r.shards {
		for {
			m, _ := r.primary()
			if m != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := m.AssignShard(ctx, master.AssignRequest{Shard: s, AutoRestore: true})
				cancel()
				if err == nil {
					break
				}
			}
			if w.now() > deadline {
				return fmt.Errorf("setup: could not assign %s within the warm-up", s)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	w.Note("assigned %s", strings.Join(r.shards, ", "))
	return nil
}

// appender is a shard's primary: it appends one op at a time through the
// router, and records the acknowledged ones.
func (r *run) appender(ctx context.Context, router *client.Router, shard string) {
	for i := 0; ctx.Err() == nil; i++ {
		op := fmt.Sprintf("%s/%d", shard, i)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := router.Append(cctx, shard, []byte(op))
		cancel()
		if err == nil {
			a := Acked{Op: op, Term: ack.Term, Seq: ack.FirstSeqNo}
			r.acksMu.Lock()
			r.acks[shard] = append(r.acks[shard], a)
			if err := checkAck(shard, r.bySeq[shard], a); err != nil && r.ackErr == nil {
				r.ackErr = err
			}
			r.acksMu.Unlock()
		}
		if sleepCtx(ctx, r.w.timing.AppendEvery) != nil {
			return
		}
	}
}

// event is one step of the plan at a time.
type event struct {
	at time.Duration
	do func() error
}

// events turns the plan's faults into start and heal events, in order.
func (r *run) events() []event {
	w := r.w
	var out []event
	for _, f := range r.plan.Faults {
		out = append(out, event{at: f.At, do: func() error { w.Note("fault: %v", f); return w.inject(f, true) }},
			event{at: f.End(), do: func() error { w.Note("heal: %s %s", f.Kind, f.A); return w.inject(f, false) }})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// inject starts (on) or heals a fault.
func (w *World) inject(f Fault, on bool) error {
	delta := -1
	if on {
		delta = 1
	}
	w.mu.Lock()
	switch f.Kind {
	case Pause:
		w.paused[f.A] += delta
	case Partition:
		w.cuts[pair(f.A, f.B)] += delta
	case StoreStall:
		w.stalled[f.A] += delta
	case StoreErrors:
		w.erring[f.A] += delta
	}
	w.notifyLocked()
	w.mu.Unlock()
	switch {
	case f.Kind == Crash && on:
		w.crash(f.A)
	case f.Kind == Crash:
		if p := w.proc(f.A); p != nil && !p.alive() {
			return w.restart(f.A)
		}
	case on && (f.Kind == Pause || f.Kind == Partition):
		// Streams across a cut or into a paused process break (a
		// paused process's peers time out).
		w.net.cut(f.A, f.B)
	}
	return nil
}

// primary is the serving master of the highest term, if any.
func (r *run) primary() (*master.Master, *Proc) {
	var best *master.Master
	var bp *Proc
	var bt int64
	for _, p := range r.w.sortedProcs() {
		if p.node == nil || !p.alive() {
			continue
		}
		st := p.node.Status()
		if st.Role != ha.RolePrimary {
			continue
		}
		if m, err := p.node.Serving(); err == nil && st.Term > bt {
			best, bp, bt = m, p, st.Term
		}
	}
	return best, bp
}

// sample checks the invariants that hold at every moment.
func (r *run) sample() error {
	w := r.w
	for _, p := range w.sortedProcs() {
		if p.node == nil || !p.alive() {
			continue
		}
		if st := p.node.Status(); st.Role == ha.RolePrimary {
			if _, seen := r.primaries[st.Term]; !seen {
				w.Note("%s is the primary master at term %d", p.Name, st.Term)
				if st.Term > 1 {
					w.mu.Lock()
					w.stats.Failovers++
					w.mu.Unlock()
				}
			}
			if err := checkPrimaries(r.primaries, p.Name, st.Term); err != nil {
				return err
			}
		}
	}
	m, mp := r.primary()
	if m == nil {
		return nil
	}
	table := tableOf(m)
	held := r.held()
	for _, s := range r.shards {
		if err := checkTableTerms(table, held[s], s); err != nil {
			return fmt.Errorf("%w (primary %s)", err, mp.Name)
		}
		row, prev := table[s], r.owners[s]
		if row.Durable && (row.Node != prev.Node || row.Term != prev.Term) {
			w.Note("table of %s: %s on %q at term %d (%s)", mp.Name, s, row.Node, row.Term, row.State)
			if prev.Node != "" && row.Node != "" && row.Node != prev.Node && row.Term > prev.Term {
				r.moves = append(r.moves, Move{At: w.now(), Shard: s, From: prev.Node, To: row.Node, Term: row.Term, By: mp.Name})
			}
			if row.Node != "" {
				r.owners[s] = row
			}
		}
	}
	r.acksMu.Lock()
	defer r.acksMu.Unlock()
	return r.ackErr
}

func tableOf(m *master.Master) map[string]Row {
	out := map[string]Row{}
	for _, si := range m.Shards() {
		a := si.Assignment
		out[a.GetShard()] = Row{Node: a.GetNode(), Term: a.GetTerm(), Alloc: a.GetAllocation(), State: si.State, Durable: si.Durable}
	}
	return out
}

// held is every shard the live sidecars hold, by shard.
func (r *run) held() map[string][]Held {
	out := map[string][]Held{}
	for _, p := range r.w.sortedProcs() {
		srv := p.srv.Load()
		if srv == nil || !p.alive() {
			continue
		}
		for _, st := range srv.Shards() {
			out[st.Shard] = append(out[st.Shard], Held{Node: p.Name, Term: st.Term, Alloc: st.Shard + "/" + st.Allocation, State: st.State.String(), Fenced: st.Fenced})
		}
	}
	return out
}

// final checks the end of the quiet period: the cluster settled, no shard
// moved without cause, and every acknowledged op is in its shard's log.
func (r *run) final(router *client.Router) error {
	w := r.w
	m, mp := r.primary()
	if m == nil {
		return errors.New("no primary master at the end of the quiet period")
	}
	table := tableOf(m)
	for s, row := range table {
		if i := strings.IndexByte(row.Alloc, '/'); i < 0 {
			row.Alloc = s + "/" + row.Alloc
			table[s] = row
		}
	}
	byNode := map[string][]Held{}
	live := map[string]bool{}
	for _, p := range w.sortedProcs() {
		if p.srv.Load() != nil && p.alive() {
			live[p.Name] = true
			byNode[p.Name] = nil
		}
	}
	for _, hs := range r.held() {
		for _, h := range hs {
			byNode[h.Node] = append(byNode[h.Node], h)
		}
	}
	if err := checkSettled(r.shards, table, byNode, live); err != nil {
		return fmt.Errorf("%w (primary %s)", err, mp.Name)
	}
	if err := checkMoves(r.moves, r.plan.Faults, w.timing.ActiveTTL+w.timing.SuspicionTTL); err != nil {
		return err
	}
	for _, s := range r.shards {
		final := map[int64]string{}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := router.Read(ctx, s, 0, 0, func(b client.Batch) error {
			for i, op := range b.Ops {
				final[b.FirstSeqNo+int64(i)] = string(op)
			}
			return nil
		})
		cancel()
		if err != nil {
			return fmt.Errorf("final read of %s: %w", s, err)
		}
		r.acksMu.Lock()
		err = checkAcks(s, r.acks[s], final, true)
		r.acksMu.Unlock()
		if err != nil {
			return err
		}
	}
	w.Note("settled: every shard open on its table owner, %d moves, every acknowledged op read back", len(r.moves))
	return nil
}
