// Package fleetbench measures how large a fleet one master carries: a
// primary master and a hot standby, each its own process over a real
// store, and many sidecar nodes simulated in this process that speak the
// master's API as sidecar/agent does (RegisterNode, Ping at the interval
// the master names, WatchAssignments, ReportShard) but open nothing: a
// node reports every shard it is assigned open at once.
//
// It assigns auto-restore shards through AssignShard as `shardfence master
// assign --auto-restore` does, then measures the primary's CPU and memory
// at steady state (pings only), the store requests and bytes both masters
// send per hour, the time to move the shards of one node that stops
// pinging, and the time for the standby, once the primary is killed, to
// serve the whole table.
package fleetbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/harness/cost"
)

// Proc is a master process the bench started.
type Proc struct {
	// Base is its API URL (http://HOST:PORT); it serves /metrics and, for
	// the profile, /debug/pprof there.
	Base string
	// Kill SIGKILLs it and waits for it to exit.
	Kill func()
}

// Config is one run.
type Config struct {
	// Nodes and Shards size the fleet; LostShards of the shards are
	// assigned to the node that is then lost (the rest go where the
	// master places them, the least loaded node).
	Nodes, Shards, LostShards int
	// Store is the store URL (redacted) the nodes register: the shards'
	// store. Where names the masters' store in the table.
	Store, Where string
	// StartMaster starts master name of the cluster, a standby or not.
	StartMaster func(ctx context.Context, name string, standby bool) (Proc, error)
	// ElectionTimeout is the masters' --election-timeout, subtracted from
	// the promotion figure.
	ElectionTimeout time.Duration
	// Steady is the measuring window at steady state.
	Steady time.Duration
	// Registrations and Assigns are how many run at once.
	Registrations, Assigns int
	// ProfileDir, when set, receives master.pprof: the primary's CPU
	// profile over the steady window (the master needs --pprof).
	ProfileDir string
	// Price prices the store requests.
	Price cost.Price
	// Progress gets a line per phase.
	Progress io.Writer
}

// Result is what a run measured, and what it checked.
type Result struct {
	Nodes, Shards int
	Register      time.Duration // every node registered and active
	Assign        time.Duration // every shard assigned, durably
	Opened        time.Duration // from the first assign to every shard reported open
	AssignRetries atomic.Int64  // assigns the primary answered unavailable (asked again)
	// Steady state, over the window.
	Window                 time.Duration
	PingsPerSec            float64
	PingErrors             int64   // pings that failed in the window
	Registrations          int64   // nodes that registered (again) in the window
	CPU, StandbyCPU        float64 // CPU seconds per wall second
	RSS, StandbyRSS        float64 // bytes
	Heap                   float64 // the primary's Go heap in use, bytes
	Goroutines             float64
	PutPerHour, GetPerHour float64 // both masters' store requests
	WritesPerHour          float64 // of the PUT-class, the writes (the rest are LISTs)
	BytesPerHour           float64 // body bytes written by both
	LogGensPerHour         float64 // the primary's log generations
	USDPerHour             float64
	// The lost node.
	LostNode     string
	LostShards   int
	ActiveTTL    time.Duration
	SuspicionTT  time.Duration
	Move         time.Duration // its last answered ping to all its shards open elsewhere
	MoveTaken    time.Duration // its last answered ping to all its shards recorded on other nodes
	MoveStalls   int           // liveness monitor stalls meanwhile (each extends every window by the time unobserved)
	FeedRestarts int           // times the routing feed of its shards ended and was followed again
	MovedOpen    int           // of its shards, open on another node at the end
	// Promotion.
	Promote       time.Duration // kill of the primary to the standby serving the whole table
	Elected       time.Duration // kill of the primary to the standby saying it is primary
	PromotedRows  int           // shards in the promoted master's first complete answer
	PromotedNodes int
	SameOwners    int           // of those, with the node, term and allocation the primary had
	Refleet       time.Duration // kill to every live node registered with the new primary and every shard open
	MovedAfter    int           // shards whose owner or term changed from the old primary's table to then
}

// assign assigns as an operator's script would: a master that answers
// unavailable (its leadership lapsed while the store was slow, or its log
// failed) is asked again for up to a minute, and a shard found assigned
// by an earlier attempt whose answer was lost counts as assigned.
func assign(ctx context.Context, fc masterv1connect.MasterFleetServiceClient, req *masterv1.AssignShardRequest, retries *atomic.Int64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := fc.AssignShard(ctx, connect.NewRequest(req))
		switch {
		case err == nil:
			return nil
		case connect.CodeOf(err) == connect.CodeAlreadyExists && strings.Contains(err.Error(), "SHARD_ASSIGNED") || strings.Contains(err.Error(), "already assigned"):
			return nil
		case connect.CodeOf(err) == connect.CodeUnavailable && time.Now().Before(deadline):
			retries.Add(1)
			if err := clock.Sleep(ctx, benchClock, 200*time.Millisecond); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

func shardName(i int) string { return fmt.Sprintf("fleet-%06d", i) }

func printTable(w io.Writer, cfg Config, r *Result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
	mib := func(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
	fmt.Fprintf(w, "fleet: %d nodes, %d auto-restore shards, masters over %s (a primary and a standby, separate processes)\n\n", r.Nodes, r.Shards, cfg.Where)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "register all\tassign all\tall open\tpings/s\tfailed pings\tprimary CPU (s/s)\tCPU per ping\tprimary RSS\tprimary heap\tgoroutines\tstandby CPU (s/s)\tstandby RSS\t")
	perPing := math.NaN()
	if r.PingsPerSec > 0 {
		perPing = r.CPU / r.PingsPerSec * 1e6
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%d\t%.3f\t%.0f µs\t%s\t%s\t%.0f\t%.3f\t%s\t\n", ms(r.Register), ms(r.Assign), ms(r.Opened), r.PingsPerSec, r.PingErrors, r.CPU, perPing,
		mib(r.RSS), mib(r.Heap), r.Goroutines, r.StandbyCPU, mib(r.StandbyRSS))
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "store PUT-class/h\tof which writes\tGET-class/h\tbytes written/h\tlog generations/h\tUSD/h (%s)\tUSD/month\t\n", cfg.Price.Name())
	fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%.1f MB\t%.0f\t%.4f\t%.2f\t\n", r.PutPerHour, r.WritesPerHour, r.GetPerHour, r.BytesPerHour/1e6, r.LogGensPerHour, r.USDPerHour, r.USDPerHour*730)
	_ = tw.Flush()
	fmt.Fprintln(w)
	detect := r.ActiveTTL + r.SuspicionTT
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lost node's shards\tactive + suspicion TTL\tlast ping to all recorded elsewhere\tlast ping to all open elsewhere\tbeyond detection\tmonitor stalls\t")
	fmt.Fprintf(tw, "%d\t%v\t%s\t%s\t%s\t%d\t\n", r.LostShards, detect, ms(r.MoveTaken), ms(r.Move), ms(r.Move-detect), r.MoveStalls)
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "election timeout\tkill to primary\tkill to whole table served\tminus the timeout\tshards\tnodes\tsame owner and term\tkill to every node back, all open\tshards moved\t")
	fmt.Fprintf(tw, "%v\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t\n", cfg.ElectionTimeout, ms(r.Elected), ms(r.Promote), ms(r.Promote-cfg.ElectionTimeout), r.PromotedRows, r.PromotedNodes, r.SameOwners, ms(r.Refleet), r.MovedAfter)
	_ = tw.Flush()
	fmt.Fprintln(w)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	limit, met := moveTarget(r)
	fmt.Fprintf(w, "target lost node: all open elsewhere within detection + 1 s (%v): %s (%s)\n", limit, ms(r.Move), verdict(met))
	limit, met = promotionTarget(r, cfg.ElectionTimeout)
	fmt.Fprintf(w, "target promotion: whole table served within the election timeout + 2 s (%v): %s (%s)\n", limit, ms(r.Promote), verdict(met))
}

func poll(ctx context.Context, limit, every time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("fleetbench: waited %v for %s", limit, what)
		}
		if err := clock.Sleep(ctx, benchClock, every); err != nil {
			return err
		}
	}
	return nil
}

func listShards(ctx context.Context, fc masterv1connect.MasterFleetServiceClient) (map[string]*masterv1.ShardInfo, error) {
	res, err := fc.ListShards(ctx, connect.NewRequest(&masterv1.ListShardsRequest{}))
	if err != nil {
		return nil, err
	}
	out := make(map[string]*masterv1.ShardInfo, len(res.Msg.GetShards()))
	for _, s := range res.Msg.GetShards() {
		out[s.GetAssignment().GetShard()] = s
	}
	return out, nil
}

func countOpen(rows map[string]*masterv1.ShardInfo) int {
	n := 0
	for _, s := range rows {
		if s.GetState() == "open" {
			n++
		}
	}
	return n
}

func activeNodes(ctx context.Context, fc masterv1connect.MasterFleetServiceClient) int {
	res, err := fc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
	if err != nil {
		return -1
	}
	n := 0
	for _, nd := range res.Msg.GetNodes() {
		if nd.GetState() == "active" {
			n++
		}
	}
	return n
}

func scrape(ctx context.Context, hc *http.Client, base string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(res.Body)
}

func fetchProfile(ctx context.Context, base string, d time.Duration) ([]byte, error) {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return nil, err
	}
	res, err := (&http.Client{Timeout: d + time.Minute}).Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/debug/pprof/profile: %s", base, res.Status)
	}
	return io.ReadAll(res.Body)
}

// delta is a counter's increase between two scrapes, over the series keep
// accepts (nil: all).
func delta(a, b map[string]*dto.MetricFamily, name string, keep func(map[string]string) bool) float64 {
	sum := func(fams map[string]*dto.MetricFamily) float64 {
		var s float64
		f := fams[name]
		if f == nil {
			return 0
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if keep != nil && !keep(l) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				s += c.GetValue()
			} else {
				s += m.GetUntyped().GetValue()
			}
		}
		return s
	}
	return sum(b) - sum(a)
}

func gauge(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return math.NaN()
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}
