// Package masterbench measures the master: remount recovery-lease
// assignment at scale, heap bytes per object, GetReplicaList throughput in
// process and through the API, and allocations per lease grant. The
// `shardfence bench master` command prints its tables.
package masterbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/client"
)

// ObjectSize is the size of every benchmark object; only metadata is
// measured, so it matters only for offsets.
const ObjectSize = 4096

// Key names benchmark object i.
func Key(i int) string { return "bench/object/" + strconv.Itoa(i) }

// Populate restores n one-replica objects on segment 1 of client "bench",
// as a promoted standby would: through RestoreStandby, in batches, so the
// objects are unreadable until remounted.
func Populate(ctx context.Context, m *master.Master, n int) error {
	segs := []*masterv1.StandbySegment{{Id: 1, Name: "bench", ClientId: "bench", Size: uint64(max(n, 1)) * ObjectSize}}
	const batch = 100_000
	for lo := 0; lo < n || lo == 0; lo += batch {
		hi := min(lo+batch, n)
		objs := make([]*masterv1.StandbyObject, 0, hi-lo)
		for i := lo; i < hi; i++ {
			objs = append(objs, &masterv1.StandbyObject{
				Tenant: "bench", Key: Key(i), ClientId: "bench", Size: ObjectSize,
				Replicas: []*masterv1.StandbyReplica{{
					Id: uint64(i + 1), Kind: masterv1.ReplicaKind_REPLICA_KIND_MEMORY, Status: masterv1.ReplicaStatus_REPLICA_STATUS_COMPLETE,
					SegmentId: 1, Offset: uint64(i) * ObjectSize, Size: ObjectSize,
				}},
			})
		}
		if _, err := m.RestoreStandby(ctx, segs, objs); err != nil {
			return err
		}
		segs = nil
		if n == 0 {
			break
		}
	}
	return nil
}

// Remount remounts the segment Populate restored.
func Remount(ctx context.Context, m *master.Master, n int) (master.RemountResult, error) {
	return m.ReMountSegment(ctx, "bench", []master.SegmentSpec{{ID: 1, Name: "bench", Size: uint64(max(n, 1)) * ObjectSize, Endpoint: "bench:1"}})
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// RemountRow is one line of the remount table.
type RemountRow struct {
	Objects       int
	HeapPerObject float64 // bytes of live heap per restored object
	Populate      time.Duration
	Result        master.RemountResult
}

// BenchRemount restores n objects and remounts their segment with the
// default configuration (10 s recovery TTL).
func BenchRemount(ctx context.Context, n int) (RemountRow, error) {
	before := heapInUse()
	m, err := master.New(master.Config{}, master.Options{})
	if err != nil {
		return RemountRow{}, err
	}
	start := time.Now()
	if err := Populate(ctx, m, n); err != nil {
		return RemountRow{}, err
	}
	row := RemountRow{Objects: n, Populate: time.Since(start)}
	row.HeapPerObject = float64(heapInUse()-before) / float64(max(n, 1))
	row.Result, err = Remount(ctx, m, n)
	runtime.KeepAlive(m)
	return row, err
}

// ReadRow is one line of the read-throughput table.
type ReadRow struct {
	Path    string // "in process" or "API (connect)"
	Clients int
	Ops     uint64
	Elapsed time.Duration
}

// OpsPerSec is the measured throughput.
func (r ReadRow) OpsPerSec() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

type reader func(ctx context.Context, key string) error

func runReaders(ctx context.Context, clients int, d time.Duration, keys int, read reader) (uint64, time.Duration, error) {
	var ops atomic.Uint64
	var firstErr atomic.Pointer[error]
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			i := c * 7919
			for n := 0; ; n++ {
				if n%64 == 0 && time.Now().After(stop) {
					return
				}
				if err := read(ctx, Key(i%keys)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				ops.Add(1)
				i += 104729
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, 0, *p
	}
	return ops.Load(), time.Since(start), nil
}

// BenchReads measures GetReplicaList with each client count, in process and
// through a real HTTP server on 127.0.0.1.
func BenchReads(ctx context.Context, keys int, clientCounts []int, d time.Duration) ([]ReadRow, error) {
	m, err := master.New(master.Config{}, master.Options{})
	if err != nil {
		return nil, err
	}
	if err := Populate(ctx, m, keys); err != nil {
		return nil, err
	}
	if _, err := Remount(ctx, m, keys); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	path, h := master.NewHandler(m)
	mux.Handle(path, h)
	srv := &http.Server{Handler: mux}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	var rows []ReadRow
	for _, n := range clientCounts {
		var buf sync.Pool
		ops, el, err := runReaders(ctx, n, d, keys, func(ctx context.Context, key string) error {
			b, _ := buf.Get().(*[]master.ReplicaInfo)
			if b == nil {
				b = new([]master.ReplicaInfo)
			}
			var err error
			*b, err = m.AppendReplicaList(ctx, (*b)[:0], "bench", key)
			buf.Put(b)
			return err
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, ReadRow{Path: "in process", Clients: n, Ops: ops, Elapsed: el})
	}
	for _, h2 := range []bool{false, true} {
		for _, n := range clientCounts {
			tr := &http.Transport{MaxIdleConnsPerHost: n}
			path := "API (connect, HTTP/1.1)"
			if h2 {
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
				path = "API (connect, h2c)"
			}
			c := client.New(&http.Client{Transport: tr}, "http://"+ln.Addr().String())
			ops, el, err := runReaders(ctx, n, d, keys, func(ctx context.Context, key string) error {
				_, _, err := c.GetReplicaList(ctx, "bench", key)
				return err
			})
			tr.CloseIdleConnections()
			if err != nil {
				return nil, err
			}
			rows = append(rows, ReadRow{Path: path, Clients: n, Ops: ops, Elapsed: el})
		}
	}
	return rows, nil
}

// AllocsPerLeaseGrant measures heap allocations of the read-lease path
// (Exist: shard lookup plus lease grant) over many calls.
func AllocsPerLeaseGrant(ctx context.Context) (float64, error) {
	m, err := master.New(master.Config{}, master.Options{})
	if err != nil {
		return 0, err
	}
	if err := Populate(ctx, m, 1000); err != nil {
		return 0, err
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = Key(i)
	}
	const calls = 100_000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < calls; i++ {
		if ok, err := m.Exist(ctx, "bench", keys[i%len(keys)]); !ok || err != nil {
			return 0, fmt.Errorf("exist %s: %v %v", keys[i%len(keys)], ok, err)
		}
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / calls, nil
}

// Options choose what Run measures.
type Options struct {
	RemountSizes []int
	ReadClients  []int
	ReadKeys     int
	ReadDuration time.Duration
}

// Run prints every table.
func Run(ctx context.Context, w io.Writer, o Options) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(o.RemountSizes) > 0 {
		if err := remountTable(ctx, w, tw, o.RemountSizes); err != nil {
			return err
		}
	}
	if len(o.ReadClients) > 0 {
		rows, err := BenchReads(ctx, o.ReadKeys, o.ReadClients, o.ReadDuration)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "GetReplicaList throughput (%d objects, %v per row, GOMAXPROCS=%d)\n", o.ReadKeys, o.ReadDuration, runtime.GOMAXPROCS(0))
		fmt.Fprintln(tw, "path\tclients\tops/s\t")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t\n", r.Path, r.Clients, r.OpsPerSec())
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	allocs, err := AllocsPerLeaseGrant(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "allocations per lease grant (Exist path): %.2f\n", allocs)
	return nil
}

func remountTable(ctx context.Context, w io.Writer, tw *tabwriter.Writer, sizes []int) error {
	fmt.Fprintf(w, "Remount recovery lease (one replica per object, default 10 s recovery TTL, GOMAXPROCS=%d)\n", runtime.GOMAXPROCS(0))
	fmt.Fprintln(tw, "objects\theap B/object\tpopulate\tcollect\trebuild\tassign\tremount total\tvisible TTL at publish\t")
	for _, n := range sizes {
		row, err := BenchRemount(ctx, n)
		if err != nil {
			return err
		}
		r := row.Result
		fmt.Fprintf(tw, "%d\t%.0f\t%v\t%v\t%v\t%v\t%v\t%v\t\n", n, row.HeapPerObject, row.Populate.Round(time.Millisecond),
			r.CollectDuration.Round(time.Millisecond), r.RebuildDuration.Round(time.Millisecond),
			r.AssignDuration.Round(time.Millisecond), r.TotalDuration.Round(time.Millisecond), r.VisibleTTL.Round(time.Millisecond))
		runtime.GC()
	}
	tw.Flush()
	fmt.Fprintln(w)
	return nil
}
