package masterbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/ha"
	"github.com/shardfence/shardfence/seal"
)

// HAOptions choose what RunHA measures, against which store.
type HAOptions struct {
	// Store is the root the benchmark clusters live under; Where names it
	// in the tables.
	Store *blobstore.Container
	Where string
	// Dir is the scratch directory for snapshot files.
	Dir string
	// SnapshotSizes are object counts for the snapshot table.
	SnapshotSizes []int
	// PromoteObjects is the object count of the promotion row (0 skips).
	PromoteObjects int
	// AppendClients are client counts for the log-append table.
	AppendClients  []int
	AppendDuration time.Duration
	// ProfileDir, when set, receives CPU profiles of every snapshot,
	// restore and standby bootstrap of the snapshot table
	// (snapshot-N.pprof, restore-N.pprof, standby-N.pprof).
	ProfileDir string
}

// profile starts a CPU profile named what-n in o.ProfileDir, if set, and
// returns its stop.
func (o HAOptions) profile(what string, n int) (stop func() error, err error) {
	if o.ProfileDir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(o.ProfileDir, fmt.Sprintf("%s-%d.pprof", what, n)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}

// running is a node and the end of its Run.
type running struct {
	*ha.Node
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop ends the node's Run and returns its result; it may be called again.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

func startNode(ctx context.Context, o HAOptions, store *blobstore.Container, cluster string, standby bool) (*running, error) {
	n, err := ha.New(ha.Options{
		Store: store, Cluster: cluster, Standby: standby, Node: "bench", Dir: o.Dir,
		Retain: seal.GCPolicy{RetainCheckpoints: 1}, PollInterval: 5 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &running{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- n.Run(ctx) }()
	return r, nil
}

// until polls cond until it holds, the node fails, or ctx ends.
func (r *running) until(ctx context.Context, cond func() bool) error {
	for !cond() {
		if st := r.Status(); st.Role == ha.RoleFailed {
			return st.Err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// serving waits until the node serves (primary) and returns its master.
func (r *running) serving(ctx context.Context) (*master.Master, error) {
	var m *master.Master
	err := r.until(ctx, func() bool {
		var err error
		m, err = r.Serving()
		return err == nil
	})
	return m, err
}

// peakHeap samples the heap (every allocated object, live or not yet
// collected) until stop is called and returns the highest reading. It
// reads runtime/metrics, which does not stop the world, every 5 ms.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	sample := func() {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		sample()
		return peak.Load()
	}
}

func clusterName(what string, n int) string {
	return fmt.Sprintf("bench-%s-%d-%d", what, n, time.Now().UnixNano())
}

// SnapshotRow is one line of the snapshot table.
type SnapshotRow struct {
	Objects     int
	Populate    time.Duration // restoring the objects through the log
	Snapshot    ha.SnapshotResult
	SnapPeak    uint64 // peak live heap while snapshotting
	Restore     time.Duration
	RestorePeak uint64
	Base        uint64 // live heap of the populated master alone
	// Restored is the live heap after the restore (after a GC): the
	// restored master alone.
	Restored uint64
	// Standby is a new standby's start to loaded and at the primary's
	// position (its bootstrap from the same snapshot).
	Standby time.Duration
}

// BenchSnapshot populates a primary with n objects (through the log),
// takes a complete snapshot (freeze, encode, upload, publish), then starts
// a new primary on the same log and times its restore.
func BenchSnapshot(ctx context.Context, o HAOptions, n int) (SnapshotRow, error) {
	row := SnapshotRow{Objects: n}
	cluster := clusterName("snapshot", n)
	runtime.GC()
	p, err := startNode(ctx, o, o.Store, cluster, false)
	if err != nil {
		return row, err
	}
	m, err := p.serving(ctx)
	if err != nil {
		return row, err
	}
	start := time.Now()
	if err := Populate(ctx, m, n); err != nil {
		return row, err
	}
	row.Populate = time.Since(start)
	row.Base = heapInUse()
	stopProf, err := o.profile("snapshot", n)
	if err != nil {
		return row, err
	}
	stop := peakHeap()
	row.Snapshot, err = p.Snapshot(ctx)
	row.SnapPeak = stop()
	if perr := stopProf(); err == nil {
		err = perr
	}
	if err != nil {
		return row, err
	}
	if err := p.stop(); err != nil {
		return row, err
	}
	p, m = nil, nil
	runtime.GC()
	if stopProf, err = o.profile("restore", n); err != nil {
		return row, err
	}
	stop = peakHeap()
	start = time.Now()
	r, err := startNode(ctx, o, o.Store, cluster, false)
	if err != nil {
		return row, err
	}
	m2, err := r.serving(ctx)
	row.Restore = time.Since(start)
	row.RestorePeak = stop()
	if perr := stopProf(); err == nil {
		err = perr
	}
	if err != nil {
		return row, err
	}
	defer r.stop()
	if got := m2.Stats().Objects; got != uint64(n) {
		return row, fmt.Errorf("restored %d objects, want %d", got, n)
	}
	// The restored primary gives the bench client a fresh active window;
	// it pings like a live client from now on, or the offboarding of a
	// silent client would start removing its objects (and logging that)
	// while the heap is measured and the standby loads.
	defer pingAsClient(ctx, m2)()
	row.Restored = heapInUse()
	// A new standby beside it: the same snapshot, then the log after it
	// (empty here).
	if stopProf, err = o.profile("standby", n); err != nil {
		return row, err
	}
	want := r.Status().Position
	start = time.Now()
	s, err := startNode(ctx, o, o.Store, cluster, true)
	if err != nil {
		return row, err
	}
	// At or past the primary's position when the standby started (the
	// primary may log more meanwhile, e.g. lease renewals).
	err = s.until(ctx, func() bool { st := s.Status(); return st.Bootstrapped && st.Position.Gen >= want.Gen })
	row.Standby = time.Since(start)
	if perr := stopProf(); err == nil {
		err = perr
	}
	if serr := s.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return row, err
	}
	return row, r.stop()
}

// PromoteRow is the promotion measurement.
type PromoteRow struct {
	Objects int
	Promote time.Duration // the Promote call: claim, seal, replay the tail, open
	Remount time.Duration // the first segment's remount after it
	Result  ha.PromoteResult
}

// BenchPromotion has a standby tail a primary of n objects (bootstrapped
// from a snapshot, then the log), promotes it and remounts the segment:
// the time from the promote request to the first serving segment.
func BenchPromotion(ctx context.Context, o HAOptions, n int) (PromoteRow, error) {
	row := PromoteRow{Objects: n}
	cluster := clusterName("promote", n)
	p, err := startNode(ctx, o, o.Store, cluster, false)
	if err != nil {
		return row, err
	}
	defer p.stop()
	m, err := p.serving(ctx)
	if err != nil {
		return row, err
	}
	if err := Populate(ctx, m, n); err != nil {
		return row, err
	}
	if _, err := p.Snapshot(ctx); err != nil {
		return row, err
	}
	// A last change after the snapshot, for the standby to tail.
	if err := m.Remove(ctx, "bench", Key(0), true); err != nil {
		return row, err
	}
	s, err := startNode(ctx, o, o.Store, cluster, true)
	if err != nil {
		return row, err
	}
	defer s.stop()
	want := p.Status().Position
	if err := s.until(ctx, func() bool { return s.Status().Position == want }); err != nil {
		return row, err
	}
	start := time.Now()
	row.Result, err = s.Promote(ctx)
	if err != nil {
		return row, err
	}
	row.Promote = time.Since(start)
	m2, err := s.serving(ctx)
	if err != nil {
		return row, err
	}
	if _, err := Remount(ctx, m2, n); err != nil {
		return row, err
	}
	row.Remount = time.Since(start) - row.Promote
	return row, nil
}

// AppendRow is one line of the log-append table.
type AppendRow struct {
	Clients   int
	Mutations int64
	Elapsed   time.Duration
	P50, P99  time.Duration
	Writes    uint64 // store writes (PUT, create, CAS) during the run
	Appends   uint64 // log generations during the run
}

// BenchAppend runs clients that each put objects in a closed loop
// (PutStart, then PutEnd, which is logged and answered after its
// generation is acknowledged) and reports the PutEnd latency and the store
// writes per logged mutation.
func BenchAppend(ctx context.Context, o HAOptions, clients int, d time.Duration) (AppendRow, error) {
	row := AppendRow{Clients: clients}
	store := metered.New(o.Store, "bench")
	p, err := startNode(ctx, o, store.Container, clusterName("append", clients), false)
	if err != nil {
		return row, err
	}
	defer p.stop()
	m, err := p.serving(ctx)
	if err != nil {
		return row, err
	}
	if err := m.MountSegment(ctx, "bench", master.SegmentSpec{ID: 1, Name: "bench", Size: 1 << 40, Endpoint: "bench:1"}); err != nil {
		return row, err
	}
	// Past the new term's placement wait, before measuring.
	if _, err := m.PutStart(ctx, master.PutRequest{Client: "bench", Tenant: "bench", Key: "warm", Size: ObjectSize}); err != nil {
		return row, err
	}
	// The bench client pings like a live client, so a long run does not
	// see it suspected (and its segment refused) after the active TTL.
	defer pingAsClient(ctx, m)()
	before := store.Snapshot()
	appendsBefore := p.Status().Position.Gen
	var mu sync.Mutex
	var lats []time.Duration
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; time.Now().Before(stop); i++ {
				k := "c" + strconv.Itoa(c) + "/" + strconv.Itoa(i)
				if _, err := m.PutStart(ctx, master.PutRequest{Client: "bench", Tenant: "bench", Key: k, Size: ObjectSize}); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				t := time.Now()
				if err := m.PutEnd(ctx, "bench", "bench", k); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	row.Elapsed = time.Since(start)
	if e := firstErr.Load(); e != nil {
		return row, *e
	}
	row.Writes = store.Snapshot().Sub(before).Writes()
	row.Appends = uint64(p.Status().Position.Gen - appendsBefore)
	row.Mutations = int64(len(lats))
	slices.Sort(lats)
	if len(lats) > 0 {
		row.P50, row.P99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	return row, nil
}

// RunHA prints the snapshot, promotion and log-append tables.
func RunHA(ctx context.Context, w io.Writer, o HAOptions) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	if len(o.SnapshotSizes) > 0 {
		fmt.Fprintf(w, "Complete snapshot and restore (store: %s, one replica per object, GOMAXPROCS=%d)\n", o.Where, runtime.GOMAXPROCS(0))
		fmt.Fprintln(tw, "objects\tpopulate (logged)\tsnapshot\tpause\tcopy\tbytes\tB/object\tpeak heap\trestore\tpeak heap\trestored heap\tpeak/restored\tmaster heap\tnew standby\t")
		for _, n := range o.SnapshotSizes {
			r, err := BenchSnapshot(ctx, o, n)
			if err != nil {
				return fmt.Errorf("snapshot of %d objects: %w", n, err)
			}
			fmt.Fprintf(tw, "%d\t%v\t%v\t%v\t%v\t%d\t%.1f\t%.0f MiB\t%v\t%.0f MiB\t%.0f MiB\t%.2f\t%.0f MiB\t%v\t\n", n, r.Populate.Round(time.Millisecond),
				r.Snapshot.Duration.Round(time.Millisecond), r.Snapshot.Pause.Round(time.Microsecond), r.Snapshot.Copy.Round(time.Millisecond), r.Snapshot.Bytes,
				float64(r.Snapshot.Bytes)/float64(max(n, 1)), mib(r.SnapPeak), r.Restore.Round(time.Millisecond), mib(r.RestorePeak), mib(r.Restored),
				float64(r.RestorePeak)/float64(max(r.Restored, 1)), mib(r.Base), r.Standby.Round(time.Millisecond))
			runtime.GC()
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if o.PromoteObjects > 0 {
		r, err := BenchPromotion(ctx, o, o.PromoteObjects)
		if err != nil {
			return fmt.Errorf("promotion: %w", err)
		}
		fmt.Fprintf(w, "Promotion of a hot standby to the first serving segment (store: %s)\n", o.Where)
		fmt.Fprintln(tw, "objects\tpromote\treplayed gens\tremount\tpromote to serving\t")
		fmt.Fprintf(tw, "%d\t%v\t%d\t%v\t%v\t\n", r.Objects, r.Promote.Round(time.Millisecond), r.Result.ReplayedGens,
			r.Remount.Round(time.Millisecond), (r.Promote + r.Remount).Round(time.Millisecond))
		tw.Flush()
		fmt.Fprintln(w)
		runtime.GC()
	}
	if len(o.AppendClients) > 0 {
		fmt.Fprintf(w, "Operation log cost per mutation (PutEnd answered after its generation is acknowledged; store: %s, %v per row)\n", o.Where, o.AppendDuration)
		fmt.Fprintln(tw, "clients\tmutations/s\tp50 ack\tp99 ack\tgenerations\tmutations/generation\tstore writes/mutation\t")
		for _, c := range o.AppendClients {
			r, err := BenchAppend(ctx, o, c, o.AppendDuration)
			if err != nil {
				return fmt.Errorf("append with %d clients: %w", c, err)
			}
			fmt.Fprintf(tw, "%d\t%.0f\t%v\t%v\t%d\t%.1f\t%.3f\t\n", c, float64(r.Mutations)/r.Elapsed.Seconds(), r.P50.Round(time.Microsecond),
				r.P99.Round(time.Microsecond), r.Appends, float64(r.Mutations)/float64(max(r.Appends, 1)), float64(r.Writes)/float64(max(r.Mutations, 1)))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	return nil
}

// pingAsClient pings m every second as the bench's client ("bench") until
// the function it returns is called.
func pingAsClient(ctx context.Context, m *master.Master) (stop func()) {
	ctx, stop = context.WithCancel(ctx)
	go func() {
		for ctx.Err() == nil {
			_, _ = m.Ping(ctx, "bench")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return stop
}
